"""Configurations and results are plain data that round-trip through JSON."""

import json

import pytest
from mneme.replay.engine import (
    LaunchConfigError,
    Mismatch,
    ReplayConfig,
    ReplayConfigError,
    ReplayResult,
    ReplaySettings,
    Tolerance,
    check_clusters,
    check_launch,
    merge_spans,
)
from mneme.replay.engine.session import arch_of
from mneme.replay.jit import CompileConfig


def test_replay_config_round_trip():
    config = ReplayConfig(
        grid=[4, 1, 1],
        block=(128, 2, 1),
        shared_mem=1024,
        iterations=7,
        warmup=0,
        verify=False,
        flush_l2=True,
        specialize=True,
        specialize_dims=True,
        set_launch_bounds=True,
        tolerances={"r-0000000000001000": {"dtype": "float32", "atol": 1e-3}},
        arch="sm_80",
    )
    assert config.grid == (4, 1, 1)
    assert isinstance(config.tolerances["r-0000000000001000"], Tolerance)
    assert ReplayConfig.from_json(config.to_json()) == config
    assert ReplayConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert hash(config) == hash(ReplayConfig.from_json(config.to_json()))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"iterations": 0}, "iterations must be at least 1"),
        ({"block": (0, 1, 1)}, "block must be three positive integers"),
        ({"shared_mem": -1}, "shared_mem must be >= 0"),
        ({"verify": "yes"}, "verify must be true or false"),
        ({"arch": "volta"}, "neither an NVIDIA"),
    ],
)
def test_replay_config_validation(changes, message):
    with pytest.raises(ReplayConfigError, match=message):
        ReplayConfig(**changes)


def test_unknown_fields_are_named():
    with pytest.raises(ReplayConfigError, match="unknown replay configuration field"):
        ReplayConfig.from_dict({"iteratons": 3})
    with pytest.raises(ReplayConfigError, match="unknown compile configuration field"):
        ReplaySettings.from_dict({"compile": {"pipelin": "x"}})
    with pytest.raises(ReplayConfigError, match="not valid JSON"):
        ReplaySettings.from_json("{")


def test_settings_accept_results_and_bare_compile_configs():
    settings = ReplaySettings(
        CompileConfig(pipeline="default<O2>", specialize_args={3: b"\x01\x00\x00\x00"}),
        ReplayConfig(block=(64, 1, 1)),
    )
    assert ReplaySettings.from_json(settings.to_json()) == settings
    result = ReplayResult(
        kernel="k",
        instance="a/b",
        configuration=settings,
        times=[0.3, 0.1, 0.2],
        verified=False,
        mismatches=[Mismatch("r", 1, 2, "bytes", 1, 0)],
        registers=10,
    )
    again = ReplayResult.from_json(result.to_json())
    assert again == result
    assert ReplaySettings.from_dict(json.loads(result.to_json())) == settings
    bare = ReplaySettings.from_dict(CompileConfig(pipeline="default<Os>").to_dict())
    assert bare.compile.pipeline == "default<Os>" and bare.replay == ReplayConfig()
    assert "verified   NO: 1 region(s) differ" in result.summary()
    # time: the median of the timed iterations (ms), what the time objective minimizes
    assert result.time == 0.2 and result.min_time == 0.1
    assert "median 0.2000 ms" in result.summary()
    assert {"times", "registers", "spills", "binary_size", "compile_time"} <= set(result.to_dict())
    assert ReplayResult("k", "a/b", settings).time is None


def test_launch_checks():
    check_launch((1, 1, 1), (1024, 1, 1), 0)
    with pytest.raises(LaunchConfigError, match="exceeds the device limit of 1024"):
        check_launch((1, 1, 1), (64, 32, 1), 0)
    with pytest.raises(LaunchConfigError, match="block dimension z = 128"):
        check_launch((1, 1, 1), (1, 1, 128), 0)
    with pytest.raises(LaunchConfigError, match="grid dimension y = 70000"):
        check_launch((1, 70000, 1), (1, 1, 1), 0)


def test_a_grid_must_hold_whole_recorded_clusters():
    check_clusters((8, 4, 1), (2, 2, 1))
    check_clusters((7, 1, 1), None)
    with pytest.raises(LaunchConfigError, match="grid 6x1x1 is not a whole number of the recorded "
                                                "launch's thread-block clusters of 4x1x1"):
        check_clusters((6, 1, 1), (4, 1, 1))


def test_arch_names():
    assert arch_of("9.0") == "sm_90" and arch_of((8, 6)) == "sm_86"


class R:
    def __init__(self, address, size):
        self.address, self.size = address, size


def test_regions_merge_into_aligned_spans():
    spans = merge_spans([R(0x1000, 100), R(0x1100, 8), R(0x2000, 0), R(0x5010, 16), R(0x1064, 4)])
    assert [(s.address, s.size) for s in spans] == [(0x1000, 0x200), (0x5000, 0x100)]
