"""Compile-only replay: everything up to the cubin, no GPU needed."""

import struct

import pytest
from mneme.replay.engine import (
    LaunchConfigError,
    ReplayConfig,
    ReplaySession,
    replay,
    select_instance,
)
from mneme.replay.engine.errors import InstanceNotFoundError
from mneme.replay.jit import CompileCache, CompileConfig, UnknownPassError
from replay_support import ADD_BIAS, REVERSE, SAXPY, static_hash

COMPILE_ONLY = ReplayConfig(compile_only=True)


def test_every_golden_instance_compiles(golden_db):
    instances = list(golden_db.instances())
    assert len(instances) == 3
    for instance in instances:
        result = replay(instance, CompileConfig.for_level("O3"), COMPILE_ONLY)
        assert result.compile_only and result.verified is None and result.times == []
        assert result.arch == "sm_90"  # the recorded GPU's
        assert result.registers > 0 and result.binary_size > 0 and result.compile_time > 0
        assert result.metrics["binary_size"] == result.binary_size
        assert result.launch["grid"] == list(instance.grid)
        assert "compile-only" in result.summary()


@pytest.mark.parametrize("kernel", [SAXPY, ADD_BIAS, REVERSE])
@pytest.mark.parametrize("level", ["O0", "O3"])
def test_cubins_are_loadable_executables(replay_db, kernel, level):
    # `extern __shared__` (reverse_chunks; every kernel at O0, where the unused `tile`
    # stays) is `.extern .shared` in PTX: whole-program code, not -c. A relocatable cubin
    # (ELF type 1) does not load as a module: no kernel in it, or an invalid image.
    session = ReplaySession(replay_db.instance(static_hash(kernel)), gpu=False)
    compiled, _ = session.compile(CompileConfig.for_level(level))
    assert compiled.binary[:4] == b"\x7fELF"
    assert int.from_bytes(compiled.binary[16:18], "little") == 2  # ET_EXEC


def test_specialization_comes_from_the_recording(golden_db):
    instance = golden_db.instance("saxpy/1b78")
    config = ReplayConfig(
        compile_only=True, specialize=True, specialize_dims=True, set_launch_bounds=True
    )
    result = replay(instance, CompileConfig(), config)
    compile = result.configuration.compile
    a, _, _, n = struct.unpack("<f4xQQi", instance.args[:28])
    # scalars only: a and n, not the pointers
    assert compile.specialize_args == {0: struct.pack("<f", a), 3: struct.pack("<i", n)}
    assert compile.block_dim == tuple(instance.block) and compile.grid_dim == tuple(instance.grid)
    assert compile.max_threads == instance.block[0]


def test_overrides_reach_the_configuration(replay_db):
    instance = replay_db.instance(static_hash(SAXPY))
    result = replay(
        instance,
        CompileConfig(),
        ReplayConfig(compile_only=True, block=(128, 1, 1), grid=(8, 1, 1), specialize_dims=True),
    )
    assert result.launch == {"grid": [8, 1, 1], "block": [128, 1, 1], "shared_mem": 0}
    assert result.configuration.compile.block_dim == (128, 1, 1)
    with pytest.raises(LaunchConfigError, match="launch bound of 64 threads"):
        replay(instance, CompileConfig(max_threads=64), COMPILE_ONLY)
    with pytest.raises(LaunchConfigError, match="exceeds"):
        replay(instance, CompileConfig(), ReplayConfig(compile_only=True, block=(2048, 1, 1)))


def test_session_caches_compiles(replay_db, tmp_path):
    instance = replay_db.instance(static_hash(ADD_BIAS))
    cache = CompileCache(tmp_path / "cache")
    with ReplaySession(instance, cache=cache, gpu=False) as session:
        first = session.run(CompileConfig.for_level("O2"))
        again = session.run(CompileConfig.for_level("O2"))
        assert not first.compile_cached and again.compile_cached and again.compile_time == 0.0
        assert again.registers == first.registers
    with ReplaySession(instance, cache=CompileCache(tmp_path / "cache"), gpu=False) as session:
        assert session.run(CompileConfig.for_level("O2")).compile_cached


def test_bad_pipeline_is_llvms_error(replay_db):
    instance = replay_db.instance(static_hash(SAXPY))
    with pytest.raises(UnknownPassError, match="unknown function pass 'nope'"):
        replay(instance, CompileConfig(pipeline="function(nope)"), COMPILE_ONLY)


def test_instance_selection(replay_db, golden_db):
    assert select_instance(golden_db, None, "1b78").id.endswith("/1b783248d1ae4a7d")
    assert select_instance(golden_db, "row_sum").kernel.name == "_Z7row_sumPKfPfi"
    with pytest.raises(InstanceNotFoundError, match="choose one with -rid: "):
        select_instance(golden_db)
    with pytest.raises(
        InstanceNotFoundError, match="recorded: .*5acf7c2e2f6ed113/1b783248d1ae4a7d"
    ):
        select_instance(golden_db, None, "ffff")


def test_errors_carry_the_failure_kind_their_raiser_set(golden_db):
    """Kinds a tuner records for a failed trial (docs/tune.md, "Why a trial fails")."""
    from mneme.replay.engine import KernelFailedError, ReplayConfigError, RestoreError
    from mneme.replay.engine.errors import is_sticky
    from mneme.runtime import DriverError

    instance = next(golden_db.instances())
    with ReplaySession(instance, gpu=False) as session:
        with pytest.raises(LaunchConfigError) as launch:
            session.run(CompileConfig(), ReplayConfig(block=(2048, 1, 1), compile_only=True))
        assert launch.value.kind == "launch-refused"
        with pytest.raises(UnknownPassError) as compile_error:
            session.run(CompileConfig(pipeline="default<O3>,no-such-pass"), COMPILE_ONLY)
        assert compile_error.value.kind == "compile"
        # A sticky driver error poisons the context whatever the step meant it to be
        # (decided without asking the device).
        sticky = DriverError("cuLaunchKernel failed", 700, "CUDA_ERROR_ILLEGAL_ADDRESS")
        failure = session._driver_failure("the launch was refused", sticky, "launch-refused",
                                          KernelFailedError)
        assert isinstance(failure, KernelFailedError) and failure.kind == "context-poisoned"
        assert "unusable" in str(failure)
    assert not is_sticky(DriverError("cuFuncSetAttribute failed", 1, "CUDA_ERROR_INVALID_VALUE"))
    assert ReplayConfigError("bad").kind == "invalid" and RestoreError("gone").kind == "restore"
    assert KernelFailedError("fault").kind == "context-poisoned"
    assert KernelFailedError("refused", kind="launch-refused").kind == "launch-refused"


def test_out_of_memory_at_restore_says_what_is_needed_and_free(golden_db):
    """A restore the GPU has no room for: one line with the bytes needed and free."""
    from types import SimpleNamespace

    from mneme.replay.engine import ReplaySession

    instance = golden_db.instance("saxpy/1b78")
    gpu = SimpleNamespace(name="Test GPU", memory_info=lambda: (1 << 30, 80 << 30))
    with ReplaySession(instance, device=gpu, gpu=False) as session:
        line = session._out_of_memory("restoring the recorded memory failed: cuMemCreate: out of memory")
    need = 3 * sum(int(r.size) for r in instance.regions) / (1 << 30)
    assert line.startswith(f"not enough device memory to restore instance {instance.id}: it needs about {need:.2f} GiB")
    assert "1.00 GiB of 80.00 GiB are free on Test GPU" in line and "\n" not in line
