"""The order in which the trial loop (trial_loop.py) tells finished trials to the study.

A model-based sampler proposes from what the study holds when it is asked: TPE with
``constant_liar`` from the trials told and those still running, CMA-ES from the
generations told. Told as their replays finish, which trials those are at each ask
depends on the workers' timing, and two runs with one ``--seed`` search different points
(on an H200, one kernel's best was 1.76x in one run and 1.21x in the other). So a run with
a seed keeps a *repeatable* order: trials are told in the order they were asked (a
finished trial waits, counted in flight, for those asked before it), one at a time, and
the loop asks up to its limit after each. When a trial is asked, the trials told and
those running are then the same in every run that measures the same values. The replays
keep running on the workers meanwhile; only the telling, and so the next ask, waits for
the oldest trial. Without a seed, trials are told as they finish: no worker's result waits.
"""

from __future__ import annotations

import concurrent.futures
from concurrent.futures import Future

__all__ = ["TrialOrder"]


class TrialOrder:
    """The replays (futures) of the loop's trials in flight, and which trials it tells next.

    Parameters:
        repeatable: tell the trials in the order they were asked, the oldest one at a time
            (a seeded run); else as they finish.
    """

    def __init__(self, repeatable: bool):
        self.repeatable = repeatable
        self._futures: dict[int, list[Future]] = {}  # trial number -> its replays
        self._waiting: set[Future] = set()  # replays not seen finished (told as they finish)

    def submitted(self, number: int, futures: list[Future]) -> None:
        """Trial ``number``'s replays were submitted (again, for a screened trial measured in
        full: it keeps its place)."""
        self._futures[number] = futures
        if not self.repeatable:
            self._waiting.update(futures)

    def wait(self, timeout: float) -> None:
        """Wait until a trial may be told, ``timeout`` seconds at most: any replay to finish;
        in repeatable order every replay of the oldest trial."""
        if self.repeatable:
            if self._futures:
                concurrent.futures.wait(self._futures[min(self._futures)], timeout=timeout)
            return
        done, _ = concurrent.futures.wait(self._waiting, timeout=timeout,
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        self._waiting -= done

    def finished(self) -> list[int]:
        """The trials to tell now, oldest first (each then ``take`` n): those whose replays
        have all finished; in repeatable order the oldest trial alone, once finished (the
        loop asks again before it tells the next)."""
        numbers = [min(self._futures)] if self.repeatable and self._futures else list(self._futures)
        return [n for n in numbers if all(f.done() for f in self._futures[n])]

    def take(self, number: int) -> list[Future]:
        """Trial ``number``'s replays, finished, out of the order."""
        futures = self._futures.pop(number)
        self._waiting.difference_update(futures)
        return futures
