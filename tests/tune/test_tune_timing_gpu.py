"""Tuning on the GPU measures every trial in the cache mode its baseline resolved (auto:
nearest the recorded in-app time) and reports how it timed: method, mode, in-app time,
fidelity and SM clock, on the console, in summary.json and in best.json."""

import json

import optuna
import pytest
from mneme.replay.db import Database
from mneme.replay.engine.timing import MEASURED_MODES
from tune_support import recorded_on_gpu, run_mneme

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def jacobi(tmp_path_factory):
    """fidelity_jacobi recorded (its instances carry their in-app time)."""
    db, _, folder = recorded_on_gpu(tmp_path_factory, "fidelity_jacobi", "tune-timing")
    instance = Database.open(db).kernels()[0].instances()[0]
    assert instance.app_time is not None and instance.app_time.median_ms
    return db, instance, folder


def test_auto_resolves_once_and_every_trial_replays_in_that_mode(jacobi):
    db, instance, folder = jacobi
    storage = f"sqlite:///{folder / 'auto.sqlite3'}"
    report = folder / "report"
    run = run_mneme("tune", "-rdb", db, "-rid", instance.id, "--space", "launch,pipeline", "--trials", "12",
                    "--seed", "2", "--confirm-runs", "1", "--storage", storage, "--report", report)
    assert run.returncode == 0, run.stderr
    summary = json.loads((report / "summary.json").read_text())
    timing = summary["timing"]
    assert timing["cache_requested"] == "auto" and timing["cache"] in MEASURED_MODES
    assert set(timing["mode_times_ms"]) == set(MEASURED_MODES)
    assert timing["method"] == "cupti" or timing["method"].startswith("events (")
    assert timing["app_time_ms"] == pytest.approx(instance.app_time.median_ms)
    assert timing["fidelity"] == pytest.approx(timing["replayed_ms"] / timing["app_time_ms"])
    study = optuna.load_study(study_name=summary["study"], storage=storage)
    modes = {t.user_attrs["mneme"]["settings"]["replay"]["cache"] for t in study.get_trials()
             if "settings" in t.user_attrs.get("mneme", {})}
    assert modes == {timing["cache"]}
    best = json.loads((report / "best.json").read_text())
    assert best["replay"]["cache"] == timing["cache"] and best["identity"]["timing"] == timing
    assert f"cache {timing['cache']} (auto: " in run.stdout and f"fidelity {timing['fidelity']:.2f}" in run.stdout


def test_an_explicit_mode_is_used_as_asked(jacobi):
    db, instance, folder = jacobi
    report = folder / "cold"
    run = run_mneme("tune", "-rdb", db, "-rid", instance.id, "--space", "pipeline", "--trials", "3",
                    "--cache", "cold", "--confirm-runs", "1",
                    "--storage", f"sqlite:///{folder / 'cold.sqlite3'}", "--report", report)
    assert run.returncode == 0, run.stderr
    timing = json.loads((report / "summary.json").read_text())["timing"]
    assert timing["cache"] == "cold" and timing["cache_requested"] == "cold" and not timing["mode_times_ms"]
    assert "timing: " in run.stdout and "cache cold" in run.stdout
