"""Energy as a tuning objective (issue 20): the metric, its measurement window in the replay
configuration, and the one line when the GPU gives no energy reading. The measurement
itself runs on the GPU (tests/replay/test_replay_timing_gpu.py)."""

from __future__ import annotations

import pytest
from mneme.replay.engine import ReplayConfig, ReplayResult, ReplaySettings
from mneme.replay.engine.errors import ReplayConfigError
from mneme.tune.errors import TuneError
from mneme.tune.search import ENERGY_WINDOW_MS, METRICS, evaluate, metrics, parse_objectives


def _result(energy_mj):
    return ReplayResult(kernel="k", instance="i", configuration=ReplaySettings(), times=[0.01, 0.011],
                        energy_mj=energy_mj)


def test_energy_is_an_objective_on_a_gpu_alone_or_beside_time():
    assert parse_objectives("energy", gpu=True) == ["energy"]
    assert parse_objectives("time,energy", gpu=True) == ["time", "energy"]
    with pytest.raises(TuneError, match="objective energy needs a GPU"):
        parse_objectives("energy", gpu=False)
    assert METRICS["energy"].unit == "mJ"


def test_energy_sums_over_instances_and_is_missing_without_a_reading():
    assert evaluate(["time", "energy"], [_result(0.5), _result(0.25)]) == pytest.approx([0.021, 0.75])
    assert metrics([_result(None)])["energy"] is None  # (other metrics are still recorded)
    with pytest.raises(TuneError, match="no energy reading"):
        evaluate(["energy"], [_result(None)])


def test_the_energy_window_is_part_of_a_configuration_only_when_asked_for():
    plain = ReplayConfig()
    assert "energy_window_ms" not in plain.to_dict()  # earlier configurations read the same
    asked = ReplayConfig(energy_window_ms=ENERGY_WINDOW_MS)
    assert ReplayConfig.from_json(asked.to_json()) == asked
    for bad in (-1, 1e9, "200", True):
        with pytest.raises(ReplayConfigError, match="energy_window_ms"):
            ReplayConfig(energy_window_ms=bad)
