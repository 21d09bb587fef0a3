"""The command server's warm GPU workers: one set kept ready for the slots it was started
with, handed to the command that asks for exactly those slots, made again once that
command has ended (never while a command measures), given up after failing twice in a
row (mneme.tune.workers.WarmWorkers does the workers' side)."""

from __future__ import annotations

import selectors
import time
from typing import Any

from mneme.tune.workers import WarmWorkers

__all__ = ["WarmKeeper"]

#: a set that ends within this many seconds of its start counts as a failed start
QUICK_END_S = 30.0
#: failed starts in a row after which the server keeps no warm workers
MAX_FAILURES = 2


class WarmKeeper:
    """Keeps a set of warm workers for ``slots`` (None: keeps none).

    Parameters:
        slots: the GPU of each worker, as a tuning command's executor numbers them.
        selector: the server's, where each worker's end is watched.
        log: where a line about them goes (the server's log).
    """

    def __init__(self, slots: list[int] | None, selector: selectors.BaseSelector, log):
        self.slots = slots
        self.selector = selector
        self.log = log
        self.warm: WarmWorkers | None = None
        self.handed = 0
        self.failures = 0
        self.off: str | None = None if slots else "none asked for"
        self._reaping: dict[int, Any] = {}  # sentinel -> process handed to a command

    def status(self) -> dict:
        return {"slots": self.slots, "ready": bool(self.warm and self.warm.ready()),
                "handed": self.handed, "off": self.off}

    def make(self) -> None:
        """Start a set where none is kept and none is off."""
        if self.warm is not None or self.off is not None or not self.slots:
            return
        try:
            self.warm = WarmWorkers.start(self.slots)
        except Exception as error:  # noqa: BLE001 - said in the log; commands start their own
            self.off = f"could not start: {type(error).__name__}: {error}"
            self.log(f"warm workers: {self.off}")
            return
        for fd in self.warm.sentinels():
            self.selector.register(fd, selectors.EVENT_READ, self._ended)

    def take(self, slots: list[int] | None) -> WarmWorkers | None:
        """The set, for a command whose slots are exactly its own (None otherwise); the
        server's watch of it ends here."""
        warm = self.warm
        if warm is None:
            return None
        if slots != warm.slots:
            if slots is not None:  # (a GPU command that starts its own: said in the log)
                self.log(f"warm workers for GPU(s) {warm.slots} kept: a command asked for {slots}")
            return None
        for fd in warm.sentinels():
            self.selector.unregister(fd)
        self.warm = None
        return warm

    def handed_over(self, warm: WarmWorkers) -> list:
        """After the fork: the server's ends of their pipes closed; their processes, for
        ``reap_later`` once the command has ended."""
        self.handed += 1
        self.failures = 0
        return warm.handed_over()

    def reap_later(self, processes: list) -> None:
        """Reap a finished command's workers as they end (never before its end: until
        then, the command may still signal them by their pids)."""
        for process in processes:
            if process.is_alive():
                self._reaping[process.sentinel] = process
                self.selector.register(process.sentinel, selectors.EVENT_READ, self._reaped)

    def _reaped(self, fd: int) -> None:
        self.selector.unregister(fd)
        self._reaping.pop(fd).join(0)

    def _ended(self, fd: int) -> None:
        """A worker of the kept set ended: the set is dropped and made again, unless that
        keeps failing."""
        warm = self.warm
        if warm is None:
            return
        for sentinel in warm.sentinels():
            self.selector.unregister(sentinel)
        reason = warm.failure() or "a warm worker ended"
        quick = time.monotonic() - warm.started < QUICK_END_S
        warm.stop()
        self.warm = None
        self.failures = self.failures + 1 if quick else 1
        if self.failures >= MAX_FAILURES:
            self.off = f"given up after {self.failures} failed starts: {reason}"
        self.log(f"warm workers: {reason}" + (f"; {self.off}" if self.off else "; starting again"))
        self.make()

    def close(self) -> None:
        if self.warm is not None:
            for fd in self.warm.sentinels():
                self.selector.unregister(fd)
            self.warm.stop()
            self.warm = None
