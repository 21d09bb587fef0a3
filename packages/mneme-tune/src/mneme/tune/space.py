"""Search spaces: parameters, constraints, and how a point becomes a replay configuration.

A space is a set of parameters (integer ranges and categorical choices), constraints
over them, and ``apply(params, settings, ctx)``: the ``ReplaySettings`` a point means.
Built-in spaces (``launch``, ``pipeline``, ``transforms``, ``specialize``, ``bounds``,
``codegen``) and presets (``quick``, ``all``) are switched on by name; users write their own as a ``Space`` subclass or as a function
decorated with :func:`space`. Spaces combine: ``combine([launch, pipeline])``.

    from mneme.tune import IntParam, space

    @space(IntParam("unroll_cap", 32, 255, step=1), name="regcap")
    def register_cap(params, settings, ctx):
        return settings_with(settings, compile={"max_registers": params["unroll_cap"]})
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from mneme.replay.engine import ReplaySettings
from mneme.replay.engine.session import MAX_GRID
from mneme.replay.jit import OPT_LEVELS

from .errors import SpaceError

Dim3 = tuple[int, int, int]
Point = dict[str, Any]

#: points enumerated exhaustively when checking feasibility (else sampled)
ENUMERATE_LIMIT = 200_000
FEASIBILITY_SAMPLES = 20_000


# -- parameters -----------------------------------------------------------------------------


@dataclass(frozen=True)
class IntParam:
    """An integer from ``low`` to ``high`` inclusive, every ``step``; ``log`` samples on a
    logarithmic scale (step must then be 1, as in Optuna)."""

    name: str
    low: int
    high: int
    step: int = 1
    log: bool = False

    def __post_init__(self) -> None:
        if self.high < self.low:
            raise SpaceError(f"parameter {self.name}: high {self.high} is below low {self.low}")
        if self.step < 1:
            raise SpaceError(f"parameter {self.name}: step must be at least 1")
        if self.log and (self.step != 1 or self.low < 1):
            raise SpaceError(f"parameter {self.name}: a log range needs step 1 and low >= 1")

    def suggest(self, trial) -> int:
        return trial.suggest_int(self.name, self.low, self.high, step=self.step, log=self.log)

    @property
    def size(self) -> int:
        return (self.high - self.low) // self.step + 1

    def values(self) -> Sequence[int]:
        return range(self.low, self.high + 1, self.step)

    def contains(self, value: Any) -> bool:
        return (isinstance(value, int) and not isinstance(value, bool)
                and self.low <= value <= self.high and (value - self.low) % self.step == 0)

    def sample(self, rng: random.Random) -> int:
        if self.log:
            value = int(round(math.exp(rng.uniform(math.log(self.low), math.log(self.high)))))
            return min(max(value, self.low), self.high)
        return self.low + self.step * rng.randrange(self.size)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "type": "int", "low": self.low, "high": self.high,
                "step": self.step, "log": self.log}


@dataclass(frozen=True)
class Categorical:
    """One of ``choices`` (JSON scalars: str, int, float, bool or None)."""

    name: str
    choices: tuple

    def __post_init__(self) -> None:
        choices = tuple(self.choices)
        if not choices:
            raise SpaceError(f"parameter {self.name} has no choices")
        for choice in choices:
            if not (choice is None or isinstance(choice, str | int | float | bool)):
                raise SpaceError(
                    f"parameter {self.name}: choice {choice!r} is not a string, number, "
                    "boolean or None"
                )
        object.__setattr__(self, "choices", choices)

    def suggest(self, trial) -> Any:
        return trial.suggest_categorical(self.name, self.choices)

    @property
    def size(self) -> int:
        return len(self.choices)

    def values(self) -> Sequence[Any]:
        return self.choices

    def contains(self, value: Any) -> bool:
        return any(value == c and type(value) is type(c) for c in self.choices)

    def sample(self, rng: random.Random) -> Any:
        return rng.choice(self.choices)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "type": "categorical", "choices": list(self.choices)}


Parameter = IntParam | Categorical


@dataclass(frozen=True)
class Constraint:
    """A rule a point must satisfy; ``description`` is shown when it rules out everything."""

    description: str
    test: Callable[[Point], bool]

    def __call__(self, point: Point) -> bool:
        return bool(self.test(point))


# -- what a space knows about the instance ---------------------------------------------------


@dataclass(frozen=True)
class SpaceContext:
    """The recorded launch and the device limits a space builds its parameters from."""

    grid: Dim3
    block: Dim3
    shared_mem: int = 0
    #: indices of the kernel's scalar (non-pointer) parameters
    scalar_params: tuple[int, ...] = ()
    max_threads_per_block: int = 1024
    warp_size: int = 32
    multiprocessor_count: int = 132
    max_registers_per_thread: int = 255
    #: dynamic shared memory a block may use (the opt-in limit; 48 KiB without a device)
    max_shared_memory_per_block: int = 48 * 1024

    @classmethod
    def from_instance(cls, instance, properties=None) -> SpaceContext:
        kernel = instance.kernel
        limits = {}
        if properties is not None:
            limits = {
                "max_threads_per_block": int(properties.max_threads_per_block),
                "warp_size": int(properties.warp_size),
                "multiprocessor_count": int(properties.multiprocessor_count),
            }
            optin = int(getattr(properties, "max_shared_memory_per_block_optin", 0) or 0)
            if optin or getattr(properties, "max_shared_memory_per_block", 0):
                limits["max_shared_memory_per_block"] = optin or int(
                    properties.max_shared_memory_per_block)
        return cls(
            grid=tuple(int(v) for v in instance.grid),
            block=tuple(int(v) for v in instance.block),
            shared_mem=int(instance.shared_mem),
            scalar_params=tuple(i for i, p in enumerate(kernel.params) if not p.is_pointer),
            **limits,
        )

    @property
    def shared_per_thread(self) -> int | None:
        """Bytes of dynamic shared memory per thread when the recorded amount is a whole
        multiple of the block size (``extern __shared__ T s[]`` sized by blockDim): a
        launch with another block size gets that many bytes per thread, not the recorded
        total (which would overrun or starve the kernel's indexing)."""
        threads = math.prod(self.block)
        if self.shared_mem > 0 and threads > 1 and self.shared_mem % threads == 0:
            return self.shared_mem // threads
        return None

    @property
    def dimensions(self) -> int:
        """How many axes the recorded launch uses (1, 2 or 3)."""
        used = [g > 1 or b > 1 for g, b in zip(self.grid, self.block, strict=True)]
        return 3 if used[2] else 2 if used[1] else 1


def settings_with(settings: ReplaySettings, compile: dict | None = None,
                  replay: dict | None = None) -> ReplaySettings:
    """A copy of ``settings`` with fields of its compile and replay parts changed."""
    return ReplaySettings(
        dataclasses.replace(settings.compile, **(compile or {})),
        dataclasses.replace(settings.replay, **(replay or {})),
    )


# -- spaces -----------------------------------------------------------------------------------


class Space:
    """Base class of a search space. Subclasses set ``name`` and override
    ``parameters``, ``apply`` and (optionally) ``constraints``."""

    name: str = "space"

    def parameters(self, ctx: SpaceContext) -> list[Parameter]:
        raise NotImplementedError

    def constraints(self, ctx: SpaceContext) -> list[Constraint]:
        return []

    def apply(self, params: Point, settings: ReplaySettings, ctx: SpaceContext) -> ReplaySettings:
        raise NotImplementedError

    def baseline(self, ctx: SpaceContext) -> Point | None:
        """The point that means the recorded configuration, when the space holds it."""
        return None

    def __repr__(self) -> str:
        return f"<space {self.name}>"


class FunctionSpace(Space):
    """A space made by :func:`space` from parameters and a function."""

    def __init__(self, function, params: Sequence[Parameter], constraints=(), name=None,
                 baseline: Point | None = None):
        self.function = function
        self.params = list(params)
        self._constraints = list(constraints)
        self.name = name or function.__name__
        self._baseline = baseline

    def parameters(self, ctx):
        return list(self.params)

    def constraints(self, ctx):
        return list(self._constraints)

    def apply(self, params, settings, ctx):
        out = self.function(params, settings, ctx)
        if not isinstance(out, ReplaySettings):
            raise SpaceError(
                f"space {self.name} returned {type(out).__name__}, not a ReplaySettings"
            )
        return out

    def baseline(self, ctx):
        return self._baseline


def space(*params: Parameter, constraints: Iterable[Constraint] = (), name: str | None = None,
          baseline: Point | None = None):
    """Decorator: ``f(params, settings, ctx) -> ReplaySettings`` becomes a Space."""

    def wrap(function) -> FunctionSpace:
        return FunctionSpace(function, params, constraints, name, baseline)

    return wrap


def _powers_of_two(limit: int) -> tuple[int, ...]:
    return tuple(2**i for i in range(int(math.log2(limit)) + 1))


class LaunchSpace(Space):
    """Block dimensions (warp multiples within the device limit) and the grid.

    ``grid``: ``cover`` derives the grid so the recorded total threads stay covered
    (per axis: ceil(recorded grid × recorded block / block)); ``keep`` keeps the
    recorded grid; ``free`` tunes the x grid too (log scale, 1 to 4× the covering grid).
    A 1-D launch tunes block x in warp steps; 2-D and 3-D ones tune powers of two per axis.
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
        out.append(Constraint("the grid fits CUDA's limits",
                              lambda p: all(g <= m for g, m in
                                            zip(self.grid_of(p, ctx), MAX_GRID, strict=True))))
        if ctx.shared_per_thread:
            # (the limit is not in the text: a study keeps its identity across devices)
            out.append(Constraint(
                "dynamic shared memory scaled with the block fits the device's limit",
                lambda p: self.shared_of(p, ctx) <= ctx.max_shared_memory_per_block))
        return out

    def shared_of(self, p: Point, ctx: SpaceContext) -> int:
        """The dynamic shared memory of a point: scaled with the block when the recording
        used a fixed number of bytes per thread, else the recorded amount."""
        per_thread = ctx.shared_per_thread
        return per_thread * self._threads(p) if per_thread else ctx.shared_mem

    @staticmethod
    def _block(p: Point) -> Dim3:
        return (int(p["block_x"]), int(p.get("block_y", 1)), int(p.get("block_z", 1)))

    def _threads(self, p: Point) -> int:
        return math.prod(self._block(p))

    @staticmethod
    def _covering(ctx: SpaceContext, block: Dim3) -> Dim3:
        return tuple(  # type: ignore[return-value]
            max(1, math.ceil(g * b / nb)) for g, b, nb in zip(ctx.grid, ctx.block, block, strict=True)
        )

    def grid_of(self, p: Point, ctx: SpaceContext) -> Dim3:
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
    """The LLVM pipeline: an optimization level, then one of a few extra pass sequences."""

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


# -- a combination of spaces, bound to one instance ------------------------------------------


@dataclass
class BoundSpace:
    """Spaces combined and bound to one instance's context: what a study samples."""

    spaces: list[Space]
    ctx: SpaceContext
    params: list[Parameter] = field(init=False)
    constraints: list[Constraint] = field(init=False)

    def __post_init__(self) -> None:
        if not self.spaces:
            raise SpaceError("the search space is empty: name at least one space with --space")
        self.params, self.constraints = [], []
        owner: dict[str, str] = {}
        for s in self.spaces:
            for p in _user_call(s, "parameters", self.ctx):
                if p.name in owner:
                    raise SpaceError(
                        f"parameter {p.name} is defined by both space {owner[p.name]} and {s.name}"
                    )
                owner[p.name] = s.name
                self.params.append(p)
            self.constraints += _user_call(s, "constraints", self.ctx)
        if not self.params:
            raise SpaceError(
                f"the search space {self.names} has no parameters: nothing to tune"
            )

    @property
    def names(self) -> str:
        return "+".join(s.name for s in self.spaces)

    @property
    def size(self) -> int:
        return math.prod(p.size for p in self.params)

    def describe(self) -> list[dict[str, Any]]:
        return [p.describe() for p in self.params]

    def signature(self) -> str:
        """A short hash of the parameter definitions: a study must keep its space."""
        text = json.dumps({"parameters": self.describe(), "spaces": self.names,
                           "constraints": [c.description for c in self.constraints]},
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def suggest(self, trial) -> Point:
        return {p.name: p.suggest(trial) for p in self.params}

    def violated(self, point: Point) -> str | None:
        """The description of the first constraint ``point`` breaks, else None."""
        for c in self.constraints:
            if not c(point):
                return c.description
        return None

    def apply(self, point: Point, settings: ReplaySettings) -> ReplaySettings:
        # Spaces that extend the pipeline the others chose (transforms) apply last.
        ordered = sorted(self.spaces, key=lambda s: bool(getattr(s, "extends_pipeline", False)))
        for s in ordered:
            own = {p.name: point[p.name] for p in s.parameters(self.ctx)}
            settings = s.apply(own, settings, self.ctx)
        return settings

    def baseline(self) -> Point | None:
        point: Point = {}
        for s in self.spaces:
            part = s.baseline(self.ctx)
            if part is None:
                return None
            point.update(part)
        # A recorded launch outside the space (a 24x8 block among powers of two) is not
        # a point of it: the baseline is then measured but not a trial.
        if any(not p.contains(point.get(p.name)) for p in self.params):
            return None
        return point if self.violated(point) is None else None

    def grid(self) -> Iterator[Point]:
        """Every point, feasible or not (for exhaustive search over small spaces)."""
        names = [p.name for p in self.params]
        for values in itertools.product(*(p.values() for p in self.params)):
            yield dict(zip(names, values, strict=True))

    def feasible_points(self) -> list[Point]:
        """Every point that satisfies the constraints (exhaustive: small spaces only)."""
        if self.size > ENUMERATE_LIMIT:
            raise SpaceError(
                f"space {self.names} has {self.size} points, too many to walk exhaustively "
                f"(limit {ENUMERATE_LIMIT}); use another sampler"
            )
        return [point for point in self.grid() if self.violated(point) is None]

    def feasible_count(self) -> int:
        return len(self.feasible_points())

    def check_feasible(self, seed: int = 0) -> None:
        """Raise SpaceError when the constraints rule out every point (exhaustively for
        small spaces, by sampling for large ones)."""
        if not self.constraints:
            return
        if self.size <= ENUMERATE_LIMIT:
            points: Iterable[Point] = self.grid()
        else:
            rng = random.Random(seed)
            points = ({p.name: p.sample(rng) for p in self.params} for _ in range(FEASIBILITY_SAMPLES))
        broken: dict[str, int] = {}
        for point in points:
            reason = self.violated(point)
            if reason is None:
                return
            broken[reason] = broken.get(reason, 0) + 1
        worst = max(broken, key=broken.get)
        raise SpaceError(
            f"the constraints of space {self.names} rule out every point "
            f"(most often: {worst}); widen the parameters or drop a constraint"
        )


def _user_call(space_: Space, method: str, *args):
    """Call a space's method; a user space's bug becomes one line naming the space."""
    try:
        return getattr(space_, method)(*args)
    except SpaceError:
        raise
    except Exception as error:  # noqa: BLE001 - user code
        raise SpaceError(
            f"space {space_.name}: {method}() raised {type(error).__name__}: {error}"
        ) from None


def resolve_space(spec: str | Space, grid_mode: str = "cover") -> Space:
    """A built-in space by name, or a user space as ``module:attr`` or ``file.py:attr``
    (a Space instance, a Space subclass, or a function made a space by @space)."""
    if isinstance(spec, Space):
        return spec
    name = spec.strip()
    if name == "quick-pipeline":  # the quick preset's pipeline: O2 or O3, no extra sequence
        return PipelineSpace(levels=("O2", "O3"), sequences=("",))
    if name in BUILTIN_SPACES:
        return LaunchSpace(grid_mode) if name == "launch" else BUILTIN_SPACES[name]()
    if ":" not in name:
        raise SpaceError(
            f"unknown space {name!r}; built-in spaces: {', '.join(BUILTIN_SPACES)}; presets: "
            f"{', '.join(PRESETS)} (or a user space as module:name or file.py:name)"
        )
    from .user_code import load_attribute

    target = load_attribute(name)
    if isinstance(target, Space):
        return target
    if isinstance(target, type) and issubclass(target, Space):
        return target()
    raise SpaceError(
        f"{name} is a {type(target).__name__}, not a Space: subclass mneme.tune.Space or "
        "decorate a function with @mneme.tune.space"
    )


def resolve_spaces(specs: str | Sequence[str | Space], grid_mode: str = "cover") -> list[Space]:
    """``"launch,pipeline"`` or a list of names/spaces → spaces (each name once)."""
    if isinstance(specs, str):
        specs = [s for s in specs.split(",") if s.strip()]
    expanded: list[str | Space] = []
    for spec in specs:
        if isinstance(spec, str) and spec.strip() in PRESETS:
            expanded += PRESETS[spec.strip()].split(",")
        else:
            expanded.append(spec)
    spaces = [resolve_space(s, grid_mode) for s in expanded]
    names = [s.name for s in spaces]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SpaceError(f"space {', '.join(repeated)} is named more than once")
    return spaces
