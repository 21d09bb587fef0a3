"""Parameters of a search space (integer ranges, categorical choices) and the constraints
a point must satisfy."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import SpaceError

Dim3 = tuple[int, int, int]
Point = dict[str, Any]

@dataclass(frozen=True)
class IntParam:
    """An integer parameter: ``low`` to ``high`` inclusive, every ``step``.

    Attributes:
        name: its name (a key of the points).
        low: the smallest value.
        high: the largest value.
        step: the distance between values.
        log: sample on a logarithmic scale (step must then be 1, as in Optuna).

    Raises:
        SpaceError: ``high`` below ``low``, a step below 1, or a log range with another
            step or a low below 1.
    """

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
        """Ask an Optuna trial for a value.

        Parameters:
            trial: the ``optuna.Trial``.

        Returns:
            The value it suggests.
        """
        return trial.suggest_int(self.name, self.low, self.high, step=self.step, log=self.log)

    @property
    def size(self) -> int:
        return (self.high - self.low) // self.step + 1

    def values(self) -> Sequence[int]:
        """Every value, in order.

        Returns:
            The range of values.
        """
        return range(self.low, self.high + 1, self.step)

    def contains(self, value: Any) -> bool:
        """Whether a value is one of the parameter's.

        Parameters:
            value: any value.

        Returns:
            True for an int in the range on a step.
        """
        return (isinstance(value, int) and not isinstance(value, bool)
                and self.low <= value <= self.high and (value - self.low) % self.step == 0)

    def sample(self, rng: random.Random) -> int:
        """A random value (log-uniform for a log range).

        Parameters:
            rng: the random generator.

        Returns:
            The value.
        """
        if self.log:
            value = int(round(math.exp(rng.uniform(math.log(self.low), math.log(self.high)))))
            return min(max(value, self.low), self.high)
        return self.low + self.step * rng.randrange(self.size)

    def describe(self) -> dict[str, Any]:
        """The parameter as plain JSON data (reports, study attributes).

        Returns:
            Its name, type and range.
        """
        return {"name": self.name, "type": "int", "low": self.low, "high": self.high,
                "step": self.step, "log": self.log}


@dataclass(frozen=True)
class Categorical:
    """A categorical parameter: one of ``choices``.

    Attributes:
        name: its name (a key of the points).
        choices: its values: JSON scalars (str, int, float, bool or None).

    Raises:
        SpaceError: no choices, or a choice that is not a JSON scalar.
    """

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
        """Ask an Optuna trial for a value.

        Parameters:
            trial: the ``optuna.Trial``.

        Returns:
            The choice it suggests.
        """
        return trial.suggest_categorical(self.name, self.choices)

    @property
    def size(self) -> int:
        return len(self.choices)

    def values(self) -> Sequence[Any]:
        """Every choice, in order.

        Returns:
            The choices.
        """
        return self.choices

    def contains(self, value: Any) -> bool:
        """Whether a value is one of the choices (of the same type: 1 is not True).

        Parameters:
            value: any value.

        Returns:
            True when it is.
        """
        return any(value == c and type(value) is type(c) for c in self.choices)

    def sample(self, rng: random.Random) -> Any:
        """A random choice.

        Parameters:
            rng: the random generator.

        Returns:
            The choice.
        """
        return rng.choice(self.choices)

    def describe(self) -> dict[str, Any]:
        """The parameter as plain JSON data (reports, study attributes).

        Returns:
            Its name, type and choices.
        """
        return {"name": self.name, "type": "categorical", "choices": list(self.choices)}


Parameter = IntParam | Categorical


@dataclass(frozen=True)
class Constraint:
    """A rule a point must satisfy; calling it with a point says whether it does.

    Attributes:
        description: shown when it rules out every point.
        test: ``point -> bool``.
    """

    description: str
    test: Callable[[Point], bool]

    def __call__(self, point: Point) -> bool:
        return bool(self.test(point))

