"""One budget for a whole application, shared out between its kernels.

``--budget`` is trials (``600``) or seconds (``90s``, ``5m``). It is spent in two rounds,
as successive halving does: the first gives each kernel a part by its share of the
application's kernel time (at least MIN_TRIALS, enough for the baseline, the launch-shape
probe and a first search, largest kernels first when the budget cannot give every kernel
that); then kernels that found nothing beyond their noise floor and stopped improving
stop, and the rest of the budget goes to those still promising, again by share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import TuneError

__all__ = ["MIN_SECONDS", "MIN_TRIALS", "Budget", "first_round", "one_round", "second_round"]

#: trials a kernel needs before its result means anything
MIN_TRIALS = 12
#: the same in seconds (a kernel's start-up, baseline and probe)
MIN_SECONDS = 3.0
#: trials per kernel when no budget is given
DEFAULT_TRIALS_PER_KERNEL = 60
#: share of the budget spent in the first round
FIRST_ROUND = 0.5


@dataclass(frozen=True)
class Budget:
    """Trials or seconds for the whole run."""

    trials: int | None = None
    seconds: float | None = None

    @classmethod
    def parse(cls, text: str | None, kernels: int) -> Budget:
        if text is None:
            return cls(trials=DEFAULT_TRIALS_PER_KERNEL * max(kernels, 1))
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?\s*", text)
        if not match:
            raise TuneError(f"--budget {text!r}: give trials (600) or seconds (90s, 5m, 1h)")
        value, unit = float(match.group(1)), match.group(2)
        if unit is None:
            if not value.is_integer() or value < 1:
                raise TuneError(f"--budget {text!r}: a number of trials is a whole number >= 1")
            return cls(trials=int(value))
        seconds = value * {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}[unit]
        if seconds <= 0:
            raise TuneError(f"--budget {text!r}: give a time above zero")
        return cls(seconds=seconds)

    @property
    def total(self) -> float:
        return float(self.trials if self.trials is not None else self.seconds)  # type: ignore[arg-type]

    @property
    def minimum(self) -> float:
        return MIN_TRIALS if self.trials is not None else MIN_SECONDS

    def describe(self, amount: float) -> str:
        return f"{int(amount)} trials" if self.trials is not None else f"{amount:.1f} s"


def _by_share(amount: float, shares: list[float], minimum: float, whole: bool) -> list[float]:
    """``amount`` split by ``shares``, each part at least ``minimum`` where the amount
    allows (largest shares first; the rest get 0)."""
    parts = [0.0] * len(shares)
    order = sorted(range(len(shares)), key=lambda i: -shares[i])
    funded = []
    left = amount
    for i in order:
        if left + 1e-9 < minimum:
            break
        funded.append(i)
        left -= minimum
    total = sum(shares[i] for i in funded) or 1.0
    for i in funded:
        parts[i] = minimum + left * shares[i] / total
    if whole:
        parts = [float(int(p)) for p in parts]
        spare = int(round(amount - sum(parts)))
        live = [i for i in funded if shares[i] > 0] or funded
        for n in range(max(spare, 0)):
            parts[live[n % len(live)]] += 1
    return parts


def first_round(budget: Budget, shares: list[float]) -> list[float]:
    """Each kernel's trials (or seconds) in the first round."""
    amount = budget.total * FIRST_ROUND
    # Every kernel its minimum where the whole budget allows it, even past the first half.
    amount = max(amount, min(budget.total, budget.minimum * len(shares)))
    # (a budget below one kernel's minimum goes whole to the largest kernel)
    return _by_share(amount, shares, min(budget.minimum, amount), budget.trials is not None)


def second_round(budget: Budget, spent: float, shares: list[float], promising: list[bool]) -> list[float]:
    """The rest of the budget for the promising kernels, by share."""
    left = max(budget.total - spent, 0.0)
    live = [s if p else 0.0 for s, p in zip(shares, promising, strict=True)]
    if not any(live) or left < 1:
        return [0.0] * len(shares)
    return _by_share(left, live, 0.0, budget.trials is not None)


def one_round(budget: Budget, shares: list[float]) -> list[float]:
    """The whole budget at once, by share: for the tasks of a job array (slurm.py), where no
    process sees every kernel's first round to pick the promising ones. A budget below one
    kernel's minimum goes to the largest."""
    return _by_share(budget.total, shares, min(budget.minimum, budget.total), budget.trials is not None)
