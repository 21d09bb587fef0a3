"""Where a tuning run's time goes: named phases, timed at their boundaries.

The tuner marks the end of each step of a run (the study opened, the workers ready, the
baseline measured, the search, the confirmation, the teardown); ``mneme tune`` adds the
time before the tuner was built (the interpreter, imports, the database opened) and the
report's, and prints them in one line::

    time: start 0.9 s, study 0.04 s, workers 0.1 s, baseline 0.3 s (compile 0.2 s),
    search 2.6 s, teardown 0.1 s, report 0.05 s (4.2 s in all)

A phase named ``PART.sub`` (``baseline.compile``) is a part of phase ``PART`` measured
inside it (the baseline replay's own timings) or beside it (``study.in background``: a
fresh study opened on its own thread): shown in brackets, not added to the total.
"""

from __future__ import annotations

import time

__all__ = ["SHOWN_FROM", "PhaseClock", "phase_line", "total_seconds"]

#: phases shorter than this (seconds) are left out of the line: they would only crowd it
SHOWN_FROM = 0.005


class PhaseClock:
    """Seconds per phase, accumulated: ``begin()`` where a run of phases starts, ``mark(name)``
    at the end of each (the time since the previous boundary is ``name``'s)."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.monotonic()

    def begin(self, at: float | None = None) -> None:
        """The time from now (or ``at``, a time.monotonic) to the next mark is the next phase's."""
        self._last = time.monotonic() if at is None else at

    def mark(self, name: str) -> float:
        """End phase ``name`` now; returns its seconds this time."""
        now = time.monotonic()
        seconds = now - self._last
        self.add(name, seconds)
        self._last = now
        return seconds

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + max(0.0, seconds)


def total_seconds(phases: dict[str, float]) -> float:
    """The run's seconds.

    Parameters:
        phases: phase -> seconds (``phase.part`` entries are inside their phase).

    Returns:
        The phases' sum.
    """
    return sum(v for k, v in phases.items() if "." not in k)


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 0.1 else f"{value:.1f} s"


def phase_line(phases: dict[str, float]) -> str:
    """Where a run's time went, for the console.

    Parameters:
        phases: phase -> seconds, in the order they ran.

    Returns:
        ``time: start 0.9 s, study 0.04 s, ... (4.2 s in all)`` (phases under
        SHOWN_FROM seconds left out of the line, not of the total, unless a part of
        theirs is shown).
    """
    parts = []
    for name, seconds in phases.items():
        if "." in name:
            continue
        inner = [f"{k.partition('.')[2]} {_seconds(v)}" for k, v in phases.items()
                 if k.startswith(name + ".") and v >= SHOWN_FROM]
        if seconds < SHOWN_FROM and not inner:
            continue
        parts.append(f"{name} {_seconds(seconds)}" + (f" ({', '.join(inner)})" if inner else ""))
    return f"time: {', '.join(parts)} ({_seconds(total_seconds(phases))} in all)"
