"""Retiring worker processes without waiting for them to exit.

A process whose CUDA context faulted takes hundreds of milliseconds to exit (the driver
tears the context and its memory down): the executor's dispatcher, which sends every
worker its next task, joined each failed process and held every slot for that long. Now a
retired process is handed to a ``ProcessReaper``: the dispatcher waits on its sentinel
with its workers' pipes and collects it once it has exited, never blocking; ``join_all``
(shutdown, a failed start) waits for what is left.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["GRACE_SECONDS", "REAP_POLL_SECONDS", "ProcessReaper", "describe_exit"]

#: seconds a worker that closed its pipe (it died, or is ending itself) is left to exit
#: before it is killed; its task's failure names the exit status once it is known
GRACE_SECONDS = 5.0
#: seconds between polls of a retired process whose sentinel woke the loop before it
#: could be reaped
REAP_POLL_SECONDS = 0.02


def describe_exit(process) -> str:
    """How a worker process ended, for its task's failure.

    Parameters:
        process: the process.

    Returns:
        One line: the signal or status it ended with, or (still running) that it
        stopped answering.
    """
    code = process.exitcode
    if code is None:
        return "the worker stopped answering"
    if code < 0:
        try:
            return f"the worker died from {signal.Signals(-code).name}"
        except ValueError:
            return f"the worker died from signal {-code}"
    return f"the worker exited with status {code}"


@dataclass
class _Dying:
    """A retired process, not yet exited."""

    process: Any
    since: float
    #: called once with the process and the seconds since its retirement, when it has
    #: exited or when GRACE_SECONDS ran out and it was killed (a crashed task described
    #: by its exit)
    on_exit: Callable[[Any, float], None] | None = None
    killed: bool = False
    #: its sentinel woke the loop before the process could be reaped (spawn: the pipe closes
    #: before the exit ends): polled on a short timeout instead
    polling: bool = False


class ProcessReaper:
    """Processes retired from the executor's slots or its spare pool, reaped once they
    have exited."""

    def __init__(self) -> None:
        self._dying: list[_Dying] = []

    @property
    def pending(self) -> int:
        """Retired processes not reaped yet."""
        return len(self._dying)

    def retire(self, process, *, kill: bool = True,
               on_exit: Callable[[Any, float], None] | None = None) -> None:
        """Take ``process`` (its pipe already closed): killed now, or (``kill=False``: one
        that closed its pipe) left GRACE_SECONDS to end itself; ``on_exit(process,
        seconds)`` is called once it has exited."""
        if kill and process.exitcode is None:
            process.kill()
        self._dying.append(_Dying(process, time.monotonic(), on_exit, killed=kill))
        self.reap()

    # -- in the dispatcher's loop --------------------------------------------------------------

    def sentinels(self) -> list[int]:
        """The sentinels to wait on with the workers' pipes (a process's becomes ready when
        it exits)."""
        return [d.process.sentinel for d in self._dying if not d.polling]

    def wait_timeout(self, idle: float) -> float:
        """How long the loop may wait: ``idle``, or REAP_POLL_SECONDS while a process whose
        sentinel was ready is still to be reaped."""
        return REAP_POLL_SECONDS if any(d.polling for d in self._dying) else idle

    def woken(self, ready: Iterable) -> list:
        """``ready`` (what the loop's wait returned) less this reaper's sentinels, whose
        processes are polled from now on (``reap`` runs after the loop's messages)."""
        sentinels = {d.process.sentinel: d for d in self._dying if not d.polling}
        rest = []
        for item in ready:
            if item in sentinels:
                sentinels[item].polling = True
            else:
                rest.append(item)
        return rest

    def reap(self) -> None:
        """Collect the retired processes that have exited (never waits); kill those left
        GRACE_SECONDS to end themselves that did not."""
        now = time.monotonic()
        left = []
        for dying in self._dying:
            process = dying.process
            if process.exitcode is None:  # (polls: never blocks)
                if not dying.killed and now - dying.since > GRACE_SECONDS:
                    self._exited(dying, now)  # (its task: "the worker stopped answering")
                    process.kill()
                    dying.killed = True
                left.append(dying)
                continue
            self._exited(dying, now)
            process.join(0)  # (out of multiprocessing's children)
            with contextlib.suppress(ValueError):
                process.close()  # (its sentinel's file descriptor)
        self._dying = left

    def join_all(self, timeout: float = 10.0) -> None:
        """Wait for every retired process to exit (shutdown, a failed start), killing any
        left to end itself."""
        deadline = time.monotonic() + timeout
        for dying in self._dying:
            if dying.process.exitcode is None and not dying.killed:
                dying.process.join(max(0.0, min(GRACE_SECONDS, deadline - time.monotonic())))
                if dying.process.exitcode is None:
                    self._exited(dying, time.monotonic())
                    dying.process.kill()
                    dying.killed = True
            dying.process.join(max(0.0, deadline - time.monotonic()))
        self.reap()

    @staticmethod
    def _exited(dying: _Dying, now: float) -> None:
        on_exit, dying.on_exit = dying.on_exit, None
        if on_exit is not None:
            on_exit(dying.process, now - dying.since)
