"""The base of every search space, the @space decorator that makes one of a function, and
settings_with, which a space's apply() builds its ReplaySettings with."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from mneme.replay.engine import ReplaySettings

from ..errors import SpaceError
from .parameters import Constraint, Parameter, Point

if TYPE_CHECKING:
    from .context import SpaceContext


def settings_with(settings: ReplaySettings, compile: dict | None = None,
                  replay: dict | None = None) -> ReplaySettings:
    """A copy of ``settings`` with fields of its compile and replay parts changed."""
    return ReplaySettings(
        dataclasses.replace(settings.compile, **(compile or {})),
        dataclasses.replace(settings.replay, **(replay or {})),
    )


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

