"""Search spaces: parameters from the recorded launch, constraints, feasibility, user spaces."""

import math

import pytest
from mneme.replay.engine import ReplaySettings
from mneme.tune import (
    BoundSpace,
    Categorical,
    Constraint,
    IntParam,
    SpaceContext,
    SpaceError,
    resolve_spaces,
    settings_with,
    space,
)
from mneme.tune.space import PipelineSpace

CTX_1D = SpaceContext(grid=(40, 1, 1), block=(256, 1, 1), scalar_params=(0, 3))
CTX_2D = SpaceContext(grid=(16, 8, 1), block=(32, 8, 1))


def bound(names, ctx=CTX_1D, grid_mode="cover"):
    return BoundSpace(resolve_spaces(names, grid_mode), ctx)


def test_launch_1d_covers_recorded_work_for_every_block():
    b = bound("launch")
    (param,) = b.params
    assert (param.low, param.high, param.step) == (32, 1024, 32)
    total = 40 * 256
    for point in b.grid():
        settings = b.apply(point, ReplaySettings())
        threads = settings.replay.grid[0] * settings.replay.block[0]
        assert threads >= total and threads - total < settings.replay.block[0]
    assert b.baseline() == {"block_x": 256}
    assert b.apply(b.baseline(), ReplaySettings()).replay.grid == (40, 1, 1)


def test_launch_2d_constraints_and_modes():
    b = bound("launch", CTX_2D)
    assert [p.name for p in b.params] == ["block_x", "block_y"]
    feasible = [p for p in b.grid() if b.violated(p) is None]
    assert feasible and all((p["block_x"] * p["block_y"]) % 32 == 0 for p in feasible)
    assert all(p["block_x"] * p["block_y"] <= 1024 for p in feasible)
    assert b.violated({"block_x": 2, "block_y": 2}).startswith("block threads are a multiple")
    assert b.violated({"block_x": 64, "block_y": 32}).startswith("block threads <=")
    s = b.apply({"block_x": 16, "block_y": 16}, ReplaySettings())
    assert s.replay.grid == (32, 4, 1)  # ceil(16*32/16), ceil(8*8/16)
    keep = bound("launch", CTX_2D, "keep")
    assert keep.apply({"block_x": 16, "block_y": 16}, ReplaySettings()).replay.grid == (16, 8, 1)
    free = bound("launch", CTX_1D, "free")
    assert [p.name for p in free.params] == ["block_x", "grid_x"] and free.params[1].log
    assert free.apply({"block_x": 64, "grid_x": 7}, ReplaySettings()).replay.grid == (7, 1, 1)


def test_launch_scales_per_thread_shared_memory_with_the_block():
    """A reduction recorded with blockDim.x * sizeof(double) bytes of dynamic shared memory
    gets 8 bytes per thread at every block size (not the recorded 2048 bytes)."""
    ctx = SpaceContext(grid=(120, 1, 1), block=(256, 1, 1), shared_mem=256 * 8,
                       max_shared_memory_per_block=4096)
    assert ctx.shared_per_thread == 8
    b = bound("launch", ctx)
    assert b.apply({"block_x": 128}, ReplaySettings()).replay.shared_mem == 1024
    assert b.apply({"block_x": 512}, ReplaySettings()).replay.shared_mem == 4096
    assert b.apply(b.baseline(), ReplaySettings()).replay.shared_mem == 2048
    assert b.violated({"block_x": 1024}).startswith("dynamic shared memory scaled")
    # a fixed amount (not a multiple of the block) stays as recorded
    fixed = SpaceContext(grid=(8, 1, 1), block=(256, 1, 1), shared_mem=1000)
    assert fixed.shared_per_thread is None
    assert bound("launch", fixed).apply({"block_x": 64}, ReplaySettings()).replay.shared_mem is None
    assert SpaceContext(grid=(8, 1, 1), block=(256, 1, 1)).shared_per_thread is None


def test_device_limits_shape_the_space():
    small = SpaceContext(grid=(4, 1, 1), block=(128, 1, 1), max_threads_per_block=256, warp_size=32)
    (param,) = bound("launch", small).params
    assert param.high == 256


