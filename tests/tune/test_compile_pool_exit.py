"""A compile pool's processes end with the tuner that started them, even when it is killed
with SIGKILL (workers/_worker_server.py, start_compile_pool): they wait on a queue they
hold both ends of and would otherwise wait for good (and, forked from a served command,
hold its GPU workers' pipes open)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

#: a process that starts a compile pool from its main thread, says its processes and is
#: killed with SIGKILL
KILLED_TUNER = """
import multiprocessing, os, signal, sys
from mneme.tune.workers._worker_server import start_compile_pool
if __name__ == "__main__":
    pool = start_compile_pool(3, multiprocessing.get_context(sys.argv[1]))
    pids = {pool.submit(os.getpid).result() for _ in range(12)}
    print(" ".join(map(str, sorted(pids))), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_the_compile_pool_ends_with_a_killed_tuner(tmp_path, method):
    script = tmp_path / "tuner.py"
    script.write_text(KILLED_TUNER)
    # (its output's end is not waited for: a workers' fork server left alive holds it)
    tuner = subprocess.Popen([sys.executable, str(script), method], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    with tuner.stdout:
        said = tuner.stdout.readline()
    assert tuner.wait(timeout=120) == -signal.SIGKILL
    pids = [int(p) for p in said.split()]
    assert pids and os.getpid() not in pids
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if _alive(p)]
    for pid in left:  # (not to leave them to the next test)
        os.kill(pid, signal.SIGKILL)
    assert not left, f"compile processes {left} outlived their tuner"
