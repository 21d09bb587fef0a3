"""ReplayExecutor's dispatcher: the thread that sends queued tasks to idle workers (lent
probe workers first), receives their answers, restarts a worker that died or hangs (the
watchdog), keeps the spare pool going and reaps the processes retired without waiting.
The executor (_executor.py) starts the workers and queues the tasks it is given."""

from __future__ import annotations

import time
from multiprocessing.connection import wait
from typing import TYPE_CHECKING

from mneme.replay.engine import ReplayResult
from mneme.replay.engine.errors import CONTEXT_POISONED

from ..errors import TrialFailedError

if TYPE_CHECKING:
    import collections
    import threading
    from multiprocessing.connection import Connection

    from mneme.replay.db import Instance

    from ._pool_use import BusySeconds
    from ._probe_workers import ProbeWorkers
    from ._process_reaper import ProcessReaper
    from ._spares import SparePool
    from ._worker_records import Restart, TaskRecord, WorkerRecord

#: seconds a starting worker may take to report its device
START_TIMEOUT = 120.0
#: spares are prepared (and, unless failures were expected at start, started) once this
#: many tasks have finished, at the first restart or when failures are expected: memory
#: restored beside the first replays (a tuner's baseline and determinism profile) would
#: disturb the times they measure
SPARE_AFTER_TASKS = 8


class Dispatcher:
    """The part of ReplayExecutor (_executor.py) that its dispatcher thread runs. It works
    on the executor's workers, queue, spare pool, probe workers and reaper, which the
    executor creates."""

    if TYPE_CHECKING:  # the executor's, which the dispatcher uses
        timeout: float
        busy: BusySeconds
        spares: SparePool
        probes: ProbeWorkers
        reaper: ProcessReaper
        _workers: list[WorkerRecord]
        _pending: collections.deque[TaskRecord]
        _lock: threading.Lock
        _sent: dict[str, tuple[Instance, str]]
        _awaiting_task: dict[int, Restart]
        _spare_commands: list[int]
        _spares_ahead: int | None
        _wake_r: Connection
        _closing: bool
        _tasks_done: int
        prepare_seconds: dict[str, dict[str, float]]

        def _fail_and_restart(self, worker: WorkerRecord, kind: str, message: str | None,
                              *, kill: bool = True) -> None: ...
        def _finish(self, task: TaskRecord, result: ReplayResult | None = None,
                    error: TrialFailedError | None = None) -> None: ...

    def _assign(self) -> None:
        if self.probes.per_device:
            with self._lock:
                untried = any(t.probe and not t.tried for t in self._pending)
            self.probes.lend(untried, self._sent, self._closing)
        for worker in [*self.probes.workers(), *self._workers]:  # (probes first: their faults)
            if not worker.ready or worker.task is not None or worker.conn is None:
                continue
            with self._lock:
                if not self._pending:
                    return
                task = self.probes.next_task(worker, self._pending, self._workers)
            if task is None:
                continue
            # The instance itself only with the first task for it in this process.
            handle = None if task.key in worker.known else task.instance
            try:
                worker.conn.send((task.id, task.key, handle, task.settings_json,
                                  task.guard and not task.tried))
            except (OSError, BrokenPipeError):
                task.started = time.monotonic()
                worker.task = task
                self._fail_and_restart(worker, "crashed", None, kill=False)
                continue
            worker.known.add(task.key)
            self._sent.setdefault(task.key, (task.instance, task.settings_json))
            task.started = time.monotonic()
            worker.task = task
            restart = None if worker.beside else self._awaiting_task.pop(worker.slot, None)
            if restart is not None:
                restart.next_task = task.started - restart.began

    def _receive(self, worker: WorkerRecord) -> None:
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            # It died (or is ending itself): the slot goes on without waiting for its exit,
            # and its task's failure names the exit once the process is reaped.
            self._fail_and_restart(worker, "crashed", None, kill=False)
            return
        kind = message[0]
        if kind == "hello":
            worker.ready, worker.hello = True, message[1]
            self.spares.note_hello(worker.device, message[1])
            return
        if kind in ("prepared", "unprepared"):  # a spare's answer, after it took a slot
            if kind == "prepared" and len(message) > 2:  # (a slot's: prepare_baseline)
                self.prepare_seconds.setdefault(message[1], {"prepare": message[2],
                                                            "compile": message[3]})
            if worker.beside:  # (a lent spare goes back to the pool, prepared)
                worker.restored.add(message[1])
            return
        if kind == "fatal":
            worker.task = None
            self._fail_and_restart(worker, "crashed", f"a restarted worker failed: {message[1]}")
            return
        task, worker.task = worker.task, None
        if task is None:
            return
        self.busy.replay_seconds += time.monotonic() - task.started
        if kind == "ok":
            result = ReplayResult.from_dict(message[2])
            if worker.beside and task.probe and result.verified is not False:
                # It runs: replayed again alone on a slot's worker, whose result it gets.
                task.tried = True
                with self._lock:
                    self._pending.appendleft(task)
                return
            if result.verified is False:
                self._finish(task, error=TrialFailedError(
                    "unverified",
                    f"{len(result.mismatches)} region(s) differ from the recording", result))
            else:
                self._finish(task, result)
            return
        self._finish(task, error=TrialFailedError(kind, message[2]))
        if kind == CONTEXT_POISONED:  # the worker exits after a fault: start its successor now
            self._fail_and_restart(worker, "crashed", message[2])

    def _watchdog(self) -> None:
        now = time.monotonic()
        for worker in [*self._workers, *self.probes.workers()]:
            if worker.task is not None and now - worker.task.started > self.timeout:
                self._fail_and_restart(
                    worker, "timeout",
                    f"no answer within {self.timeout:g} s (hang?): the worker was killed")
            elif not worker.ready and worker.conn is not None and now - worker.started > START_TIMEOUT:
                self._fail_and_restart(worker, "crashed", "a restarted worker did not start")

    def _dispatch(self) -> None:
        while not self._closing:
            self._assign()
            if self._spares_ahead is not None and any(w.task is not None for w in self._workers):
                # (the executor's start left them to this thread, after the first task)
                self.spares.spawn_ahead(self._spares_ahead)
                self._spares_ahead = None
            self.spares.refill()  # (after the tasks are sent: a hand-over waits for no spawn)
            with self._lock:
                commands, self._spare_commands = self._spare_commands, []
            for count in commands:
                self.spares.expect_failures(count)
            if self._tasks_done >= SPARE_AFTER_TASKS:
                self.spares.start()
            self.spares.prepare(self._sent)
            conns = {w.conn: w for w in [*self._workers, *self.probes.workers()]
                     if w.conn is not None}
            spares = self.spares.connections()
            try:
                ready = wait([*conns, *spares, *self.reaper.sentinels(), self._wake_r],
                             timeout=self.reaper.wait_timeout(0.5))
            except OSError:
                continue
            for conn in self.reaper.woken(ready):  # (exited processes: reaped below)
                if conn is self._wake_r:
                    while self._wake_r.poll():
                        self._wake_r.recv()
                    continue
                if conn in spares:
                    spare = spares[conn]
                    if self.spares.owns(spare):
                        self.spares.receive(spare)
                    continue
                worker = conns[conn]
                if worker.conn is conn:
                    self._receive(worker)
            self.reaper.reap()
            self._watchdog()