def test_pipeline_specialize_bounds_codegen_map_to_settings():
    b = bound("pipeline,specialize,bounds,codegen")
    point = {"opt_level": "O2", "passes": "function(loop-unroll<O3>)", "specialize_args": True,
             "specialize_dims": False, "launch_bounds": True, "min_blocks": 2,
             "max_registers": 64, "codegen_opt_level": 1, "ptxas_opt_level": 2}
    s = b.apply(point, ReplaySettings())
    assert s.compile.pipeline == "default<O2>,function(loop-unroll<O3>)"
    assert s.replay.specialize and not s.replay.specialize_dims and s.replay.set_launch_bounds
    assert (s.compile.min_blocks, s.compile.max_registers) == (2, 64)
    assert (s.compile.codegen_opt_level, s.compile.ptxas_opt_level) == (1, 2)
    assert b.violated({**point, "launch_bounds": False}) == "min blocks per SM needs launch bounds"
    assert b.apply(b.baseline(), ReplaySettings()) == ReplaySettings()


def test_every_pipeline_of_the_space_compiles_a_real_kernel():
    from mneme.replay.db import Database
    from mneme.replay.engine import ReplayConfig, ReplaySession
    from tune_support import GOLDEN, SAXPY

    b = BoundSpace([PipelineSpace()], CTX_1D)
    with ReplaySession(Database.open(GOLDEN).instance(SAXPY), gpu=False) as session:
        for point in b.grid():
            compile = b.apply(point, ReplaySettings()).compile
            result = session.run(compile, ReplayConfig(compile_only=True))
            assert result.registers > 0, compile.pipeline


def test_specialize_without_scalars_has_dims_only():
    ctx = SpaceContext(grid=(1, 1, 1), block=(32, 1, 1), scalar_params=())
    assert [p.name for p in bound("specialize", ctx).params] == ["specialize_dims"]


def test_user_space_function_and_signature():
    @space(IntParam("cap", 32, 128, step=32),
           constraints=[Constraint("cap is not 96", lambda p: p["cap"] != 96)], name="regcap")
    def regcap(params, settings, ctx):
        return settings_with(settings, compile={"max_registers": params["cap"]})

    b = BoundSpace([regcap], CTX_1D)
    assert b.size == 4 and b.feasible_count() == 3
    assert b.apply({"cap": 64}, ReplaySettings()).compile.max_registers == 64
    assert b.signature() != bound("launch").signature()
    assert b.signature() == BoundSpace([regcap], CTX_1D).signature()


def test_user_space_from_file(tmp_path):
    path = tmp_path / "myspace.py"
    path.write_text(
        "from mneme.tune import Space, Categorical, settings_with\n"
        "class Unroll(Space):\n"
        "    name = 'unroll'\n"
        "    def parameters(self, ctx):\n"
        "        return [Categorical('level', ('O1', 'O3'))]\n"
        "    def apply(self, p, settings, ctx):\n"
        "        return settings_with(settings, compile={'pipeline': f\"default<{p['level']}>\"})\n"
    )
    (unroll,) = resolve_spaces(f"{path}:Unroll")
    assert unroll.name == "unroll"
    assert BoundSpace([unroll], CTX_1D).apply({"level": "O1"}, ReplaySettings()).compile.pipeline == "default<O1>"
    with pytest.raises(SpaceError, match="has no 'Nope'"):
        resolve_spaces(f"{path}:Nope")
    with pytest.raises(SpaceError, match="does not exist"):
        resolve_spaces(f"{tmp_path}/missing.py:X")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("warp", "unknown space 'warp'"),
        ("launch,launch", "named more than once"),
        ("", "the search space is empty"),
    ],
)
def test_bad_spaces(spec, message):
    with pytest.raises(SpaceError, match=message):
        bound(spec)


def test_constraint_that_rules_out_everything():
    @space(Categorical("x", (1, 2, 3)), constraints=[Constraint("x is negative", lambda p: p["x"] < 0)])
    def never(params, settings, ctx):
        return settings

    with pytest.raises(SpaceError, match="rule out every point .*x is negative"):
        BoundSpace([never], CTX_1D).check_feasible()


def test_large_space_is_checked_by_sampling():
    def big_space(test):
        @space(IntParam("a", 1, 10**6), IntParam("b", 1, 10**6),
               constraints=[Constraint("the rule", test)])
        def big(params, settings, ctx):
            return settings

        return BoundSpace([big], CTX_1D)

    even = big_space(lambda p: (p["a"] + p["b"]) % 2 == 0)
    assert even.size == 10**12
    even.check_feasible()
    with pytest.raises(SpaceError, match="too many to walk"):
        even.feasible_count()
    with pytest.raises(SpaceError, match="rule out every point"):
        big_space(lambda p: p["a"] > p["b"] > p["a"]).check_feasible()


