"""The noise floor across runs (search/_noise_floor.py): kept beside the database per clock
policy and GPU, its half-range, and a confirmation whose gain is below it is no speedup."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from mneme.replay.db import Database
from mneme.tune.report._report import verdict
from mneme.tune.search._noise_floor import KEPT, across_runs, noise_path, remember

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden.rdb"


@pytest.fixture
def instance(tmp_path):
    shutil.copytree(GOLDEN, tmp_path / "g.rdb")
    db = Database.open(tmp_path / "g.rdb")
    return db.kernels()[0].instances()[0]


def test_runs_are_kept_per_key_and_bounded(instance):
    assert remember(instance, 1.00, "locked 1980 MHz; H200") == [1.00]
    assert remember(instance, 1.10, "unlocked; H200") == [1.10]  # another key: its own runs
    assert remember(instance, 1.04, "locked 1980 MHz; H200") == [1.00, 1.04]
    for n in range(KEPT + 3):
        medians = remember(instance, 1.0 + n / 1000, "locked 1980 MHz; H200")
    assert len(medians) == KEPT and medians[-1] == pytest.approx(1.0 + (KEPT + 2) / 1000)
    assert noise_path(instance).is_file()


def test_the_floor_is_the_relative_half_range():
    assert across_runs([1.0]) == 0.0
    assert across_runs([1.0, 1.04, 1.02]) == pytest.approx(0.02 / 1.02)


def test_a_gain_below_the_noise_across_runs_is_no_speedup():
    confirmation = {"objective": "time", "trial": 7, "baseline": [1.00, 1.01, 1.00], "best": [0.98, 0.985, 0.98],
                    "speedup": 1.0 / 0.98, "noise": 0.03, "noise_in_run": 0.005, "noise_across_runs": 0.03,
                    "runs_compared": 3, "significant": False}
    line = verdict(SimpleNamespace(confirmation=confirmation))
    assert line.startswith("no significant speedup") and "below the noise across runs" in line
    assert "±3.0 % across 3 runs" in line
