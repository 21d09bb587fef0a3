"""The metrics of a trial and the objectives among them: one name, unit and meaning each,
the same as the ReplayResult fields they come from (docs/replay.md, "Metrics")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import TuneError

if TYPE_CHECKING:  # (the command reads OBJECTIVES before it imports the engine)
    from mneme.replay.engine import ReplayResult


@dataclass(frozen=True)
class Metric:
    """A metric of the results of one trial (one result per instance tuned).

    Attributes:
        name: its name (``time``, ``registers``, ...).
        unit: its unit (``ms``, ``bytes``, ...).
        value: its value from a trial's results; None where they do not give it.
        gpu: measured only on a GPU (compile-only results have no value).
        objective: may be minimized (--objective).
    """

    name: str
    unit: str
    value: Callable[[Sequence[ReplayResult]], float | None]
    gpu: bool = False
    objective: bool = True


#: every metric a trial records (trial attribute ``metrics``, summary.json, trials.csv)
METRICS: dict[str, Metric] = {m.name: m for m in (
    # The median of the timed iterations: robust to one slow iteration; summed over the
    # instances of a per-kernel study.
    Metric("time", "ms", lambda rs: sum(r.time for r in rs), gpu=True),  # type: ignore[misc]
    Metric("registers", "registers", lambda rs: max(r.registers for r in rs)),
    Metric("spills", "bytes", lambda rs: sum(r.spills for r in rs)),
    Metric("binary_size", "bytes", lambda rs: sum(r.binary_size for r in rs)),
    Metric("compile_time", "s", lambda rs: sum(r.compile_time for r in rs), objective=False),
    # the GPU's power over a window of back-to-back launches (NVML's energy counter) times
    # the kernel's time (ReplayConfig's energy_window_ms, which the tuner sets when energy
    # is an objective); None without it
    Metric("energy", "mJ", lambda rs: None if any(r.energy_mj is None for r in rs)
           else sum(r.energy_mj for r in rs), gpu=True),  # type: ignore[misc]
)}

#: milliseconds of back-to-back launches a trial's energy is measured over
ENERGY_WINDOW_MS = 300.0

#: name → Metric of what a trial can minimize
OBJECTIVES: dict[str, Metric] = {n: m for n, m in METRICS.items() if m.objective}

#: spellings --objective also takes (earlier versions' names)
ALIASES = {"regs": "registers", "size": "binary_size"}


def parse_objectives(text: str | Sequence[str] | None, gpu: bool) -> list[str]:
    """The objectives asked for.

    Parameters:
        text: ``"time,registers"``, a list of names, or None for the default (time with
            a GPU, registers without).
        gpu: whether the study replays on a GPU.

    Returns:
        The objective names (aliases resolved).

    Raises:
        TuneError: no objective, an unknown one, or a GPU objective without a GPU.
    """
    if text is None or text == "":
        return ["time"] if gpu else ["registers"]
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    if not names:
        raise TuneError(f"--objective names no objective; use {', '.join(OBJECTIVES)}")
    names = [ALIASES.get(n, n) for n in names]
    static = ", ".join(n for n, m in OBJECTIVES.items() if not m.gpu)
    for name in names:
        if name not in OBJECTIVES:
            raise TuneError(
                f"unknown objective {name!r}; use one or more of {', '.join(OBJECTIVES)}"
            )
        if OBJECTIVES[name].gpu and not gpu:
            raise TuneError(f"objective {name} needs a GPU; compile-only tuning can use {static}")
    if len(set(names)) != len(names):
        raise TuneError("--objective names an objective twice")
    return names


def evaluate(names: Sequence[str], results: Sequence[ReplayResult]) -> list[float]:
    """A trial's objective values.

    Parameters:
        names: the objectives.
        results: its replay results (one per instance tuned).

    Returns:
        One value per objective.

    Raises:
        TuneError: energy asked for where NVML gave no reading.
    """
    values = [OBJECTIVES[n].value(results) for n in names]
    if "energy" in names and values[list(names).index("energy")] is None:
        raise TuneError("objective energy: NVML gave no energy reading for this GPU (no energy "
                        "counter, or NVML unavailable); use --objective time")
    return [float(v) for v in values]  # type: ignore[arg-type]


def metrics(results: Sequence[ReplayResult]) -> dict[str, Any]:
    """Every metric of a trial's results.

    Parameters:
        results: its replay results.

    Returns:
        Metric name -> value (a GPU's metrics only when it ran on one).
    """
    timed = all(r.times for r in results)
    return {n: m.value(results) for n, m in METRICS.items() if timed or not m.gpu}


def unit(name: str) -> str:
    """A metric's unit.

    Parameters:
        name: the metric.

    Returns:
        Its unit (``ms``, ``registers``, ``bytes``, ...).
    """
    return METRICS[name].unit
