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
    id: int
    key: str  # worker.instance_key of the instance
    instance: Instance
    settings_json: str
    future: Future
    started: float = 0.0
    #: a probe task: it may be tried first by a probe worker, beside others (only whether
    #: it runs matters there)
    probe: bool = False
    #: it was tried beside others and ran: now to be replayed alone, on a slot's worker
    tried: bool = False
    #: tried first with the guarded variant (a launch shape not known to run)
    guard: bool = False


@dataclass
class WorkerRecord:
    slot: int
    device: int | None
    process: Any = None
    conn: Any = None
    ready: bool = False
    hello: dict = field(default_factory=dict)
    task: TaskRecord | None = None
    started: float = 0.0
    restarts: int = 0
    #: keys of the instances this worker process was sent
    known: set[str] = field(default_factory=set)
    #: a spare's instance keys dealt with: sent to restore ahead, or too large to
    prepared: set[str] = field(default_factory=set)
    #: of those, the ones it has answered (or that needed no answer)
    restored: set[str] = field(default_factory=set)
    #: when a spare had answered every instance it was sent (its hand-over sends a task only)
    ready_since: float | None = None
    #: a spare lent to try probe tasks beside the slot's worker (a probe worker)
    beside: bool = False


@dataclass
class Restart:
    """One worker restart: whether a spare took the slot, whether that spare was prepared
    (every instance restored, its code loaded), and the seconds the hand-over took in the
    dispatcher (None for a fresh process: ready when it has started). Where a fault's time
    goes, in seconds (None where there was no such step, or not yet): ``ran``, the failed
    task in its worker until its answer or death was seen (the replay and the driver's
    report of the fault); ``exited``, the failed process from its retirement until it had
    exited (on a GPU the driver tears the faulted context down meanwhile: off the
    dispatcher, which does not wait for it); ``next_task``, from the failure until the slot
    was sent its next task."""

    seconds: float | None
    by_spare: bool
    spare_prepared: bool = False
    ran: float | None = None
    exited: float | None = None
    next_task: float | None = None
    #: a probe worker's process (a lent spare trying probe tasks beside the slot's worker)
    #: that was lost: nothing took its place but the next prepared spare lent
    beside: bool = False
    began: float = field(default=0.0, repr=False)  # (monotonic: when the failure was seen)
