"""Replay on a real GPU: restore, run, verify on the device, overrides, leaks.

Run on the GPU host with ``hatch run test tests/replay -m gpu``; without a CUDA driver
every test here is skipped by the ``device`` fixture.
"""

import gc
import struct

import pytest
from click.testing import CliRunner
from mneme.cli.main import cli
from mneme.replay.db import Annotation, Database, DatabaseWriter
from mneme.replay.engine import (
    ReplayConfig,
    ReplayResult,
    ReplaySession,
    Tolerance,
    replay,
)
from mneme.replay.engine import determinism as nd
from mneme.replay.jit import CompileCache, CompileConfig
from mneme.runtime import RangeUnavailableError
from replay_support import (
    ADD_BIAS,
    INFO,
    KERNELS,
    MIB2,
    REVERSE,
    SAXPY,
    SMOOTH,
    compile_bitcode,
    kernel_record,
    smooth_record,
    static_hash,
)

pytestmark = pytest.mark.gpu

O3 = CompileConfig.for_level("O3")
QUICK = ReplayConfig(iterations=2, warmup=1)


def instance_of(db, kernel):
    return db.instance(static_hash(kernel))


def test_golden_instances_replay_verified(golden_db, device):
    for instance in golden_db.instances():
        result = replay(instance, O3, ReplayConfig(iterations=3), device=device)
        assert result.verified, result.summary()
        assert len(result.times) == 3 and all(t > 0 for t in result.times)
        assert result.registers > 0 and result.device == device.name


@pytest.mark.parametrize("kernel", [SAXPY, ADD_BIAS, REVERSE, SMOOTH])
@pytest.mark.parametrize("level", ["O0", "O3"])
def test_test_kernels_replay_verified(replay_db, device, kernel, level):
    config = CompileConfig.for_level(level, codegen_opt_level=0 if level == "O0" else 3)
    result = replay(instance_of(replay_db, kernel), config, QUICK, device=device)
    assert result.verified, result.summary()
    assert result.mismatches == []


def test_globals_are_reset_every_iteration(replay_db, device):
    # add_bias does g_count += n per launch: only a reset before each iteration keeps the
    # final value at the recorded 5 + n
    result = replay(
        instance_of(replay_db, ADD_BIAS), O3, ReplayConfig(iterations=10), device=device
    )
    assert result.verified, result.summary()
    assert len(result.times) == 10


def test_wrong_argument_specialization_is_caught(replay_db, device):
    instance = instance_of(replay_db, SAXPY)
    wrong = CompileConfig(specialize_args={3: struct.pack("<i", 10)})  # n = 10, not 1000
    result = replay(instance, wrong, QUICK, device=device)
    assert result.verified is False
    (mismatch,) = result.mismatches
    y_region = instance.regions[1]  # regions are in address order: x, y
    assert mismatch.region == y_region.name and mismatch.unit == "bytes"
    assert 10 * 4 <= mismatch.first_offset < 1000 * 4 and mismatch.count > 0


def test_wrong_dimension_specialization_is_caught(replay_db, device):
    instance = instance_of(replay_db, SAXPY)
    # blockDim folded to 64 while the launch uses 256 threads: wrong indices
    result = replay(instance, CompileConfig(block_dim=(64, 1, 1)), QUICK, device=device)
    assert result.verified is False and result.mismatches


def test_launch_overrides(replay_db, device):
    instance = instance_of(replay_db, SAXPY)  # n = 1000
    covered = ReplayConfig(grid=(8, 1, 1), block=(128, 1, 1), iterations=2)
    result = replay(instance, O3, covered, device=device)
    assert result.verified and result.launch["block"] == [128, 1, 1]
    short = ReplayConfig(grid=(4, 1, 1), block=(64, 1, 1), iterations=2)  # 256 threads
    result = replay(instance, O3, short, device=device)
    assert result.verified is False
    assert result.mismatches[0].first_offset >= 256 * 4


def test_specialization_verifies(replay_db, device):
    for kernel in (SAXPY, ADD_BIAS, REVERSE, SMOOTH):
        config = ReplayConfig(
            specialize=True, specialize_dims=True, set_launch_bounds=True, iterations=2
        )
        result = replay(instance_of(replay_db, kernel), O3, config, device=device)
        assert result.verified, result.summary()
        assert result.configuration.compile.block_dim is not None


def test_dynamic_shared_memory_override(replay_db, device):
    instance = instance_of(replay_db, REVERSE)
    big = ReplayConfig(shared_mem=64 * 1024, iterations=2)  # above the 48 KiB default
    result = replay(instance, O3, big, device=device)
    assert result.verified, result.summary()


def test_l2_flush_and_timing(replay_db, device):
    result = replay(
        instance_of(replay_db, SMOOTH),
        O3,
        ReplayConfig(iterations=5, warmup=2, flush_l2=True),
        device=device,
    )
    assert result.verified and len(result.times) == 5
    assert all(0 < t < 1000 for t in result.times)


