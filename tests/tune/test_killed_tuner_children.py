"""What a tuner started ends with it when it is killed with SIGKILL
(workers/_worker_server.py): the compile pool's processes, which wait on a queue they hold
both ends of (a thread in each watches the tuner), and a worker forked from the tuner's own
process (a command server's command: its GPU workers, every worker of a compile-only one),
which holds no copy of the tuner's end of its pipe and so sees that pipe end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

#: a process that starts a compile pool from its main thread, says its processes and is
#: killed with SIGKILL
KILLED_POOL_OWNER = """
import multiprocessing, os, signal, sys
from mneme.tune.workers._worker_server import start_compile_pool
if __name__ == "__main__":
    pool = start_compile_pool(3, multiprocessing.get_context(sys.argv[1]))
    pids = {pool.submit(os.getpid).result() for _ in range(12)}
    print(" ".join(map(str, sorted(pids))), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""

#: a process that forks a (compile-only) worker, says its pid and is killed with SIGKILL
KILLED_WORKER_OWNER = """
import multiprocessing, os, signal, sys, tempfile
from mneme.tune.workers._worker_server import start_worker_process, worker_spec
if __name__ == "__main__":
    process, conn, _ = start_worker_process(worker_spec(None, tempfile.mkdtemp()),
                                            context=multiprocessing.get_context(sys.argv[1]))
    assert conn.poll(120) and conn.recv()[0] == "hello"
    print(process.pid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _children_of_a_killed_tuner(tmp_path, script: str, method: str) -> list[int]:
    """Run ``script`` (it prints its children's pids and kills itself); wait up to 20 s
    for those to end and return the ones still alive (killed now, not to leave them)."""
    path = tmp_path / "tuner.py"
    path.write_text(script)
    # (its output's end is not waited for: a workers' fork server left alive holds it)
    tuner = subprocess.Popen([sys.executable, str(path), method], stdout=subprocess.PIPE,
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
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_the_compile_pool_ends_with_a_killed_tuner(tmp_path, method):
    left = _children_of_a_killed_tuner(tmp_path, KILLED_POOL_OWNER, method)
    assert not left, f"compile processes {left} outlived their tuner"


def test_a_forked_worker_ends_with_a_killed_tuner(tmp_path):
    left = _children_of_a_killed_tuner(tmp_path, KILLED_WORKER_OWNER, "fork")
    assert not left, "the forked worker outlived its tuner"
