"""What the executor's dispatcher keeps of each task, worker process and restart
(executor.py): plain records, filled in by the dispatcher thread."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from mneme.replay.db import Instance

__all__ = ["Restart", "TaskRecord", "WorkerRecord"]


@dataclass
class TaskRecord:
    """One task of the executor: a configuration to replay on an instance.

    Attributes:
        id: its number.
        key: the instance's key (worker.instance_key).
        instance: the instance.
        settings_json: the configuration, as JSON.
        future: the Future its result or failure goes to.
        started: when it was handed to a worker (monotonic seconds).
        probe: a probe task: it may be tried first by a probe worker, beside others (only
            whether it runs matters there)
        tried: it was tried beside others and ran: now to be replayed alone, on a slot's
            worker
        guard: tried first with the guarded variant (a launch shape not known to run)
    """

    id: int
    key: str
    instance: Instance
    settings_json: str
    future: Future
    started: float = 0.0
    probe: bool = False
    tried: bool = False
    guard: bool = False


@dataclass
class WorkerRecord:
    """One worker process of the executor (a slot's, or a spare).

    Attributes:
        slot: its slot (-1: a spare).
        device: its GPU; None for a CPU worker.
        process: its process.
        conn: its end of the pipe.
        ready: whether it has said hello.
        hello: what it said at start (device, limits).
        task: the task it runs; None when idle.
        started: when it was started (monotonic seconds).
        restarts: restarts of this slot.
        known: keys of the instances this worker process was sent
        prepared: a spare's instance keys dealt with: sent to restore ahead, or too large
            to hold twice.
        restored: of those, the ones it has answered (or that needed no answer)
        ready_since: when a spare had answered every instance it was sent (its hand-over
            sends a task only)
        beside: a spare lent to try probe tasks beside the slot's worker (a probe worker)
    """

    slot: int
    device: int | None
    process: Any = None
    conn: Any = None
    ready: bool = False
    hello: dict = field(default_factory=dict)
    task: TaskRecord | None = None
    started: float = 0.0
    restarts: int = 0
    known: set[str] = field(default_factory=set)
    prepared: set[str] = field(default_factory=set)
    restored: set[str] = field(default_factory=set)
    ready_since: float | None = None
    beside: bool = False


@dataclass
class Restart:
    """One worker restart, and where a fault's time went (seconds; None where there was
    no such step, or not yet).

    Attributes:
        seconds: the hand-over in the dispatcher (None for a fresh process: ready when it
            has started).
        by_spare: whether a spare took the slot.
        spare_prepared: whether that spare was prepared (every instance restored, its
            code loaded).
        ran: the failed task in its worker until its answer or death was seen (the
            replay and the driver's report of the fault).
        exited: the failed process from its retirement until it had exited (on a GPU the
            driver tears the faulted context down meanwhile: off the dispatcher, which
            does not wait for it).
        next_task: from the failure until the slot was sent its next task.
        beside: a probe worker's process (a lent spare trying probe tasks beside the
            slot's worker) was lost: nothing took its place but the next prepared spare
            lent.
        began: when the failure was seen (monotonic seconds).
    """

    seconds: float | None
    by_spare: bool
    spare_prepared: bool = False
    ran: float | None = None
    exited: float | None = None
    next_task: float | None = None
    beside: bool = False
    began: float = field(default=0.0, repr=False)
