"""The command server (mneme.cli._server, `mneme server`): `mneme tune` handed to a resident
process that imported everything already, with the client's output, exit status,
signals, environment and folder; a client that goes away ends its command; other settings
find no server; changed code is refused and stops the server."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest
from tune_support import GOLDEN, SAXPY, one_line_error


def _env(runtime: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MNEME_SERVER"}  # (conftest: off)
    return {**env, "XDG_RUNTIME_DIR": str(runtime), **extra}


def _mneme(env, *args, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mneme.cli", *map(str, args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def _count(env, what: str) -> int:
    status = _mneme(env, "server", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    return int(re.search(rf"(\d+) {re.escape(what)}", status.stdout).group(1))


def _served(env) -> int:
    return _count(env, "command(s) served")


def _running(env) -> int:
    return _count(env, "running,")


@pytest.fixture
def server():
    """A server of this environment, in a runtime folder of its own (a short path: a
    socket's may not exceed 107 bytes); stopped afterwards."""
    runtime = Path(tempfile.mkdtemp(prefix="ms-", dir="/tmp"))
    env = _env(runtime)
    started = _mneme(env, "server", "start", "--idle-timeout", 600)  # (outlives no test run)
    assert started.returncode == 0 and "started" in started.stdout, started.stdout + started.stderr
    assert "no warm GPU workers (none asked for)" in started.stdout  # (the default)
    yield env
    stopped = _mneme(env, "server", "stop")
    assert stopped.returncode == 0, stopped.stderr
    shutil.rmtree(runtime, ignore_errors=True)


def _tune_args(storage: Path, trials: int = 6) -> list:
    return ["tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", trials,
            "--space", "pipeline", "--storage", f"sqlite:///{storage}"]


def test_tune_runs_on_the_server_with_the_clients_output_folder_and_status(server, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    run = _mneme(server, *_tune_args(Path("t.sqlite3")), cwd=work)  # (a path of the client's folder)
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip().splitlines()[-1].startswith("time: "), run.stdout  # all of it, here
    assert _served(server) == 1
    summaries = optuna.study.get_all_study_summaries(f"sqlite:///{work / 't.sqlite3'}")
    assert [s.n_trials for s in summaries] == [6]
    refused = _mneme(server, "tune", "-rdb", tmp_path / "missing.rdb", "-rid", SAXPY, "--compile-only")
    one_line_error(refused, "missing.rdb")
    assert _served(server) == 2
    # switched off: the command runs in its own process
    off = _mneme({**server, "MNEME_SERVER": "0"}, *_tune_args(tmp_path / "u.sqlite3"))
    assert off.returncode == 0, off.stderr
    assert _served(server) == 2


def test_other_settings_find_no_server(server, tmp_path):
    other = {**server, "MNEME_WORKER_START": "forkserver"}  # (read by the workers' start)
    run = _mneme(other, *_tune_args(tmp_path / "t.sqlite3"))
    assert run.returncode == 0, run.stderr
    assert _served(server) == 0
    status = _mneme(other, "server", "status")
    assert status.returncode == 1 and "none runs" in status.stdout


def test_ctrl_c_and_a_vanished_client_end_the_command(server, tmp_path):
    for ending in (signal.SIGINT, signal.SIGKILL):
        client = subprocess.Popen([sys.executable, "-m", "mneme.cli",
                                   *map(str, _tune_args(tmp_path / f"{ending}.sqlite3", 10**6))],
                                  env=server, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while _running(server) == 0:
            assert time.monotonic() < deadline and client.poll() is None, client.communicate()
            time.sleep(0.2)
        time.sleep(1.0)  # (in its search)
        client.send_signal(ending)
        out, err = client.communicate(timeout=60)
        if ending == signal.SIGINT:  # passed on: the command stops as after Ctrl-C here
            assert client.returncode == 1 and b"Aborted!" in err, (out, err)
        deadline = time.monotonic() + 30
        while _running(server):  # (SIGKILL: the command sees its client gone)
            assert time.monotonic() < deadline, "the command's process outlived its client"
            time.sleep(0.2)


def test_changed_code_is_refused_and_stops_the_server(tmp_path):
    """A file of the mneme namespace changed after the server imported it: the command runs
    in its own process, saying why, and the server ends."""
    runtime = Path(tempfile.mkdtemp(prefix="ms-", dir="/tmp"))
    portion = tmp_path / "portion" / "mneme"  # (another folder of the namespace package)
    portion.mkdir(parents=True)
    (portion / "stamp_probe.py").write_text("")
    path = os.pathsep.join(filter(None, [str(portion.parent), os.environ.get("PYTHONPATH")]))
    env = _env(runtime, PYTHONPATH=path)
    try:
        assert _mneme(env, "server", "start", "--idle-timeout", 600).returncode == 0
        time.sleep(0.01)
        (portion / "stamp_probe.py").write_text("# changed\n")
        again = _mneme(env, "server", "start")
        assert "already running" in again.stdout and "files changed" in again.stdout, again.stdout
        run = _mneme(env, *_tune_args(tmp_path / "t.sqlite3"))
        assert run.returncode == 0, run.stderr
        assert "mneme's files changed" in run.stderr and "running here" in run.stderr, run.stderr
        deadline = time.monotonic() + 30
        while _mneme(env, "server", "status").returncode == 0:
            assert time.monotonic() < deadline, "the stale server kept running"
            time.sleep(0.2)
    finally:
        _mneme(env, "server", "stop")
        shutil.rmtree(runtime, ignore_errors=True)


def test_stop_and_status_without_a_server(tmp_path):
    runtime = Path(tempfile.mkdtemp(prefix="ms-", dir="/tmp"))
    try:
        env = _env(runtime)
        stop = _mneme(env, "server", "stop")
        assert stop.returncode == 0 and "nothing to stop" in stop.stdout
        status = _mneme(env, "server", "status")
        assert status.returncode == 1 and "none runs" in status.stdout
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def test_warm_workers_that_cannot_start_are_given_up(tmp_path):
    """Warm workers asked for where no GPU driver loads: two failed starts, then none kept,
    saying why; commands are served as before."""
    from mneme.runtime import driver_available

    if driver_available():
        pytest.skip("a GPU driver loads here: warm workers start (test_command_server_gpu.py)")
    runtime = Path(tempfile.mkdtemp(prefix="ms-", dir="/tmp"))
    env = _env(runtime)
    try:
        assert _mneme(env, "server", "start", "--warm-workers", "0", "--idle-timeout", 600).returncode == 0
        deadline = time.monotonic() + 60
        while "given up after 2 failed starts" not in (status := _mneme(env, "server", "status").stdout):
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        assert "no CUDA driver" in status, status
        run = _mneme(env, *_tune_args(tmp_path / "t.sqlite3"))
        assert run.returncode == 0, run.stderr
        assert _served(env) == 1
        bad = _mneme(env, "server", "start", "--warm-workers", "0,x")
        assert bad.returncode == 2 and "--warm-workers" in bad.stderr and "Traceback" not in bad.stderr
    finally:
        _mneme(env, "server", "stop")
        shutil.rmtree(runtime, ignore_errors=True)
