"""Tuning reports say how times were measured, and trials are measured in one cache mode
(issue 20): the baseline resolves --cache (auto: per instance, the mode nearest the in-app
time) and every trial replays in that mode; the baseline's timing (method and fallback
reason, cache mode, in-app time, fidelity, SM clock) goes to the console, summary.json and
best.json. Without a GPU the cache mode still flows into every trial's configuration."""

from __future__ import annotations

import json

import optuna
import pytest
from mneme.replay.engine import ReplayResult, ReplaySettings
from mneme.tune import TuneOptions, Tuner
from mneme.tune.errors import TuneError
from mneme.tune.report import write_report
from mneme.tune.search import BASELINE_ATTR, baseline_timing, resolved_modes, timing_line
from tune_support import GOLDEN, SAXPY, run_mneme


def _timed(instance=SAXPY, **fields) -> ReplayResult:
    """A timed replay result as a GPU worker returns it (plain data)."""
    values = {"times": [0.0512, 0.0510, 0.0515], "timing_method": "cupti", "cache": "app",
              "mode_times": {"warm": 0.0136, "app": 0.0512, "cold": 0.0611}, "app_time_ms": 0.0507,
              "sm_clock_mhz": 1980.0, **fields}
    return ReplayResult("_Z5saxpyfPKfPfi", instance, ReplaySettings(), **values)


def test_the_baseline_timing_names_method_mode_fidelity_and_clock():
    timing = baseline_timing([_timed()], "auto")
    assert timing["method"] == "cupti" and timing["cache"] == "app" and timing["cache_modes"] == ["app"]
    assert timing["cache_requested"] == "auto" and timing["app_time_ms"] == 0.0507
    assert timing["fidelity"] == pytest.approx(0.0512 / 0.0507) and timing["sm_clock_mhz"] == 1980.0
    line = timing_line(timing)
    assert line == ("timing: cupti, cache app (auto: warm 0.0136, app 0.0512, cold 0.0611 ms), "
                    "fidelity 1.01 (replayed 0.0512 / in-app 0.0507 ms), SM 1980 MHz")


def test_events_fallback_and_missing_in_app_time_are_said():
    note = "events (CUPTI unusable: libcupti.so.13: cannot open shared object file)"
    timing = baseline_timing([_timed(timing_method="events", timing_note=note, cache="warm",
                                     mode_times={}, app_time_ms=None, sm_clock_mhz=None)], "warm")
    assert timing["method"] == note and timing["fidelity"] is None
    assert timing_line(timing) == f"timing: {note}, cache warm, fidelity - (no in-app time recorded)"


def test_a_per_kernel_baseline_keeps_each_instances_mode():
    timing = baseline_timing([_timed(), _timed("5acf7c2e2f6ed113/00000000000000ff", cache="cold")], "auto")
    assert timing["cache_modes"] == ["app", "cold"] and len(timing["instances"]) == 2
    assert "cache app, cold" in timing_line(timing) and "first of 2 instances" in timing_line(timing)


def test_compile_only_results_have_no_timing():
    untimed = ReplayResult("_Z5saxpyfPKfPfi", SAXPY, ReplaySettings(), compile_only=True)
    assert baseline_timing([untimed], "auto") is None
    assert timing_line(None) == "timing: compile-only (nothing timed)"


def test_modes_come_from_the_baseline_and_a_resumed_study_keeps_its_mode():
    measured = {"values": [0.05], "metrics": {"time": 0.05}, "timing": {"cache_modes": ["app"]}}
    assert resolved_modes(measured, "auto", 1, False, "s") == ["app"]
    assert resolved_modes(measured, "app", 1, False, "s") == ["app"]
    with pytest.raises(TuneError, match="measured in cache mode app: resume it with --cache app"):
        resolved_modes(measured, "cold", 1, False, "s")
    # A study timed before cache modes existed measured warm; compile-only times nothing.
    legacy = {"values": [0.05], "metrics": {"time": 0.05}}
    assert resolved_modes(legacy, "auto", 2, False, "s") == ["warm", "warm"]
    assert resolved_modes({"values": [24], "metrics": {"registers": 24}}, "auto", 1, True, "s") == ["auto"]


