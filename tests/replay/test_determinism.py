"""Determinism classes: what the unchanged kernel reproduces, and verification by class.

The classification and the host-side checks need no GPU; the GPU tests of the corpus
(tests/record/test_record_real_apps_gpu.py) run them on real nondeterministic kernels.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from mneme.cli.main import cli
from mneme.replay.db import Database
from mneme.replay.engine import ReplayConfig, ReplayConfigError, Tolerance, verify_host
from mneme.replay.engine import determinism as nd
from mneme.replay.engine.result import ReplayResult
from replay_support import GOLDEN

RNG = np.random.default_rng(7)


def as_bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8).reshape(-1)


def test_identical_runs_are_exact():
    recorded = as_bytes(RNG.integers(0, 2**31, 1000, dtype=np.int32))
    c = nd.classify(recorded, [recorded.copy(), recorded.copy()])
    assert c.kind == nd.EXACT and c.differing_bytes == 0


def test_compaction_is_order_class_of_its_record_width():
    # 8-byte records (key, float payload) in another order; the 16-byte pairs differ
    keys = np.arange(512, dtype=np.uint32)
    records = np.zeros(512, dtype=[("key", "<u4"), ("energy", "<f4")])
    records["key"], records["energy"] = keys, keys * 0.5
    shuffled = records[RNG.permutation(512)]
    c = nd.classify(as_bytes(records), [as_bytes(shuffled)])
    assert c.kind == nd.ORDER and c.element == 8
    # a candidate that loses one element fails, any order of the same elements passes
    again = records[RNG.permutation(512)]
    assert nd.order_mismatch("out", 0, as_bytes(again), as_bytes(records), 8) is None
    broken = again.copy()
    broken[3] = broken[4]
    found = nd.order_mismatch("out", 0x1000, as_bytes(broken), as_bytes(records), 8)
    assert found is not None and found.count >= 1 and found.address == 0x1000
    # what a session keeps across trials: the recorded side sorted once
    kept = nd.sorted_elements(as_bytes(records), 8)
    assert nd.order_mismatch("out", 0x1000, as_bytes(broken), kept, 8, presorted=True) == found
    assert nd.order_mismatch("out", 0, as_bytes(again), kept, 8, presorted=True) is None


def test_reordered_float_sums_are_float_class_with_a_tolerance_from_the_spread():
    values = RNG.standard_normal(4096).astype(np.float32)
    recorded = np.cumsum(values, dtype=np.float32)
    run = recorded.copy()  # another order of the additions: last-bit differences
    flip = RNG.choice(4096, 40, replace=False)
    run[flip] = np.nextafter(run[flip], np.float32(np.inf))
    c = nd.classify(as_bytes(recorded), [as_bytes(run)])
    assert c.kind == nd.FLOAT and c.dtype == "float32"
    spread = np.max(np.abs(run.astype(np.float64) - recorded) / np.abs(recorded))
    assert c.rtol >= nd.SPREAD_FACTOR * spread * 0.999
    # within the derived tolerance: passes; a real error: fails
    near = recorded.copy()
    near[flip[:5]] = np.nextafter(near[flip[:5]], np.float32(-np.inf))
    assert verify_host(as_bytes(near), as_bytes(recorded), c.tolerance()) is None
    wrong = recorded.copy()
    wrong[10] *= 1.01
    assert verify_host(as_bytes(wrong), as_bytes(recorded), c.tolerance()) is not None


def test_an_annotated_tolerance_widens_the_measured_one():
    c = nd.RegionClass(nd.FLOAT, dtype="float32", atol=1e-6, rtol=1e-6)
    wide = c.tolerance(Tolerance("float32", atol=1e-3, rtol=0.0))
    assert (wide.atol, wide.rtol) == (1e-3, 1e-6)
    other = c.tolerance(Tolerance("float64", atol=1.0))  # another dtype: ignored
    assert (other.atol, other.rtol) == (1e-6, 1e-6)


def test_clock_values_and_integers_are_never_floats():
    cycles = RNG.integers(1000, 100000, 256, dtype=np.int64)
    later = cycles + RNG.integers(1, 50, 256)
    c = nd.classify(as_bytes(cycles), [as_bytes(later)])
    assert c.kind == nd.ANY and c.differing_bytes > 0
    # large float changes (a race) are not "reordered sums" either
    x = RNG.standard_normal(256).astype(np.float32)
    y = x.copy()
    y[::7] += 1.0
    assert nd.classify(as_bytes(x), [as_bytes(y)]).kind == nd.ANY


def test_differences_in_one_run_of_several_count():
    recorded = as_bytes(np.arange(64, dtype=np.float64))
    other = np.arange(64, dtype=np.float64)
    other[5] = np.nextafter(other[5], 100.0)
    c = nd.classify(recorded, [recorded.copy(), as_bytes(other), recorded.copy()])
    assert c.kind == nd.FLOAT and c.dtype == "float64"


def test_profile_round_trip_and_cache_in_the_database(tmp_path):
    db_path = tmp_path / "golden.rdb"
    shutil.copytree(GOLDEN, db_path)
    inst = next(Database.open(db_path).instances())
    names = [r.name for r in inst.regions]
    assert nd.load_profile(inst) is None
    profile = nd.DeterminismProfile(3, "default<O3>", {
        names[0]: nd.RegionClass(nd.ORDER, element=8, differing_bytes=64),
    })
    assert nd.store_profile(inst, profile)
    again = nd.load_profile(inst)
    assert again is not None and again.to_dict() == profile.to_dict()
    assert again.classes() == {names[0]: nd.ORDER}
    assert not again.exact and "1 nondeterministic-order" in again.summary()
    # `mneme show` prints the classes, and says when they are not measured yet
    shown = CliRunner().invoke(cli, ["show", str(db_path), inst.id, "--json"])
    assert shown.exit_code == 0, shown.output
    assert "nondeterministic-order" in shown.output
    other = next(i for i in Database.open(db_path).instances() if i.id != inst.id)
    shown = CliRunner().invoke(cli, ["show", str(db_path), other.id])
    assert "not measured yet" in shown.output
    # a cache that names regions the instance does not have is ignored, not trusted
    bad = nd.DeterminismProfile(3, "default<O3>", {"r-00000000deadbeef": nd.RegionClass(nd.ANY)})
    assert nd.store_profile(inst, bad)
    assert nd.load_profile(inst) is None
    nd.profile_path(inst).write_text("{not json")
    assert nd.load_profile(inst) is None


def test_read_only_database_keeps_working_without_a_cache(tmp_path):
    db_path = tmp_path / "golden.rdb"
    shutil.copytree(GOLDEN, db_path)
    inst = next(Database.open(db_path).instances())
    private = db_path / ".mneme"
    private.mkdir(exist_ok=True)
    private.chmod(0o500)
    try:
        stored = nd.store_profile(inst, nd.DeterminismProfile(1, "default<O3>"))
        if os.geteuid() != 0:  # root writes anyway
            assert stored is False
    finally:
        private.chmod(0o700)


def test_config_and_result_carry_the_classes():
    assert ReplayConfig().determinism_runs == nd.DEFAULT_RUNS
    assert ReplayConfig(determinism_runs=0).to_dict()["determinism_runs"] == 0
    with pytest.raises(ReplayConfigError):
        ReplayConfig(determinism_runs=-1)
    from mneme.replay.engine.config import ReplaySettings

    result = ReplayResult("k", "a/b", ReplaySettings(), verified=True,
                          determinism={"r-0000000000001000": nd.ANY})
    back = ReplayResult.from_json(result.to_json())
    assert back.determinism == {"r-0000000000001000": nd.ANY}
    assert "1 region(s) nondeterministic" in back.summary()
