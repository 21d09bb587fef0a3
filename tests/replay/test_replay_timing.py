"""Timing options of replay without a GPU: cache modes in ReplayConfig and on the command
line, the auto choice, fidelity and the timing line of a result."""

import pytest
from click.testing import CliRunner
from mneme.cli.main import cli
from mneme.replay.engine import ReplayConfig, ReplayConfigError, ReplayResult, ReplaySettings
from mneme.replay.engine.timing import CACHE_MODES, closest_mode
from replay_support import GOLDEN


def mneme(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result.exit_code, result.output


def test_cache_modes_and_the_old_flush_flag():
    assert ReplayConfig().cache_mode == "warm"
    assert ReplayConfig(flush_l2=True).cache_mode == "cold"
    for mode in CACHE_MODES:
        config = ReplayConfig(cache=mode)
        assert config.cache_mode == mode
        assert ReplayConfig.from_json(config.to_json()) == config
    with pytest.raises(ReplayConfigError, match="cache must be one of warm, cold, app, auto"):
        ReplayConfig(cache="hot")
    with pytest.raises(ReplayConfigError, match="contradicts cache 'app'"):
        ReplayConfig(cache="app", flush_l2=True)
    # configurations written before cache modes existed still read
    old = ReplayConfig().to_dict()
    del old["cache"]
    assert ReplayConfig.from_dict(old).cache_mode == "warm"


def test_cache_option_on_the_command_line():
    code, out = mneme("replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only", "--json",
                      "--cache", "cold")
    assert code == 0, out
    assert ReplayResult.from_json(out).configuration.replay.cache == "cold"
    code, out = mneme("replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only",
                      "--cache", "hot")
    assert code == 2 and "'hot' is not one of" in out


def test_auto_picks_the_mode_nearest_the_app_time_by_ratio():
    times = {"warm": 0.010, "app": 0.030, "cold": 0.050}
    assert closest_mode(times, 0.011) == "warm"
    assert closest_mode(times, 0.045) == "cold"
    assert closest_mode(times, 0.018) == "app"  # 1.67x from app, 1.8x from warm


def test_fidelity_and_timing_line():
    result = ReplayResult("k", "i", ReplaySettings(), times=[0.05, 0.06, 0.052],
                          timing_method="cupti", cache="app", app_time_ms=0.05,
                          sm_clock_mhz=1980.0)
    assert result.fidelity == pytest.approx(0.052 / 0.05)
    assert result.timing_line() == ("cupti, cache app, fidelity 1.04 (in-app 0.0500 ms), "
                                    "SM 1980 MHz")
    summary = result.summary()
    assert "timing     cupti, cache app, fidelity 1.04" in summary
    assert "spread     IQR" in summary
    assert ReplayResult.from_json(result.to_json()).fidelity == result.fidelity
    fallback = ReplayResult("k", "i", ReplaySettings(), times=[1.0], timing_method="events",
                            timing_note="events (CUPTI unusable: libcupti not found)",
                            cache="warm")
    assert fallback.fidelity is None
    assert fallback.timing_line() == ("events (CUPTI unusable: libcupti not found), cache warm,"
                                      " fidelity -")
