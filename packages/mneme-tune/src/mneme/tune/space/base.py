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
    """A copy of settings with fields of its compile and replay parts changed (what a
    space's ``apply`` builds its result with).

    Parameters:
        settings: the settings.
        compile: CompileConfig field -> new value.
        replay: ReplayConfig field -> new value.

    Returns:
        The new settings.
    """
    return ReplaySettings(
        dataclasses.replace(settings.compile, **(compile or {})),
        dataclasses.replace(settings.replay, **(replay or {})),
    )


class Space:
    """Base class of a search space. Subclasses set ``name`` and override
    ``parameters``, ``apply`` and (optionally) ``constraints`` and ``baseline``."""

    name: str = "space"

    def parameters(self, ctx: SpaceContext) -> list[Parameter]:
        """The space's parameters for one instance.

        Parameters:
            ctx: the recorded launch and the device's limits.

        Returns:
            The parameters (their names are unique across the spaces of a study).

        Raises:
            NotImplementedError: a subclass that does not override it.
        """
        raise NotImplementedError

    def constraints(self, ctx: SpaceContext) -> list[Constraint]:
        """The rules a point must satisfy (checked before a trial runs).

        Parameters:
            ctx: the recorded launch and the device's limits.

        Returns:
            The constraints; none by default.
        """
        return []

    def apply(self, params: Point, settings: ReplaySettings, ctx: SpaceContext) -> ReplaySettings:
        """The configuration a point stands for.

        Parameters:
            params: the point: parameter name -> value (the study's other spaces' too).
            settings: the settings so far (the spaces before this one applied).
            ctx: the recorded launch and the device's limits.

        Returns:
            The settings with this space's part set (``settings_with`` makes them).

        Raises:
            NotImplementedError: a subclass that does not override it.
        """
        raise NotImplementedError

    def baseline(self, ctx: SpaceContext) -> Point | None:
        """The point that means the recorded configuration, when the space holds it.

        Parameters:
            ctx: the recorded launch and the device's limits.

        Returns:
            The point, or None (the default) when the space does not hold it.
        """
        return None

    def __repr__(self) -> str:
        return f"<space {self.name}>"


class FunctionSpace(Space):
    """A space made by :func:`space` from parameters and a function.

    Parameters:
        function: ``f(params, settings, ctx) -> ReplaySettings``, its ``apply``.
        params: its parameters.
        constraints: its constraints.
        name: its name; None for the function's.
        baseline: the point that means the recorded configuration; None for none.
    """

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
    """Decorator: a function ``f(params, settings, ctx) -> ReplaySettings`` becomes a
    Space.

    Parameters:
        *params: the space's parameters.
        constraints: its constraints.
        name: its name; None for the function's.
        baseline: the point that means the recorded configuration; None for none.

    Returns:
        The decorator (it returns a FunctionSpace).
    """

    def wrap(function) -> FunctionSpace:
        return FunctionSpace(function, params, constraints, name, baseline)

    return wrap

