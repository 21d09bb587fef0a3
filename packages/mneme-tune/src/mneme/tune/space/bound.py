"""Spaces bound to one instance: the recorded launch and device limits they build their
parameters from (SpaceContext), and their combination as a study samples it (BoundSpace)."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mneme.replay.engine import ReplaySettings

from ..errors import SpaceError
from .parameters import Constraint, Dim3, Parameter, Point

if TYPE_CHECKING:
    from .base import Space

#: points enumerated exhaustively when checking feasibility (else sampled)
ENUMERATE_LIMIT = 200_000
FEASIBILITY_SAMPLES = 20_000


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
    #: the recorded launch's thread-block cluster shape (None: no clusters); every grid
    #: tried must be a whole number of clusters
    cluster: Dim3 | None = None

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
            cluster=getattr(instance, "cluster", None),
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

