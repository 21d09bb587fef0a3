"""`mneme tune --confirm-in-app` without a GPU: the option and the application command are
parsed, bad commands are one line (exit 2) before any trial, the plain run that guards the
search runs real commands, a compile-only run says the confirmation was skipped, and the
table, summary and Kendall tau come out right from given measurements. (Running the
application with the tuned kernels swapped in needs a GPU: test_app_confirm_gpu.py.)"""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from mneme.cli.main import cli
from mneme.tune.apply import InAppRun, in_app_summary, print_in_app
from mneme.tune.apply import _app_confirm as app_confirm
from mneme.tune.errors import TuneError
from mneme.tune.search import TrialRecord, TuneOptions, Tuner
from rich.console import Console
from tune_support import GOLDEN, SAXPY, run_mneme


def _tune(tmp_path, *args: str):
    """``mneme tune`` of saxpy (compile-only) in-process; the result and its stderr lines."""
    result = CliRunner().invoke(cli, ["tune", "-rdb", str(GOLDEN), "-rid", SAXPY, "--compile-only",
                                      "--trials", "2", "--storage", f"sqlite:///{tmp_path / 't.db'}",
                                      *map(str, args)])
    return result, result.stderr.strip().splitlines()


def _one_line(tmp_path, *args: str) -> str:
    result, lines = _tune(tmp_path, *args)
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("mneme: error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_an_application_that_is_not_there_is_one_line_before_any_trial(tmp_path):
    line = _one_line(tmp_path, "--confirm-in-app", "--", tmp_path / "no-app", "60")
    assert line == f"mneme: error: --confirm-in-app: {tmp_path / 'no-app'}: no such executable"
    assert not (tmp_path / "t.db").exists()  # refused before the study was opened
    script = tmp_path / "app.sh"
    script.write_text("#!/bin/sh\n")
    assert _one_line(tmp_path, "--confirm-in-app", "2", "--", script).endswith(f"{script}: not executable")


def test_the_option_needs_a_command_and_a_command_needs_the_option(tmp_path):
    assert "--confirm-in-app needs the application's command after --" in _one_line(
        tmp_path, "--confirm-in-app")
    line = _one_line(tmp_path, "--", "./app", "--size", "60")
    assert "./app --size 60: an application command is only taken with --confirm-in-app" in line
    result, _ = _tune(tmp_path, "--confirm-in-app", "0", "--", "true")
    assert result.exit_code == 2 and "0 is not in the range x>=1" in result.stderr


def test_the_python_api_checks_the_command_too(tmp_path):
    options = TuneOptions(trials=1, devices=None, storage=f"sqlite:///{tmp_path / 'a.db'}",
                          confirm_in_app=2)
    with pytest.raises(TuneError, match="needs the application's command"):
        Tuner(GOLDEN, [SAXPY], "pipeline", options)
    options.app_command = [str(tmp_path / "nothing")]
    with pytest.raises(TuneError, match="no such executable"):
        Tuner(GOLDEN, [SAXPY], "pipeline", options)
    options.app_command = ["true", "--flag"]
    tuner = Tuner(GOLDEN, [SAXPY], "pipeline", options)
    assert tuner.app_command[0].endswith("/true") and tuner.app_command[1:] == ["--flag"]


def test_the_plain_run_refuses_a_failing_application_in_one_line(tmp_path):
    with pytest.raises(TuneError) as failed:
        app_confirm.check_application(["sh", "-c", "echo first >&2; echo 'bad input: 60' >&2; exit 3"])
    message = str(failed.value)
    assert message.startswith("--confirm-in-app: the application fails run plain: sh exited with status 3")
    assert "bad input: 60" in message and "\n" not in message
    with pytest.raises(TuneError, match="died of signal 9"):
        app_confirm.check_application(["sh", "-c", "kill -9 $$"])
    # A command that runs is run once per process (several studies share the check).
    log = tmp_path / "runs.txt"
    command = ["sh", "-c", f"echo ran >> {log}"]
    seconds = app_confirm.check_application(command)
    assert seconds > 0 and app_confirm.check_application(command) == seconds
    assert log.read_text() == "ran\n"


def test_runs_with_the_swap_get_a_time_limit_from_the_plain_run():
    assert app_confirm.run_timeout(None) is None
    assert app_confirm.run_timeout(1.0) == app_confirm.TIMEOUT_MIN_S
    assert app_confirm.run_timeout(60.0) == 600.0


def test_compile_only_says_the_confirmation_was_skipped(tmp_path):
    report = tmp_path / "report"
    run = run_mneme("tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", "2",
                    "--space", "pipeline", "--storage", f"sqlite:///{tmp_path / 's.db'}",
                    "--report", report, "--plots", "off", "--confirm-in-app", "3", "--", "true", "x")
    assert run.returncode == 0, run.stderr
    assert "in-app confirmation skipped: compile-only tuning runs nothing on a GPU" in run.stdout
    summary = json.loads((report / "summary.json").read_text())
    assert summary["in_app"] == {"skipped": "compile-only tuning runs nothing on a GPU"}


def test_without_the_option_the_summary_has_no_in_app_section(tmp_path):
    run = run_mneme("tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", "2",
                    "--space", "pipeline", "--storage", f"sqlite:///{tmp_path / 's.db'}",
                    "--report", tmp_path / "r", "--plots", "off")
    assert run.returncode == 0, run.stderr
    assert "in_app" not in json.loads((tmp_path / "r" / "summary.json").read_text())
    assert "in-app" not in run.stdout and "in the application" not in run.stderr


# -- from given measurements ----------------------------------------------------------------


def _run(ms, launches=60, swapped=60, method="cupti", failure=None, status=0):
    return InAppRun(None, median_ms=ms, launches=launches, same_config=launches, swapped=swapped,
                    method=method, failure=failure, exit_status=status)


def _measured():
    """The recorded configuration (0.100 and 0.110 ms in its two runs: 10 % apart) and five
    candidates: four timed in the application, one whose run failed."""
    candidates = [{"trial": 7, "params": {"block_x": 128}, "replayed_ms": 0.050},
                  {"trial": 3, "params": {"block_x": 256}, "replayed_ms": 0.060},
                  {"trial": 9, "params": {"block_x": 64}, "replayed_ms": 0.070},
                  {"trial": 4, "params": {"block_x": 32}, "replayed_ms": 0.075},
                  {"trial": 12, "params": {"block_x": 1024}, "replayed_ms": 0.080}]
    recorded = [_run(0.100, swapped=0), _run(0.110, swapped=0)]
    runs = [_run(0.080), _run(0.090, swapped=58), _run(0.085), _run(0.095, swapped=0),
            _run(None, failure="./app exited with status 1 under the swap: CUDA error", status=1)]
    return in_app_summary(["./app", "60"], 0.080, candidates, recorded, runs)


def test_replayed_and_in_app_speedups_side_by_side_with_the_rank_correlation():
    summary = _measured()
    rows = summary["rows"]
    assert [r["configuration"] for r in rows] == ["recorded", "trial 7", "trial 3", "trial 9",
                                                  "trial 4", "trial 12"]
    recorded = rows[0]
    assert recorded["in_app_ms"] == pytest.approx(0.105) and recorded["in_app_runs_ms"] == [0.100, 0.110]
    assert recorded["replayed_speedup"] == recorded["in_app_speedup"] == 1.0
    assert summary["noise"] == pytest.approx(0.1)
    assert rows[1]["replayed_speedup"] == pytest.approx(1.6)
    assert rows[1]["in_app_speedup"] == pytest.approx(0.105 / 0.080)
    assert rows[5]["in_app_ms"] is None and rows[5]["in_app_speedup"] is None
    assert rows[5]["failure"].startswith("./app exited with status 1")
    # replay orders the four timed candidates 7 < 3 < 9 < 4, the application 7 < 9 < 3 < 4:
    # 5 of 6 pairs agree
    assert summary["tau_candidates"] == 4
    assert summary["kendall_tau"] == pytest.approx((5 - 1) / 6)
    assert summary["method"] == "cupti" and summary["runs"] == 7
    json.dumps(summary)  # summary.json takes it as it is


def test_fewer_than_three_candidates_with_both_times_have_no_tau():
    candidates = [{"trial": 1, "params": {}, "replayed_ms": 0.05}, {"trial": 2, "params": {}, "replayed_ms": 0.06}]
    summary = in_app_summary(["./app"], 0.08, candidates, [_run(0.1, swapped=0), _run(None, failure="x")],
                             [_run(0.08), _run(0.09)])
    assert summary["kendall_tau"] is None and summary["tau_candidates"] == 2
    assert summary["noise"] is None and summary["rows"][0]["in_app_ms"] == 0.1


def _printed(summary, width=200) -> str:
    buffer = io.StringIO()
    print_in_app(Console(file=buffer, width=width, highlight=False), summary)
    return buffer.getvalue()


def test_the_console_table_and_its_lines():
    text = _printed(_measured())
    assert "in the application: ./app 60 (7 runs, the recorded configuration first and last)" in text
    header = next(line for line in text.splitlines() if "configuration" in line and "×" in line)
    assert header.index("replayed ×") < header.index("in-app ×")
    trial7 = next(line for line in text.splitlines() if "trial 7 " in line)
    assert "1.60x" in trial7 and "1.31x" in trial7 and "60/60" in trial7
    assert "block_x=128" in trial7
    recorded = next(line for line in text.splitlines() if "recorded " in line and "×" not in line
                    and "│" in line)
    assert "1.00x" in recorded and "- (original)" in recorded
    assert "trial 12" in text and "failed" in next(line for line in text.splitlines() if "trial 12 " in line)
    assert "0.1 and 0.11 ms in its first and last run: run to run 10.0 %, in-app speedups within it are noise" in text
    assert "Kendall tau between the replay and the in-app ranking of 4 configurations: 0.67" in text
    assert "trial 12: no in-app time: ./app exited with status 1 under the swap: CUDA error" in text
    assert "trial 4: no launch ran the tuned code (60 launches)" in text


def test_a_skipped_confirmation_is_one_line_and_none_asked_prints_nothing():
    assert _printed({"skipped": "no configuration completed"}) == \
        "in-app confirmation skipped: no configuration completed\n"
    assert _printed({}) == ""


def test_a_command_with_brackets_is_printed_as_given():
    summary = _measured()
    summary["command"] = ["./app", "[x]", "--opt=[/bold]"]
    assert "./app '[x]' '--opt=[/bold]'" in _printed(summary)


def _record(number, value, settings):
    return TrialRecord(number=number, state="complete", params={"p": number}, values=[value],
                       settings=settings, metrics={"time": value})


def test_candidates_are_the_best_distinct_configurations_in_rank_order():
    a = {"compile": {"pipeline": "default<O3>"}, "replay": {"block": [128, 1, 1]}}
    b = {"compile": {"pipeline": "default<O3>"}, "replay": {"block": [256, 1, 1]}}
    c = {"compile": {"pipeline": "default<O2>"}, "replay": {"block": [128, 1, 1]}}
    outcome = SimpleNamespace(best=[_record(5, 0.01, a), _record(8, 0.011, dict(a)), _record(2, 0.012, b),
                                    _record(9, 0.013, None), _record(1, 0.02, c)])
    assert [r.number for r in app_confirm.candidates_of(outcome, 2)] == [5, 2]
    assert [r.number for r in app_confirm.candidates_of(outcome, 5)] == [5, 2, 1]
