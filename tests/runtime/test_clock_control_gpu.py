"""Clock control on a GPU (issue 37): a tuner killed with SIGKILL in the middle of its run
leaves no clock locked (its guard unlocks them), and a lock whose command and guard were
both killed is repaired by the next mneme command, said in one line. Needs root (NVML
refuses to lock clocks otherwise): skipped with NVML's reason."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mneme.runtime.clock_control import held_clocks, lock_dir

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parents[1] / "data"
SAXPY = "5acf7c2e2f6ed113/1b783248d1ae4a7d"
LOCK_MHZ = 800  # far below any data-centre GPU's boost, so locked and unlocked differ


@pytest.fixture
def state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    said: list[str] = []
    with held_clocks(LOCK_MHZ, [0], said.append) as probe:
        if 0 not in probe.locked:
            pytest.skip(f"clocks cannot be locked here: {probe.unlocked.get(0)}")
    return tmp_path


def mneme(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mneme.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300, **kwargs)


def replayed_clock(db: Path) -> float:
    """The SM clock (MHz) a replay that leaves clocks alone measured at: the busiest of three."""
    clocks = []
    for _ in range(3):
        run = mneme("replay", "-rdb", db, "-rid", SAXPY, "--iterations", "2000", "--json",
                    "--clock-control", "none")
        assert run.returncode == 0, run.stderr
        clocks.append(json.loads(run.stdout)["sm_clock_mhz"])
    return max(clocks)


def wait_for(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def start_tuner(work: Path) -> subprocess.Popen:
    shutil.copytree(DATA / "golden.rdb", work / "golden.rdb")
    return subprocess.Popen([sys.executable, "-m", "mneme.cli", "tune", "-rdb", work / "golden.rdb",
                             "-rid", SAXPY, "--trials", "100000", "--clock-control", str(LOCK_MHZ),
                             "--storage", f"sqlite:///{work / 's.db'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_tuner_killed_mid_run_leaves_the_clocks_unlocked(state_home):
    db = state_home / "golden.rdb"
    tuner = start_tuner(state_home)
    try:
        assert wait_for(lambda: any(lock_dir().glob("*.json")), 120), "the tuner never locked"
        time.sleep(3)  # in the middle of its search
        assert tuner.poll() is None
        assert replayed_clock(db) <= LOCK_MHZ + 15  # measured at the tuner's lock, left to it
        tuner.send_signal(signal.SIGKILL)
        tuner.wait(timeout=30)
    finally:
        if tuner.poll() is None:
            tuner.kill()
    assert wait_for(lambda: not any(lock_dir().glob("*.json")), 30), "the guard did not unlock"
    assert replayed_clock(db) > LOCK_MHZ + 100


def test_the_next_command_repairs_a_lock_whose_guard_was_killed_too(state_home):
    db = state_home / "golden.rdb"
    tuner = start_tuner(state_home)
    try:
        assert wait_for(lambda: any(lock_dir().glob("*.json")), 120), "the tuner never locked"
        guards = subprocess.run(["pgrep", "-f", "mneme.runtime.clock_guard"], capture_output=True, text=True)
        for pid in guards.stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.5)
        tuner.send_signal(signal.SIGKILL)
        tuner.wait(timeout=30)
    finally:
        if tuner.poll() is None:
            tuner.kill()
    assert any(lock_dir().glob("*.json")), "nothing left to repair: the guard was not killed"
    run = mneme("replay", "-rdb", db, "-rid", SAXPY, "--clock-control", "none")
    assert run.returncode == 0, run.stderr
    repaired = [line for line in run.stderr.splitlines() if "unlocked the clocks of GPU" in line]
    assert len(repaired) == 1 and f"at {LOCK_MHZ} MHz" in repaired[0], run.stderr
    assert not any(lock_dir().glob("*.json"))
    assert replayed_clock(db) > LOCK_MHZ + 100
