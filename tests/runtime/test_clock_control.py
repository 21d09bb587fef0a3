"""Clock control without a GPU: the policy's parsing, commands that refuse an unknown one
in one line, nothing locked where nothing is measured, markers of live processes kept and
the guard that ends with its command's pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from mneme.cli.main import cli as cli_main
from mneme.runtime.clock_control import (
    ClockPolicyError,
    held_clocks,
    lock_dir,
    parse_clock_policy,
    repair_abandoned_locks,
)
from mneme.runtime.errors import UserError

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden.rdb"


def test_policies_parse_and_an_unknown_one_is_a_user_error():
    assert parse_clock_policy("base") == "base"
    assert parse_clock_policy(" NONE ") == "none"
    assert parse_clock_policy(None) == "base"
    assert parse_clock_policy("1500") == 1500
    for bad in ("fast", "-5", "50", "99999", "1.5e3"):
        with pytest.raises(ClockPolicyError, match="--clock-control") as caught:
            parse_clock_policy(bad)
        assert isinstance(caught.value, UserError)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("command", [
    ["replay", "-rdb", str(GOLDEN), "--compile-only", "--clock-control", "turbo"],
    ["tune", "-rdb", str(GOLDEN), "--compile-only", "--trials", "1", "--clock-control", "turbo"],
    ["record", "-rdb", "unused.rdb", "--clock-control", "turbo", "--", "true"],
])
def test_commands_refuse_an_unknown_policy_in_one_line(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = subprocess.run([sys.executable, "-m", "mneme.cli", *command], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode != 0
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert "--clock-control 'turbo'" in lines[0] and "Traceback" not in run.stderr
    assert not (tmp_path / "unused.rdb").exists()


def test_nothing_is_locked_where_nothing_is_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    said = []
    with held_clocks("base", [], said.append) as state:
        assert state.locked == {} and state.unlocked == {} and state.guard is None
    assert said == [] and not lock_dir().exists()
    assert state.describe() == {"policy": "base", "locked_sm_mhz": {}, "unlocked": {}}


def test_a_marker_of_a_live_process_is_never_repaired(tmp_path, monkeypatch):
    """Another mneme command holds that GPU: no NVML call, no line, the marker stays."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    lock_dir().mkdir(parents=True)
    marker = lock_dir() / "GPU-live.json"
    marker.write_text(json.dumps({"pid": os.getpid(), "uuid": "GPU-live", "sm_mhz": 1500}))
    said = []
    assert repair_abandoned_locks(said.append) == []
    assert said == [] and marker.is_file()


def test_the_guard_waits_for_its_command_and_leaves_other_locks(tmp_path, monkeypatch):
    """The guard reads until the command's pipe closes; a marker another process owns
    since is not its to unlock (it exits without touching it)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    lock_dir().mkdir(parents=True)
    marker = lock_dir() / "GPU-other.json"
    marker.write_text(json.dumps({"pid": os.getpid(), "uuid": "GPU-other", "sm_mhz": 1500}))
    guard = subprocess.Popen([sys.executable, "-m", "mneme.runtime.clock_guard", "999999999", str(marker)],
                             stdin=subprocess.PIPE)
    with pytest.raises(subprocess.TimeoutExpired):
        guard.wait(timeout=1.0)  # still waiting: its command runs
    guard.stdin.close()
    assert guard.wait(timeout=30) == 0
    assert marker.is_file()


def test_cli_help_names_the_option():
    for command in ("replay", "tune", "record", "run"):
        result = CliRunner().invoke(cli_main, [command, "--help"])
        assert "--clock-control" in result.output, command
