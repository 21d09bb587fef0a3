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

