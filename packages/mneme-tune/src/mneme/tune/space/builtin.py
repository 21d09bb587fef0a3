"""The built-in spaces (launch, pipeline, transforms, specialize, bounds, codegen), their
names and the presets that combine them."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from mneme.replay.engine.launch_limits import MAX_GRID
from mneme.replay.jit import OPT_LEVELS

from ..errors import SpaceError
from .base import Space, settings_with
from .context import SpaceContext
from .parameters import Categorical, Constraint, Dim3, IntParam, Parameter, Point


def _powers_of_two(limit: int) -> tuple[int, ...]:
    return tuple(2**i for i in range(int(math.log2(limit)) + 1))


class LaunchSpace(Space):
    """Block dimensions (warp multiples within the device limit) and the grid.

    ``grid``: ``cover`` derives the grid so the recorded total threads stay covered
    (per axis: ceil(recorded grid × recorded block / block)); ``keep`` keeps the
    recorded grid; ``free`` tunes the x grid too (log scale, 1 to 4× the covering grid).
    A 1-D launch tunes block x in warp steps; 2-D and 3-D ones tune powers of two per axis.
    A launch recorded in thread-block clusters keeps its cluster shape: derived grids round
    up to whole clusters, and a free grid must be one. A cooperative launch (its grid
    synchronises) must stay co-resident: a shape whose blocks cannot all be resident even
    at the device's thread and block limits per multiprocessor violates a constraint; the
    exact bound (the compiled code's occupancy) is checked when a candidate replays.

    Parameters:
        grid: the grid mode, one of ``GRID_MODES``.

    Raises:
        SpaceError: an unknown grid mode.
    """

    name = "launch"
    GRID_MODES = ("cover", "keep", "free")

    def __init__(self, grid: str = "cover"):
        if grid not in self.GRID_MODES:
            raise SpaceError(f"unknown grid mode {grid!r}; use one of {', '.join(self.GRID_MODES)}")
        self.grid_mode = grid

    def parameters(self, ctx):
        limit = ctx.max_threads_per_block
        if ctx.dimensions == 1:
            params: list[Parameter] = [IntParam("block_x", ctx.warp_size, limit, step=ctx.warp_size)]
        else:
            params = [Categorical("block_x", _powers_of_two(limit)),
                      Categorical("block_y", _powers_of_two(limit))]
            if ctx.dimensions == 3:
                params.append(Categorical("block_z", _powers_of_two(64)))
        if self.grid_mode == "free":
            covering = self._covering(ctx, (ctx.warp_size, 1, 1))[0]
            params.append(IntParam("grid_x", 1, max(2, 4 * covering), log=True))
        return params

    def constraints(self, ctx):
        out = []
        if ctx.dimensions > 1:
            out += [
                Constraint(f"block threads are a multiple of the warp size ({ctx.warp_size})",
                           lambda p: self._threads(p) % ctx.warp_size == 0),
                Constraint(f"block threads <= the device limit ({ctx.max_threads_per_block})",
                           lambda p: self._threads(p) <= ctx.max_threads_per_block),
            ]
        if ctx.cluster and self.grid_mode == "free":
            out.append(Constraint(
                "the grid is a whole number of the recorded thread-block clusters",
                lambda p: self.grid_of(p, ctx)[0] % ctx.cluster[0] == 0))
        if ctx.cooperative:
            # (the limits are not in the text: a study keeps its identity across devices)
            out.append(Constraint(
                "a cooperative grid fits on the GPU at once (blocks <= resident blocks per "
                "multiprocessor at the device's limits x multiprocessors)",
                lambda p: math.prod(self.grid_of(p, ctx)) <= self.most_resident_blocks(p, ctx)))
        out.append(Constraint("the grid fits CUDA's limits",
                              lambda p: all(g <= m for g, m in
                                            zip(self.grid_of(p, ctx), MAX_GRID, strict=True))))
        if ctx.shared_per_thread:
            # (the limit is not in the text: a study keeps its identity across devices)
            out.append(Constraint(
                "dynamic shared memory scaled with the block fits the device's limit",
                lambda p: self.shared_of(p, ctx) <= ctx.max_shared_memory_per_block))
        return out

    def most_resident_blocks(self, p: Point, ctx: SpaceContext) -> int:
        """Blocks of a point's size the GPU holds at once at its thread and block limits
        per multiprocessor, whatever the code's registers and shared memory: an upper
        bound on a cooperative grid.

        Parameters:
            p: the point.
            ctx: the device's limits.

        Returns:
            The number of blocks.
        """
        per_sm = min(ctx.max_threads_per_multiprocessor // max(1, self._threads(p)),
                     ctx.max_blocks_per_multiprocessor)
        return per_sm * ctx.multiprocessor_count

    def shared_of(self, p: Point, ctx: SpaceContext) -> int:
        """The dynamic shared memory of a point: scaled with the block when the recording
        used a fixed number of bytes per thread, else the recorded amount.

        Parameters:
            p: the point.
            ctx: the recorded launch.

        Returns:
            Bytes per block.
        """
        per_thread = ctx.shared_per_thread
        return per_thread * self._threads(p) if per_thread else ctx.shared_mem

    @staticmethod
    def _block(p: Point) -> Dim3:
        return (int(p["block_x"]), int(p.get("block_y", 1)), int(p.get("block_z", 1)))

    def _threads(self, p: Point) -> int:
        return math.prod(self._block(p))

    @staticmethod
    def _covering(ctx: SpaceContext, block: Dim3) -> Dim3:
        cluster = ctx.cluster or (1, 1, 1)
        return tuple(  # type: ignore[return-value]
            math.ceil(max(1, math.ceil(g * b / nb)) / c) * c
            for g, b, nb, c in zip(ctx.grid, ctx.block, block, cluster, strict=True)
        )

    def grid_of(self, p: Point, ctx: SpaceContext) -> Dim3:
        """The grid a point launches, by the grid mode.

        Parameters:
            p: the point.
            ctx: the recorded launch.

        Returns:
            The grid.
        """
        if self.grid_mode == "keep":
            return ctx.grid
        grid = self._covering(ctx, self._block(p))
        if self.grid_mode == "free":
            grid = (int(p["grid_x"]), grid[1], grid[2])
        return grid

    def apply(self, params, settings, ctx):
        replay = {"block": self._block(params), "grid": self.grid_of(params, ctx)}
        if ctx.shared_per_thread:
            replay["shared_mem"] = self.shared_of(params, ctx)
        return settings_with(settings, replay=replay)

    def baseline(self, ctx):
        point: Point = {"block_x": ctx.block[0]}
        if ctx.dimensions > 1:
            point["block_y"] = ctx.block[1]
        if ctx.dimensions == 3:
            point["block_z"] = ctx.block[2]
        if self.grid_mode == "free":
            point["grid_x"] = ctx.grid[0]
        return point


#: extra pass sequences the pipeline space adds after a default<Ox> pipeline
PASS_SEQUENCES = (
    "",
    "function(loop-unroll<O3>)",
    "function(slp-vectorizer,instcombine)",
    "function(loop-mssa(licm),gvn,instcombine)",
    "function(loop-unroll-full,simplifycfg)",
)


class PipelineSpace(Space):
    """The LLVM pipeline: an optimization level, then one of a few extra pass sequences.

    Parameters:
        levels: the levels to choose from (``OPT_LEVELS``).
        sequences: the extra pass sequences to choose from ("" for none).

    Raises:
        SpaceError: an unknown level.
    """

    name = "pipeline"

    def __init__(self, levels: Sequence[str] = OPT_LEVELS, sequences: Sequence[str] = PASS_SEQUENCES):
        unknown = [level for level in levels if level not in OPT_LEVELS]
        if unknown:
            raise SpaceError(f"unknown optimization level(s) {', '.join(unknown)}")
        self.levels = tuple(levels)
        self.sequences = tuple(sequences)

    def parameters(self, ctx):
        return [Categorical("opt_level", self.levels), Categorical("passes", self.sequences)]

    def apply(self, params, settings, ctx):
        pipeline = f"default<{params['opt_level']}>"
        if params["passes"]:
            pipeline += "," + params["passes"]
        return settings_with(settings, compile={"pipeline": pipeline})

    def baseline(self, ctx):
        return {"opt_level": "O3", "passes": ""} if "O3" in self.levels and "" in self.sequences else None


class SpecializeSpace(Space):
    """Fold the recorded scalar arguments and/or the launch dimensions into the code."""

    name = "specialize"

    def parameters(self, ctx):
        params: list[Parameter] = [Categorical("specialize_dims", (False, True))]
        if ctx.scalar_params:
            params.insert(0, Categorical("specialize_args", (False, True)))
        return params

    def apply(self, params, settings, ctx):
        return settings_with(settings, replay={
            "specialize": bool(params.get("specialize_args", False)),
            "specialize_dims": bool(params["specialize_dims"]),
        })

    def baseline(self, ctx):
        point = {"specialize_dims": False}
        if ctx.scalar_params:
            point["specialize_args"] = False
        return point


REGISTER_CAPS = (0, 32, 40, 48, 64, 80, 96, 128, 168, 255)


class BoundsSpace(Space):
    """Launch bounds (max threads = the block size, min blocks per SM) and a register cap
    (``0`` = none)."""

    name = "bounds"

    def parameters(self, ctx):
        caps = tuple(c for c in REGISTER_CAPS if c <= ctx.max_registers_per_thread)
        return [Categorical("launch_bounds", (False, True)),
                Categorical("min_blocks", (0, 1, 2, 4)),
                Categorical("max_registers", caps)]

    def constraints(self, ctx):
        return [Constraint("min blocks per SM needs launch bounds",
                           lambda p: p["min_blocks"] == 0 or p["launch_bounds"])]

    def apply(self, params, settings, ctx):
        return settings_with(
            settings,
            compile={"min_blocks": params["min_blocks"] or None,
                     "max_registers": params["max_registers"] or None},
            replay={"set_launch_bounds": bool(params["launch_bounds"])},
        )

    def baseline(self, ctx):
        return {"launch_bounds": False, "min_blocks": 0, "max_registers": 0}


class CodegenSpace(Space):
    """LLVM's codegen optimization level and ptxas's."""

    name = "codegen"

    def parameters(self, ctx):
        return [Categorical("codegen_opt_level", (0, 1, 2, 3)),
                Categorical("ptxas_opt_level", (0, 1, 2, 3))]

    def apply(self, params, settings, ctx):
        return settings_with(settings, compile={
            "codegen_opt_level": int(params["codegen_opt_level"]),
            "ptxas_opt_level": int(params["ptxas_opt_level"]),
        })

    def baseline(self, ctx):
        return {"codegen_opt_level": 3, "ptxas_opt_level": 3}


#: loop unrolling after the pipeline: LLVM 22's loop-unroll with its parameters (the
#: optimization level, partial and runtime unrolling, the trip-count bound, the size up to
#: which a loop is unrolled fully); every string parses (check_pipeline, tests)
UNROLL = {
    "none": "",
    "partial": "loop-unroll<O3;partial;no-runtime>",
    "runtime": "loop-unroll<O3;partial;runtime;upperbound>",
    "full-8": "loop-unroll<O3;no-partial;full-unroll-max=8>",
    "full-32": "loop-unroll<O3;no-partial;full-unroll-max=32>",
    "full-256": "loop-unroll<O3;partial;runtime;upperbound;full-unroll-max=256>",
}
#: vectorization after unrolling: the loop vectorizer (interleaving too), SLP, and the
#: load/store vectorizer that gives NVPTX its ld.v2/ld.v4 accesses
VECTORIZE = {
    "none": "",
    "loop": "loop-vectorize<no-interleave-forced-only;no-vectorize-forced-only>",
    "slp": "slp-vectorizer",
    "load-store": "load-store-vectorizer",
    "all": "loop-vectorize<no-interleave-forced-only;no-vectorize-forced-only>,slp-vectorizer,"
           "load-store-vectorizer",
}


class TransformSpace(Space):
    """Loop unrolling and vectorization with their parameters, appended (as one function
    pass sequence, cleaned up by instcombine and simplifycfg) to the pipeline the other
    spaces chose (``default<O3>`` alone)."""

    name = "transforms"
    extends_pipeline = True

    def parameters(self, ctx):
        return [Categorical("unroll", tuple(UNROLL)), Categorical("vectorize", tuple(VECTORIZE))]

    @staticmethod
    def passes(params: Point) -> str:
        """The function pass sequence a point stands for.

        Parameters:
            params: the point (``unroll``, ``vectorize``).

        Returns:
            ``function(...,instcombine,simplifycfg)``; empty when both are off.
        """
        steps = [p for p in (UNROLL[params["unroll"]], VECTORIZE[params["vectorize"]]) if p]
        if not steps:
            return ""
        return f"function({','.join(steps)},instcombine,simplifycfg)"

    def apply(self, params, settings, ctx):
        extra = self.passes(params)
        if not extra:
            return settings
        return settings_with(settings, compile={"pipeline": f"{settings.compile.pipeline},{extra}"})

    def baseline(self, ctx):
        return {"unroll": "none", "vectorize": "none"}


BUILTIN_SPACES: dict[str, Callable[[], Space]] = {
    "launch": LaunchSpace,
    "pipeline": PipelineSpace,
    "transforms": TransformSpace,
    "specialize": SpecializeSpace,
    "bounds": BoundsSpace,
    "codegen": CodegenSpace,
}

#: named combinations: what a user would try first, and everything
PRESETS: dict[str, str] = {
    # launch shape, O2/O3 with unrolling and vectorization, launch bounds and register
    # caps, specialization of the scalar arguments and dimensions
    "quick": "launch,quick-pipeline,transforms,bounds,specialize",
    "all": "launch,pipeline,transforms,specialize,bounds,codegen",
}