def _cache_of_trials(storage: str, study: str) -> set[str]:
    trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    return {t.user_attrs["mneme"]["settings"]["replay"]["cache"] for t in trials
            if "settings" in t.user_attrs.get("mneme", {})}


def test_every_trial_replays_in_the_cache_mode_asked_for(tmp_path):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    options = TuneOptions(trials=4, devices=None, cpu_workers=2, sampler="grid", storage=storage,
                          cache="cold")
    outcome = Tuner(GOLDEN, [SAXPY], "pipeline", options).run()
    assert _cache_of_trials(storage, outcome.study.study_name) == {"cold"}
    data = write_report(outcome, tmp_path / "report", plots=False)
    assert data["timing"] is None  # compile-only: nothing timed, said so
    best = json.loads((tmp_path / "report" / "best.json").read_text())
    assert best["replay"]["cache"] == "cold" and "timing" not in best["identity"]


def test_a_resumed_study_measures_in_its_baselines_mode(tmp_path):
    """The baseline stored in the study fixes the mode of the trials added later (here one
    stored as a GPU baseline that auto resolved to app would be)."""
    storage = f"sqlite:///{tmp_path / 's.db'}"
    first = Tuner(GOLDEN, [SAXPY], "pipeline",
                  TuneOptions(trials=2, devices=None, cpu_workers=2, sampler="grid", storage=storage))
    name = first.run().study.study_name
    assert _cache_of_trials(storage, name) == {"auto"}  # nothing resolved it: compile-only
    study = optuna.load_study(study_name=name, storage=storage)
    baseline = study.user_attrs[BASELINE_ATTR]
    study.set_user_attr(BASELINE_ATTR, {**baseline, "timing": baseline_timing([_timed()], "auto")})
    again = Tuner(GOLDEN, [SAXPY], "pipeline",
                  TuneOptions(trials=4, devices=None, cpu_workers=2, sampler="grid", storage=storage))
    outcome = again.run()
    assert again.cache_modes == ["app"]
    assert _cache_of_trials(storage, name) == {"auto", "app"}
    new = [t for t in outcome.trials if t.number >= 2]
    assert new and all(t.settings["replay"]["cache"] == "app" for t in new)
    data = write_report(outcome, tmp_path / "report", plots=False)
    assert data["timing"]["cache"] == "app" and data["timing"]["fidelity"] == pytest.approx(0.0512 / 0.0507)
    identity = json.loads((tmp_path / "report" / "best.json").read_text())["identity"]
    assert identity["timing"]["method"] == "cupti" and identity["timing"]["sm_clock_mhz"] == 1980.0
    # Another explicit mode would mix two kinds of measurement in one study: refused.
    with pytest.raises(TuneError, match="--cache app"):
        Tuner(GOLDEN, [SAXPY], "pipeline", TuneOptions(trials=6, devices=None, cpu_workers=2, sampler="grid",
                                                        storage=storage, cache="cold")).run()


def test_the_command_takes_cache_and_prints_how_it_timed(tmp_path):
    run = run_mneme("tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", "2",
                    "--space", "pipeline", "--cache", "app", "--storage", f"sqlite:///{tmp_path / 't.db'}")
    assert run.returncode == 0, run.stderr
    assert "timing: compile-only (nothing timed)" in run.stdout
    bad = run_mneme("tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--cache", "lukewarm")
    assert bad.returncode == 2 and "lukewarm" in bad.stderr
    assert TuneOptions().cache == "auto"


def test_a_bad_cache_mode_in_the_api_is_one_line(tmp_path):
    with pytest.raises(TuneError, match="--cache must be one of warm, cold, app, auto"):
        Tuner(GOLDEN, [SAXPY], "pipeline", TuneOptions(trials=1, devices=None, cache="hot",
                                                        storage=f"sqlite:///{tmp_path / 's.db'}"))
