"""`mneme tune` ends its own process without the interpreter's teardown (process_exit.py):
its exit handlers run, its storage is closed, its output is whole; inside another program
it returns as before."""

import os
import subprocess
import sys
import threading

import optuna
from mneme.tune.workers import end_process
from tune_support import GOLDEN, SAXPY

#: `mneme` as its console script runs it (arguments from the command line), with an exit
#: handler and a __main__ object whose finalizer runs only in the interpreter's teardown
AS_THE_CONSOLE_SCRIPT = """
import atexit, sys
from pathlib import Path
folder = Path(sys.argv[1])
atexit.register(lambda: (folder / "exit-handler-ran").touch())
class Teardown:
    def __init__(self, marker):
        self.marker, self.open = marker, open  # (module globals may be gone by then)
    def __del__(self):
        self.open(self.marker, "w").close()
kept = Teardown(str(folder / "teardown-ran"))
sys.argv = ["mneme", *sys.argv[2:]]
from mneme.cli.main import main
main()
"""


def _tune(tmp_path, *extra):
    storage = tmp_path / "t.sqlite3"
    command = [sys.executable, "-c", AS_THE_CONSOLE_SCRIPT, str(tmp_path), "tune", "-rdb",
               str(GOLDEN), "-rid", SAXPY, "--compile-only", "--trials", "6", "--space",
               "pipeline", "--storage", f"sqlite:///{storage}", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env=os.environ.copy()), storage


def test_the_command_ends_its_process_after_its_exit_handlers(tmp_path):
    run, storage = _tune(tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip().splitlines()[-1].startswith("time: "), run.stdout  # all printed
    assert (tmp_path / "exit-handler-ran").exists()
    assert not (tmp_path / "teardown-ran").exists(), "the interpreter's teardown ran"
    # The storage was closed: its write-ahead log checkpointed, every trial in the file.
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(("-wal", "-shm"))]
    summaries = optuna.study.get_all_study_summaries(f"sqlite:///{storage}")
    assert [s.n_trials for s in summaries] == [6]


def test_a_failed_command_keeps_its_exit_status(tmp_path):
    """Every trial failing is exit status 1, as before (here: a register cap no kernel takes)."""
    space = tmp_path / "broken.py"
    space.write_text(
        "from mneme.tune import Categorical, settings_with, space\n"
        "@space(Categorical('x', [1, 2]), name='broken')\n"
        "def broken(params, settings, ctx):\n"
        "    raise RuntimeError('no')\n")
    run, _ = _tune(tmp_path, "--space", f"{space}:broken")
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert "no configuration completed" in run.stderr


def test_a_thread_the_exit_would_wait_for_keeps_the_normal_exit():
    release = threading.Event()
    waiting = threading.Thread(target=release.wait)  # not a daemon: the exit waits for it
    waiting.start()
    try:
        end_process(0)  # returns: this process goes on
    finally:
        release.set()
        waiting.join()


#: the command as its console script runs it, its workers' server importing one module more
#: (its own exit handler leaves a file) and its pid written down
WITH_A_MARKED_SERVER = """
import os, sys
from pathlib import Path
folder = Path(sys.argv[1])
(folder / "server_marker.py").write_text(
    "import atexit, os\\n"
    "atexit.register(lambda: open(os.environ['MARKER'], 'w').close())\\n")
from multiprocessing import forkserver
from mneme.tune.workers import _worker_server
_worker_server.PRELOAD.append("server_marker")
real = forkserver.ensure_running
def ensure_running():
    real()
    (folder / "server-pid").write_text(str(forkserver._forkserver._forkserver_pid))
forkserver.ensure_running = ensure_running
sys.argv = ["mneme", *sys.argv[2:]]
from mneme.cli.main import main
main()
"""


def test_the_workers_server_ends_with_the_command_without_its_own_teardown(tmp_path):
    """The server's teardown (engine, NumPy, the JIT binding unloaded) ran after the command
    had ended and held its output open meanwhile: the command ends the server itself."""
    import time

    command = [sys.executable, "-c", WITH_A_MARKED_SERVER, str(tmp_path), "tune", "-rdb",
               str(GOLDEN), "-rid", SAXPY, "--compile-only", "--trials", "4", "--space",
               "pipeline", "--storage", f"sqlite:///{tmp_path / 't.sqlite3'}"]
    # (the server finds the marker's module on PYTHONPATH: it is given no sys.path)
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, "MARKER": str(tmp_path / "server-teardown-ran")}
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    assert "4 trials this run" in run.stdout
    pid = int((tmp_path / "server-pid").read_text())
    for _ in range(100):  # (reaped by whoever adopted it)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the workers' server {pid} outlived the command")
    assert not (tmp_path / "server-teardown-ran").exists(), "the server's teardown ran"


def test_stopping_the_workers_server_ends_it_by_its_signal():
    code = """
import os, signal
from multiprocessing import forkserver
from mneme.tune.workers import start_worker_server, stop_worker_server
start_worker_server()
pid = forkserver._forkserver._forkserver_pid
assert stop_worker_server()
_, status = os.waitpid(pid, 0)
print(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM)
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=os.environ.copy())
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True"]