@pytest.fixture(scope="module")
def perturbed_db(tmp_path_factory):
    """smooth with an epilogue 8 ulp off numpy's: only a tolerance verifies it."""
    work = tmp_path_factory.mktemp("perturbed")
    bitcode = compile_bitcode(KERNELS / "replay_kernels.cu", work / "k.bc")
    with DatabaseWriter.create(work / "p.rdb", INFO) as writer:
        writer.add_kernel(kernel_record(bitcode, SMOOTH, "smooth(float const*, float*, int)"))
        writer.add_instance(
            static_hash(SMOOTH),
            smooth_record(perturb=1e-6, annotate=Annotation("float32", atol=1e-6, rtol=1e-5)),
        )
    return Database.open(work / "p.rdb")


def test_tolerances_from_annotations_and_overrides(perturbed_db, device):
    instance = instance_of(perturbed_db, SMOOTH)
    out_region = instance.regions[1].name
    # Without a determinism profile: the unchanged kernel misses this deliberately
    # perturbed epilogue by 8 ulp in every run, so a profile classes the region as a
    # float spread, which a tolerance given here can only widen (determinism.py).
    quick = QUICK.with_(determinism_runs=0)
    with ReplaySession(instance, device=device) as session:
        assert session.run(O3, quick).verified  # the recording's annotation
        exact = session.run(O3, quick.with_(tolerances={out_region: Tolerance()}))
        assert exact.verified is False
        (mismatch,) = exact.mismatches
        assert mismatch.region == out_region and mismatch.unit == "bytes"
        tight = session.run(
            O3, quick.with_(tolerances={out_region: Tolerance("float32", rtol=1e-9)})
        )
        assert tight.verified is False and tight.mismatches[0].unit == "float32"
        assert 0 < tight.mismatches[0].max_error < 1e-3
        l2 = session.run(
            O3, quick.with_(tolerances={out_region: Tolerance("float32", rtol=1e-5, norm="l2")})
        )
        assert l2.verified, l2.summary()


def test_one_session_many_configurations(replay_db, device):
    instance = instance_of(replay_db, SAXPY)
    nd.profile_path(instance).unlink(missing_ok=True)  # measured by this session's first run
    with ReplaySession(instance, device=device) as session:
        results = [
            session.run(CompileConfig.for_level(level), QUICK)
            for level in ("O0", "O1", "O2", "O3", "Os", "Oz")
        ]
        assert all(r.verified for r in results)
        # the first replay's phases, each timed apart: restore, then the determinism runs
        # (which restore nothing), then run and verify; later replays only run and verify
        first, later = results[0].timings, results[1].timings
        assert {"restore", "determinism", "run", "verify"} <= set(first), first
        assert all(first[k] >= 0 for k in first)
        assert "restore" not in later and "determinism" not in later, later
    with ReplaySession(instance, device=device) as session:  # the profile from the cache
        timings = session.run(O3, QUICK).timings
        assert "restore" in timings and "determinism" in timings, timings
        again = session.run(CompileConfig.for_level("O3"), QUICK)
        assert again.compile_cached and again.verified


def test_recorded_range_in_use_is_a_user_error(replay_db, device):
    instance = instance_of(replay_db, SAXPY)
    with ReplaySession(instance, device=device) as first:
        assert first.run(O3, QUICK).verified
        with ReplaySession(instance, device=device) as second:
            with pytest.raises(RangeUnavailableError):
                second.run(O3, QUICK)


def test_hundred_replays_leak_no_device_memory(replay_db, device):
    cache = CompileCache(None)
    instances = [instance_of(replay_db, k) for k in (SAXPY, ADD_BIAS, REVERSE)]
    for instance in instances:  # warm: compile cache, driver pools
        assert replay(instance, O3, QUICK, device=device, cache=cache).verified
    gc.collect()
    device.synchronize()
    free_before, _ = device.memory_info()
    for i in range(100):
        result = replay(
            instances[i % 3], O3, ReplayConfig(iterations=1, warmup=0), device=device, cache=cache
        )
        assert result.verified
    gc.collect()
    device.synchronize()
    free_after, _ = device.memory_info()
    assert free_after >= free_before - 8 * MIB2, (free_before - free_after) / 2**20


def test_command_on_the_gpu(replay_db, device, tmp_path):
    runner = CliRunner()
    db = str(replay_db.root)
    ok = runner.invoke(
        cli, ["replay", "-rdb", db, "-rid", static_hash(SAXPY), "--json", "--iterations", "3"]
    )
    assert ok.exit_code == 0, ok.output
    result = ReplayResult.from_json(ok.output)
    assert result.verified and len(result.times) == 3 and not result.compile_only
    # a saved configuration with a wrong specialization fails verification: exit 1
    settings = result.configuration.to_dict()
    settings["compile"]["specialize_args"] = {"3": struct.pack("<i", 5).hex()}
    (tmp_path / "wrong.json").write_text(__import__("json").dumps(settings))
    bad = runner.invoke(
        cli,
        [
            "replay",
            "-rdb",
            db,
            "-rid",
            static_hash(SAXPY),
            "--config",
            str(tmp_path / "wrong.json"),
        ],
    )
    assert bad.exit_code == 1 and "verified   NO" in bad.output, bad.output
    too_big = runner.invoke(
        cli,
        [
            "replay",
            "-rdb",
            db,
            "-rid",
            static_hash(SAXPY),
            "--block-dim-x",
            "1024",
            "--block-dim-y",
            "2",
        ],
    )
    assert too_big.exit_code == 2 and "exceeds the device limit" in too_big.output
