"""How busy the tuner's two pools were during a search, and which one bounded it.

A trial passes through the compile pool (a fresh code variant: LLVM passes, codegen,
ptxas, on the CPUs) and then a replay worker (restore, launch, timing, verification, on
the GPU). The executor adds up the seconds each spent (``BusySeconds``); over the search's
wall time and the pool's size that is each pool's use. A pool busy nearly all the time is
the limit of trials/s (issue 23 asks the benchmark to say where the compile pool is);
neither busy means the tuner's own loop (sampler, storage) is.
"""

from __future__ import annotations

from dataclasses import dataclass

#: a pool at least this busy over the search is taken as its limit
LIMIT_USE = 0.85


@dataclass
class BusySeconds:
    """Seconds the pools have been busy.

    Attributes:
        compile_seconds: in compiles, summed over the compile pool's processes.
        replay_seconds: in replays, over the replay workers, from a task's hand-out to
            its answer.
    """

    compile_seconds: float = 0.0
    replay_seconds: float = 0.0

    def copy(self) -> BusySeconds:
        return BusySeconds(self.compile_seconds, self.replay_seconds)


def pool_use(before: BusySeconds, after: BusySeconds, seconds: float,
             compile_workers: int, replay_workers: int) -> dict[str, float | str | None]:
    """Each pool's use over a search, and which bounded it.

    Parameters:
        before: the busy seconds when the search began.
        after: the busy seconds when it ended.
        seconds: the search's duration.
        compile_workers: the compile pool's processes (0: none).
        replay_workers: the replay workers.

    Returns:
        ``compile_pool`` and ``replay_workers`` (each busy share; None for a pool there
        is none of), ``compile_workers``, and ``limit``: "compile pool", "replay
        workers" or "tuner loop".
    """
    def share(spent: float, workers: int) -> float | None:
        return spent / (workers * seconds) if workers and seconds > 0 else None

    compile_use = share(after.compile_seconds - before.compile_seconds, compile_workers)
    replay_use = share(after.replay_seconds - before.replay_seconds, replay_workers)
    busiest = max(((compile_use or 0.0), "compile pool"), ((replay_use or 0.0), "replay workers"))
    return {"compile_pool": compile_use, "replay_workers": replay_use,
            "compile_workers": compile_workers, "limit": busiest[1] if busiest[0] >= LIMIT_USE else "tuner loop"}


def describe(use: dict) -> str:
    """The pools' use in one line.

    Parameters:
        use: what :func:`pool_use` returned.

    Returns:
        "compile pool 92 % busy (14 processes), replay workers 40 % busy: the compile
        pool is the limit" (without a compile pool: the workers' share alone).
    """
    def percent(value) -> str:
        return "-" if value is None else f"{100 * value:.0f} %"

    workers = f"replay workers {percent(use['replay_workers'])} busy"
    if use["compile_pool"] is None:  # (compile-only: the workers compile themselves)
        return f"{workers}: the {use['limit']} is the limit"
    return (f"compile pool {percent(use['compile_pool'])} busy ({use['compile_workers']} processes), "
            f"{workers}: the {use['limit']} is the limit")
