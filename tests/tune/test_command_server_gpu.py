"""The command server on a GPU: a served `mneme tune` takes the server's warm GPU worker
(its context made while no command ran), or forks its GPU workers from its own process
before the CUDA driver is loaded there, never after (a context made before a fork is
unusable in the child), and tunes as an unserved one does."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mneme.runtime import driver_available
from test_command_server import _env, _mneme, _served
from tune_support import GOLDEN, SAXPY

pytestmark = pytest.mark.gpu

#: in a fresh process: forking is allowed, then refused once the driver is loaded
FORK_GUARD = """
from mneme.tune.workers import allow_fork_start, fork_context
from mneme.runtime import driver_available
assert fork_context() is None, "forking before it was allowed"
allow_fork_start()
assert fork_context() is not None, "forking refused before the driver was loaded"
assert driver_available()
assert fork_context() is None, "forking allowed with the CUDA driver loaded"
print("guard ok")
"""


@pytest.fixture(scope="module")
def gpu():
    if not driver_available():
        pytest.skip("no usable CUDA driver")


def test_no_fork_once_the_driver_is_loaded(gpu):
    run = subprocess.run([sys.executable, "-c", FORK_GUARD], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and "guard ok" in run.stdout, run.stderr


def test_a_served_tune_on_the_gpu(gpu, tmp_path):
    runtime = Path(tempfile.mkdtemp(prefix="ms-", dir="/tmp"))
    env = _env(runtime)
    try:
        assert _mneme(env, "server", "start", "--warm-workers", 0, "--idle-timeout", 600).returncode == 0
        status = _mneme(env, "server", "status").stdout
        assert "warm GPU workers for GPU(s) 0" in status, status
        # the default slots (GPU 0, one worker) take the warm worker, twice (the next set is
        # made once the first command ended); two workers on GPU 0 fork their own
        for index, extra in enumerate([(), (), ("--workers-per-device", 2)]):
            run = _mneme(env, "tune", "-rdb", GOLDEN, "-rid", SAXPY, "--space", "launch,pipeline",
                         "--trials", 20, "--storage", f"sqlite:///{tmp_path / f'{index}.sqlite3'}",
                         *extra, cwd=tmp_path)
            assert run.returncode == 0, run.stdout + run.stderr
            assert "20 trials this run" in run.stdout, run.stdout
            assert "baseline failed" not in run.stdout, run.stdout
            # its compile pool forked from the command beside its workers (or the warm
            # ones handed over): the executor's start waited for no workers' fork server
            line = next(x for x in run.stdout.splitlines() if x.startswith("time: "))
            assert "compile pool" not in line, line
        assert _served(env) == 3
        status = _mneme(env, "server", "status").stdout
        assert "2 handed out" in status, status
    finally:
        _mneme(env, "server", "stop")
        shutil.rmtree(runtime, ignore_errors=True)
