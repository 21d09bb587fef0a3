"""Run every CUDA corpus program on a real GPU and check its own protocol output."""

import subprocess
from collections import defaultdict

import pytest
from corpus_support import CUDA_PROGRAMS, checklines, gpu_available, outcome

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _needs_gpu():
    if not gpu_available():
        pytest.skip("no CUDA driver or GPU on this machine")


@pytest.mark.parametrize("program", CUDA_PROGRAMS, ids=lambda p: p.name)
def test_program_runs_and_reports_every_launch(corpus_outputs, program):
    result = outcome(corpus_outputs, "build", "cuda", program.name)
    proc = subprocess.run(
        [str(result.executable), *program.args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == program.expect_exit, proc.stderr
    assert checklines.result_ok(proc.stdout) == (program.expect_exit == 0), proc.stderr
    checks = checklines.parse_output(proc.stdout)
    launches = defaultdict(lambda: {"before": [], "after": []})
    for c in checks:
        assert c.kernel in program.kernels
        launches[c.launch][c.phase].append((c.kernel, c.label, c.size))
    assert sorted(launches) == list(range(len(launches))), (
        "launch indices count from 0 without gaps"
    )
    for index, phases in launches.items():
        assert phases["before"] == phases["after"], f"launch {index}: same regions before and after"
    launched = {c.kernel for c in checks}
    silent = set(program.kernels) - launched
    # A kernel that touches no device memory reports no region (the protocol allows it);
    # such programs carry the no-buffer-kernel feature and print from the device instead.
    if "no-buffer-kernel" in program.features:
        assert len(silent) <= 1 and "device:" in proc.stdout
    else:
        assert not silent, "every kernel of the manifest is launched"
