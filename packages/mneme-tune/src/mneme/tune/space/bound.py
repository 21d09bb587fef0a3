"""Spaces bound to one instance: their combination as a study samples it (BoundSpace),
built from the instance's SpaceContext (context.py)."""

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
from .context import SpaceContext
from .parameters import Constraint, Parameter, Point

if TYPE_CHECKING:
    from .base import Space

#: points enumerated exhaustively when checking feasibility (else sampled)
ENUMERATE_LIMIT = 200_000
FEASIBILITY_SAMPLES = 20_000


@dataclass
class BoundSpace:
    """Spaces combined and bound to one instance's context: what a study samples.

    Parameters:
        spaces: the spaces.
        ctx: the instance's context.

    Raises:
        SpaceError: no spaces, no parameters, a parameter defined by two spaces, or a
            user space that fails.
    """

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
        """The parameters as plain JSON data.

        Returns:
            Each parameter's description.
        """
        return [p.describe() for p in self.params]

    def signature(self) -> str:
        """A short hash of the parameter definitions: a study must keep its space.

        Returns:
            16 hex digits.
        """
        text = json.dumps({"parameters": self.describe(), "spaces": self.names,
                           "constraints": [c.description for c in self.constraints]},
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def suggest(self, trial) -> Point:
        """Ask an Optuna trial for a point.

        Parameters:
            trial: the ``optuna.Trial``.

        Returns:
            The point.
        """
        return {p.name: p.suggest(trial) for p in self.params}

    def violated(self, point: Point) -> str | None:
        """The first constraint a point breaks.

        Parameters:
            point: the point.

        Returns:
            Its description, or None when the point satisfies every constraint.
        """
        for c in self.constraints:
            if not c(point):
                return c.description
        return None

    def apply(self, point: Point, settings: ReplaySettings) -> ReplaySettings:
        """The configuration a point stands for: each space applies its part (those that
        extend the pipeline the others chose, transforms, last).

        Parameters:
            point: the point.
            settings: the settings to start from (the recorded configuration's).

        Returns:
            The settings.
        """
        ordered = sorted(self.spaces, key=lambda s: bool(getattr(s, "extends_pipeline", False)))
        for s in ordered:
            own = {p.name: point[p.name] for p in s.parameters(self.ctx)}
            settings = s.apply(own, settings, self.ctx)
        return settings

    def baseline(self) -> Point | None:
        """The point that means the recorded configuration.

        Returns:
            The point; None when a space does not hold it, or it is not a feasible point
            of the space (a 24x8 block among powers of two: measured, not a trial).
        """
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
        """Every point, feasible or not (for exhaustive search over small spaces).

        Yields:
            The points.
        """
        names = [p.name for p in self.params]
        for values in itertools.product(*(p.values() for p in self.params)):
            yield dict(zip(names, values, strict=True))

    def feasible_points(self) -> list[Point]:
        """Every point that satisfies the constraints (exhaustive: small spaces only).

        Returns:
            The points.

        Raises:
            SpaceError: the space has more than ``ENUMERATE_LIMIT`` points.
        """
        if self.size > ENUMERATE_LIMIT:
            raise SpaceError(
                f"space {self.names} has {self.size} points, too many to walk exhaustively "
                f"(limit {ENUMERATE_LIMIT}); use another sampler"
            )
        return [point for point in self.grid() if self.violated(point) is None]

    def feasible_count(self) -> int:
        """How many points satisfy the constraints.

        Returns:
            Their number (see :meth:`feasible_points`).
        """
        return len(self.feasible_points())

    def check_feasible(self, seed: int = 0) -> None:
        """Check that the constraints leave a point (exhaustively for small spaces, by
        sampling for large ones).

        Parameters:
            seed: the sampling's seed.

        Raises:
            SpaceError: they rule out every point (naming the one that does most often).
        """
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
        worst = max(broken, key=broken.get)  # type: ignore[arg-type]
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

