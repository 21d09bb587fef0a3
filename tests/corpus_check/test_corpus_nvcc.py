"""Cross-check: every CUDA corpus TU also compiles with nvcc -arch=sm_90 (compile only).

Programs whose manifest has "nvcc": {"flags": [...]} get those flags (e.g. --extended-lambda
for clang-style device lambdas, -rdc=true for relocatable device code); "nvcc": {"skip": why}
opts a program out.
"""

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from corpus_support import CUDA_PROGRAMS, MAX_JOBS, corpus_build

pytestmark = pytest.mark.slow


def _nvcc_compile(nvcc, program, out_dir):
    """None when every TU compiles, else nvcc's error output."""
    for source in program.sources:
        cmd = [
            nvcc,
            "-arch=sm_90",
            f"-I{corpus_build.CUDA_COMMON_DIR}",
            *program.nvcc.get("flags", []),
            "-c",
            str(program.directory / source),
            "-o",
            str(out_dir / (program.name + "." + source + ".o")),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            return f"{' '.join(cmd)}\n{proc.stderr}"
    return None


@pytest.fixture(scope="module")
def nvcc_errors(tmp_path_factory):
    nvcc = shutil.which("nvcc") or shutil.which(str(corpus_build.find_cuda_root() / "bin" / "nvcc"))
    if nvcc is None:
        pytest.skip("nvcc not installed")
    out_dir = tmp_path_factory.mktemp("nvcc")
    todo = [p for p in CUDA_PROGRAMS if "skip" not in p.nvcc]
    with ThreadPoolExecutor(max_workers=MAX_JOBS) as pool:
        return dict(
            zip(
                [p.name for p in todo],
                pool.map(lambda p: _nvcc_compile(nvcc, p, out_dir), todo),
                strict=True,
            )
        )


@pytest.mark.parametrize("program", CUDA_PROGRAMS, ids=lambda p: p.name)
def test_compiles_with_nvcc(nvcc_errors, program):
    if "skip" in program.nvcc:
        pytest.skip(program.nvcc["skip"])
    assert nvcc_errors[program.name] is None, nvcc_errors[program.name]