def test_int_param_validation():
    with pytest.raises(SpaceError):
        IntParam("x", 5, 1)
    with pytest.raises(SpaceError):
        IntParam("x", 1, 100, step=2, log=True)
    p = IntParam("x", 1, 1000, log=True)
    import random

    rng = random.Random(1)
    values = [p.sample(rng) for _ in range(1000)]
    assert all(1 <= v <= 1000 for v in values)
    assert sorted(values)[500] < 100  # log-uniform: the median is near sqrt(1000)
    assert math.isclose(IntParam("y", 0, 10, step=5).size, 3)


def test_transform_pipelines_parse_and_compile():
    """Every unroll and vectorization choice is a pipeline LLVM 22 parses, appended to the
    pipeline the other spaces chose, and compiles a kernel with a loop (row_sum; its
    recorded IR is already unrolled, so the code does not change here)."""
    from mneme.replay.db import Database
    from mneme.replay.engine import ReplayConfig, ReplaySession
    from mneme.replay.jit import check_pipeline
    from mneme.tune import TransformSpace
    from mneme.tune.space import UNROLL, VECTORIZE
    from tune_support import GOLDEN, ROW_SUM

    ctx = SpaceContext(grid=(4, 1, 1), block=(256, 1, 1))
    bound = BoundSpace(resolve_spaces("transforms,pipeline"), ctx)
    pipelines = set()
    for unroll in UNROLL:
        for vectorize in VECTORIZE:
            point = {**bound.baseline(), "unroll": unroll, "vectorize": vectorize, "opt_level": "O2"}
            pipeline = bound.apply(point, ReplaySettings()).compile.pipeline
            check_pipeline(pipeline)
            assert pipeline.startswith("default<O2>")
            assert (pipeline == "default<O2>") == (unroll == vectorize == "none")
            pipelines.add(pipeline)
    assert len(pipelines) == len(UNROLL) * len(VECTORIZE)
    assert TransformSpace().baseline(ctx) == {"unroll": "none", "vectorize": "none"}
    session = ReplaySession(Database.open(GOLDEN).instance(ROW_SUM), gpu=False)
    for unroll, vectorize in (("none", "none"), ("full-256", "all"), ("runtime", "load-store")):
        point = {**bound.baseline(), "unroll": unroll, "vectorize": vectorize}
        settings = bound.apply(point, ReplaySettings())
        result = session.run(settings.compile, ReplayConfig(compile_only=True))
        assert result.registers > 0 and result.binary_size > 0
        assert result.configuration.compile.pipeline == settings.compile.pipeline


def test_presets_expand_to_spaces():
    from mneme.tune import PRESETS

    quick = resolve_spaces("quick")
    assert [s.name for s in quick] == ["launch", "pipeline", "transforms", "bounds", "specialize"]
    assert quick[1].levels == ("O2", "O3")
    assert [s.name for s in resolve_spaces("all")] == [
        "launch", "pipeline", "transforms", "specialize", "bounds", "codegen"]
    assert set(PRESETS) == {"quick", "all"}
    with pytest.raises(SpaceError, match="named more than once"):
        resolve_spaces("quick,launch")
    ctx = SpaceContext(grid=(4, 1, 1), block=(256, 1, 1), scalar_params=(0,))
    bound = BoundSpace(quick, ctx)
    # The recorded configuration is a point of the preset: it is the study's trial 0.
    base = bound.baseline()
    assert base is not None
    settings = bound.apply(base, ReplaySettings())
    assert settings.compile.pipeline == "default<O3>" and settings.replay.block == (256, 1, 1)


def test_a_clustered_launch_keeps_whole_clusters():
    """A launch recorded in clusters of 4 blocks (cuBLASLt's Hopper GEMMs): derived grids
    round up to whole clusters, and a free grid that is not one violates a constraint."""
    ctx = SpaceContext(grid=(12, 1, 1), block=(256, 1, 1), cluster=(4, 1, 1))
    cover = bound("launch", ctx)
    assert cover.apply({"block_x": 512}, ReplaySettings()).replay.grid == (8, 1, 1)  # 6 -> 8
    assert cover.apply({"block_x": 128}, ReplaySettings()).replay.grid == (24, 1, 1)
    assert cover.apply(cover.baseline(), ReplaySettings()).replay.grid == (12, 1, 1)
    free = bound("launch", ctx, grid_mode="free")
    assert free.violated({"block_x": 256, "grid_x": 10}).startswith(
        "the grid is a whole number of the recorded thread-block clusters")
    assert not free.violated({"block_x": 256, "grid_x": 16})
