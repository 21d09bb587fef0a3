"""What a trial minimizes: execution time on the GPU, or static metrics of the code."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from mneme.replay.engine import ReplayResult

from .errors import TuneError


def _time(results: Sequence[ReplayResult]) -> float:
    # Median of the timed iterations: robust to one slow iteration; summed over the
    # instances of a per-kernel study.
    return sum(statistics.median(r.exec_time) for r in results)


#: name → (unit, value of the results of one trial, needs a GPU); every objective minimizes
OBJECTIVES: dict[str, tuple[str, Callable[[Sequence[ReplayResult]], float], bool]] = {
    "time": ("ms", _time, True),
    "regs": ("registers", lambda rs: max(r.reg_usage for r in rs), False),
    "spills": ("bytes", lambda rs: sum(r.spills for r in rs), False),
    "size": ("bytes", lambda rs: sum(r.obj_size for r in rs), False),
}


def parse_objectives(text: str | Sequence[str] | None, gpu: bool) -> list[str]:
    """``"time,regs"`` → ["time", "regs"]; the default is time with a GPU, regs without."""
    if text is None or text == "":
        return ["time"] if gpu else ["regs"]
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    if not names:
        raise TuneError("--objective names no objective; use time, regs, spills or size")
    for name in names:
        if name not in OBJECTIVES:
            raise TuneError(
                f"unknown objective {name!r}; use one or more of {', '.join(OBJECTIVES)}"
            )
        if OBJECTIVES[name][2] and not gpu:
            raise TuneError(
                f"objective {name} needs a GPU; compile-only tuning can use regs, spills or size"
            )
    if len(set(names)) != len(names):
        raise TuneError("--objective names an objective twice")
    return names


def evaluate(names: Sequence[str], results: Sequence[ReplayResult]) -> list[float]:
    return [float(OBJECTIVES[n][1](results)) for n in names]


def unit(name: str) -> str:
    return OBJECTIVES[name][0]
