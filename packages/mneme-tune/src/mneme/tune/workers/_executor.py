"""ReplayExecutor: replays in worker processes, one per GPU, in the concurrent.futures style.

    with ReplayExecutor("app.rdb", devices=[0, 1]) as pool:
        future = pool.submit(settings, instance="KERNEL/INSTANCE")   # or an Instance object
        for done in as_completed([future, ...]):
            done.result()          # a ReplayResult, or raises TrialFailedError

An instance given by id is looked up once, here; every worker gets the Instance object
(its database's path and resolved records) with its first task for it, and never opens the
database itself.

Each worker process holds restored replay sessions (the instance's memory stays on its
GPU between observations). With GPUs, compiling runs ahead on a pool of CPU processes
that fill a shared on-disk compile cache, so a GPU worker mostly finds its cubin ready.
Crash isolation: a worker that dies (kernel fault, sticky CUDA error, abort) or does not
answer within ``timeout`` seconds (watchdog: it is killed) fails only its task, with the
reason, and a spare worker takes its place at once (spares.py: started ahead, context
made, the instances restored and their code loaded, so a restart is a hand-over of the
next task; a pool that grows while the tuner expects failures, refilled in the
background). The dispatcher (_dispatcher.py, the executor's thread) never waits for a
failed process to end: it is killed and reaped when it has exited (process_reaper.py: a
faulted GPU context takes hundreds of ms to tear down). While failures are expected,
prepared spares may be lent as probe workers that try probe tasks beside each other
(``probe_workers``, probe_workers.py); one that runs is replayed again alone.
Without devices (``devices=None``) the workers compile only, on the CPUs.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import multiprocessing
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, as_completed
from pathlib import Path
from typing import Any

from mneme.replay.db import Database, Instance
from mneme.replay.engine import ReplayResult, ReplaySettings

from ..errors import DeviceSelectionError, TrialFailedError, TuneError
from . import _early_workers as early_workers
from ._dispatcher import START_TIMEOUT, Dispatcher
from ._pool_use import BusySeconds
from ._probe_workers import ProbeWorkers
from ._process_reaper import ProcessReaper, describe_exit
from ._spares import SPARE_RESTORE_BYTES, SparePool
from ._worker import failure_kind, instance_key, precompile, resolved
from ._worker_records import Restart, TaskRecord, WorkerRecord
from ._worker_server import (
    start_compile_pool,
    start_worker_process,
    usable_cores,
    worker_context,
    worker_spec,
)

__all__ = ["ReplayExecutor", "as_completed", "usable_cores"]


#: (the context's maker, under the name tests and older callers use)
_worker_context = worker_context


def _instance_bytes(instance: Instance) -> int:
    """The device memory a restored instance holds."""
    try:
        return sum(region.size for region in instance.regions)
    except Exception:  # noqa: BLE001 - unreadable here: treated as too large to hold twice
        return SPARE_RESTORE_BYTES + 1


def _compile_identity(key: str, settings: ReplaySettings) -> tuple:
    """What decides the code a replay compiles: the compile configuration and the replay
    fields that feed it (a launch change alone reuses the compiled code)."""
    r = settings.replay
    shape = (r.block, r.grid) if (r.specialize_dims or r.set_launch_bounds) else None
    return (key, settings.compile.to_json(), r.specialize, r.specialize_dims,
            r.set_launch_bounds, shape, r.arch)


class ReplayExecutor(Dispatcher):
    """Replays configurations of recorded instances on worker processes, in the manner
    of ``concurrent.futures``: a worker that crashes, hangs or poisons its CUDA context
    fails its task alone and is replaced.

    Parameters:
        database: a path or an opened ``mneme.replay.db.Database``, needed only for
            instances given by id.
        instance: the default instance of :meth:`submit` (an id or an Instance object).
        devices: GPU ordinals (one worker each, ``workers_per_device`` if more pays), or
            None to compile only on ``cpu_workers`` processes.
        workers_per_device: worker processes per GPU.
        cpu_workers: compile-only worker processes; None for one per core.
        compile_workers: CPU processes that compile ahead into the cache the workers read
            (None: several for GPU workers, none for CPU workers, which compile
            themselves).
        timeout: seconds a task may run in a worker before the watchdog kills it.
        cache_dir: the compile cache the workers share; None for a temporary folder.
        before_run: a picklable callable run in the worker with the settings before each
            replay (tests use it to make a worker die).
        spares: keep spare workers per device to replace a failed one at once
            (spares.py: one more process each, and on a GPU one more context holding a
            second copy of instances up to SPARE_RESTORE_BYTES; more while failures are
            expected).
        before_prepare: like ``before_run``, called in a spare with the instance key
            before it prepares it (tests make it slow).
        expect_failures: a count of failures expected from the start: that burst's
            spare processes start with the workers, prepared after the first tasks.
        probe_workers: while failures are expected, up to this many prepared spares per
            device are lent to try probe tasks (``submit(..., probe=True)``) beside each
            other, so that their faults overlap; a probe task that runs there is replayed
            again alone on the slot's worker, whose result (and times) it gets. The
            slot's worker and the probe workers of a device never run at the same time.

    Raises:
        DeviceSelectionError: ``devices`` names no GPU, or one that does not exist.
        TuneError: a worker could not start, or an instance id without a database.
    """

    def __init__(
        self,
        database: str | os.PathLike | Database | None = None,
        *,
        instance: str | Instance | None = None,
        devices: Sequence[int] | None = None,
        workers_per_device: int = 1,
        cpu_workers: int | None = None,
        compile_workers: int | None = None,
        timeout: float = 60.0,
        cache_dir: str | os.PathLike | None = None,
        before_run: Callable[[ReplaySettings], None] | None = None,
        spares: bool = True,
        before_prepare: Callable[[str], None] | None = None,
        expect_failures: int = 0,
        probe_workers: int = 0,
    ):
        self._db = database if isinstance(database, Database) else None
        # absolute: the instances carry the path to processes started later, anywhere
        self._db_path = (None if database is None or self._db is not None
                         else Path(database).absolute())  # type: ignore[arg-type]
        self._specs: dict[str, Instance] = {}  # ids looked up here, once
        self.instance = self._resolve(instance) if instance is not None else None
        self.timeout = float(timeout)
        self.devices = list(devices) if devices is not None else None
        self._context = multiprocessing.get_context("spawn")  # CUDA must not be forked
        self._worker_context = _worker_context()
        self._spec_extra = {"before_run": before_run, "before_prepare": before_prepare}
        slots: Sequence[int | None]  # a GPU per worker; None: a CPU (compile-only) worker
        if self.devices is not None:
            if not self.devices:
                raise DeviceSelectionError("--devices names no GPU")
            slots = early_workers.gpu_slots(self.devices, workers_per_device)
        else:
            slots = [None] * max(1, cpu_workers or os.cpu_count() or 1)
        # Workers started before this executor (early_workers.py: `mneme tune`'s GPU
        # workers), with their cache folder: adopted when they are this executor's slots
        early = early_workers.take(slots)
        if early is not None and (cache_dir is not None or before_run or before_prepare):
            early.stop()  # (started with what this executor's workers are not)
            early = None
        self._tmp = early.cache if early is not None else None
        if early is not None:
            early.adopted()
            cache_dir = early.cache.name
        elif cache_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="mneme-tune-cache-")
            cache_dir = self._tmp.name
        self.cache_dir = str(cache_dir)
        self._workers = [WorkerRecord(i, d) for i, d in enumerate(slots)]
        #: the instances the workers were sent and a task's settings for each, which
        #: spares prepare ahead
        self._sent: dict[str, tuple[Instance, str]] = {}
        #: every restart (benchmarks/worker_restart.py)
        self.restart_log: list[Restart] = []
        #: retired processes not yet exited (reaped by the dispatcher, without waiting)
        self.reaper = ProcessReaper()
        #: per slot, the restart whose next task has not been sent yet
        self._awaiting_task: dict[int, Restart] = {}
        self._pending: collections.deque[TaskRecord] = collections.deque()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = self._context.Pipe(duplex=False)
        self._closing = False
        self._inflight: set[Future] = set()
        self._spare_commands: list[int] = []  # expect_failures counts, for the dispatcher
        self._compiled: set[tuple] = set()  # code variants the compile pool has built
        self.busy = BusySeconds()  # (pool_use.py)
        self.failures: collections.Counter[str] = collections.Counter()
        self._compile_pool: concurrent.futures.ProcessPoolExecutor | None = None
        self.archs: set[str | None] = set()
        self.spares = SparePool(slots, self._spawn_spare, self._kill, _instance_bytes, spares,
                                usable_cores())
        #: per device, the spares lent to try probe tasks beside each other
        self.probes = ProbeWorkers(slots, probe_workers if spares else 0, self.spares)
        if compile_workers is None:
            # GPU workers get compiles done ahead; CPU workers compile themselves.
            # Every core the GPU workers leave: compiling is what bounds fresh-compile
            # spaces (PTX -> cubin runs in process through nvJitLink).
            compile_workers = (max(1, usable_cores() - len(self._workers))
                               if self.devices is not None else 0)
        self.compile_workers = compile_workers
        #: where the start went (the tuner's phase line: parts of ``workers``)
        self.start_seconds: dict[str, float] = {}
        #: a worker's prepare of an instance by instance key: its seconds ("prepare") and
        #: those of its compile ("compile", 0 when the code was cached)
        self.prepare_seconds: dict[str, dict[str, float]] = {}
        self._start_all(compile_workers, early.workers if early is not None else [],
                        early.take_compile_pool(compile_workers) if early is not None else None)
        # The burst's spares start on the dispatcher's thread, once it has sent the first
        # tasks: not on the executor's start (a command server's command would wait there
        # for the workers' fork server's imports; the probe they are for comes after the
        # baseline).
        self._spares_ahead: int | None = expect_failures
        self._tasks_done = 0
        self._thread = threading.Thread(target=self._dispatch, name="mneme-dispatch", daemon=True)
        self._thread.start()

    # -- workers ---------------------------------------------------------------------------

    def _spawn(self, worker: WorkerRecord) -> None:
        spec = worker_spec(worker.device, self.cache_dir, self._spec_extra)
        self._take_process(worker, *start_worker_process(spec, f"mneme-worker-{worker.slot}"))

    @staticmethod
    def _take_process(worker: WorkerRecord, process, conn, started: float) -> None:
        worker.process, worker.conn, worker.ready, worker.task = process, conn, False, None
        worker.started = started
        worker.known = set()

    def _start_all(self, compile_workers: int, early: Sequence[early_workers.EarlyWorker],
                   early_pool: concurrent.futures.ProcessPoolExecutor | None = None) -> None:
        """Start the workers (or adopt ``early``'s, one per slot in order) and the compile
        pool (or adopt ``early_pool``, started with them), and wait for each worker's hello
        (``start_seconds``: the compile pool's start, the wait for the hellos)."""
        for worker, adopted in itertools.zip_longest(self._workers, early[: len(self._workers)]):
            if adopted is not None:
                self._take_process(worker, adopted.process, adopted.conn, adopted.started)
            else:
                self._spawn(worker)
        began = time.monotonic()
        if early_pool is not None:
            self._compile_pool = early_pool
            self.start_seconds["compile pool"] = 0.0
        elif compile_workers > 0:
            # Forked from the workers' server too (a spawned process imports the compiler
            # first, ~1 s on the baseline's path), and started while the workers start.
            self._compile_pool = start_compile_pool(compile_workers, self._worker_context)
            self.start_seconds["compile pool"] = time.monotonic() - began
        began = time.monotonic()
        for worker in self._workers:
            message = None
            if worker.conn.poll(START_TIMEOUT):
                try:
                    message = worker.conn.recv()
                except EOFError:
                    message = None
            if message is None or message[0] != "hello":
                reason = message[1] if message else describe_exit(worker.process)
                self._kill_all()
                if worker.device is not None:
                    raise DeviceSelectionError(
                        f"GPU {worker.device} cannot be used ({reason}); check --devices "
                        "against nvidia-smi -L"
                    )
                raise TuneError(f"a worker could not start: {reason}")
            worker.ready, worker.hello = True, message[1]
            self.spares.note_hello(worker.device, message[1])
            # CPU workers compile for the recorded arch: precompile with no override
            self.archs.add(message[1].get("arch"))
        self.start_seconds["hellos"] = time.monotonic() - began

    def prepared_in(self, instance) -> dict[str, float] | None:
        """How long a slot worker took to prepare an instance ahead of its first task
        (prepare_baseline: compile, module load, restore).

        Parameters:
            instance: the instance (an Instance or its id, as ``submit`` takes it).

        Returns:
            Its seconds (``prepare``) and its compile's (``compile``, 0 when the code was
            cached); None where no worker reported them.
        """
        return self.prepare_seconds.get(instance_key(self._resolve(instance)))

    @property
    def device_info(self) -> list[dict]:
        """What each worker reported at start (device name, arch, limits), with its GPU's
        ordinal (``device``; None for a CPU worker)."""
        return [{**w.hello, "device": w.device} for w in self._workers]

    @property
    def restarts(self) -> int:
        """Worker processes lost (a slot's, replaced; or a probe worker's)."""
        return len(self.restart_log)

    @property
    def probe_capacity(self) -> int:
        """Probe tasks that may run at once beside the slots' workers, at most."""
        return self.probes.capacity

    @property
    def worker_count(self) -> int:
        return len(self._workers)

    def _kill(self, worker: WorkerRecord, *, kill: bool = True,
              on_exit: Callable[[Any, float], None] | None = None) -> None:
        """Retire ``worker``'s process without waiting for it to exit (process_reaper.py):
        its pipe closed, the process killed (``kill=False``: one that closed its pipe is
        left to end itself) and reaped later by the dispatcher, ``on_exit(process,
        seconds)`` then."""
        process = worker.process
        if worker.conn is not None:
            worker.conn.close()
        worker.conn = None
        if process is not None:
            self.reaper.retire(process, kill=kill, on_exit=on_exit)

    def _kill_all(self) -> None:
        for worker in self._workers:
            self._kill(worker)
        self.reaper.join_all()
        if self._compile_pool is not None:
            self._compile_pool.shutdown(wait=False, cancel_futures=True)

    def _fail_and_restart(self, worker: WorkerRecord, kind: str, message: str | None,
                          *, kill: bool = True) -> None:
        """``worker``'s process is done for: the slot goes to a spare (or a process started
        now) first, then the old process is retired without waiting for its exit. Its task
        fails with ``kind`` and ``message``; ``message`` None: the worker died or closed its
        pipe, and the failure names its exit once it is reaped (``kill=False``: it is left
        process_reaper.GRACE_SECONDS to exit by itself)."""
        task = worker.task
        began = time.monotonic()
        old = WorkerRecord(worker.slot, worker.device, process=worker.process, conn=worker.conn)
        worker.task = None
        worker.restarts += 1
        restart = Restart(None, False, ran=began - task.started if task is not None else None,
                          began=began)
        self.restart_log.append(restart)
        if worker.beside:
            # A probe worker: not replaced (the next prepared spare is lent when one is).
            restart.beside = True
            self.probes.lost(worker)
            worker.process, worker.conn = None, None
        elif not self._closing:
            self.spares.start()  # failures have begun: the next one finds a spare
            spare = self.spares.take(worker.device)
            if spare is not None:
                # The readiest spare takes the slot as it is (prepared: the next task is all
                # it needs; still starting: further along than a process started now).
                restart.by_spare = True
                restart.spare_prepared = self.spares.is_prepared(spare, self._sent)
                worker.process, worker.conn, worker.ready = spare.process, spare.conn, spare.ready
                worker.hello, worker.known, worker.started = spare.hello, spare.known, spare.started
                restart.seconds = time.monotonic() - began
            else:
                self._spawn(worker)
            self._awaiting_task[worker.slot] = restart
        else:
            worker.process, worker.conn = None, None
        if task is not None and message is not None:
            self._finish(task, error=TrialFailedError(kind, message))

        def on_exit(process, seconds: float) -> None:
            restart.exited = seconds
            if task is not None and message is None:
                self._finish(task, error=TrialFailedError(kind, describe_exit(process)))

        self._kill(old, kill=kill, on_exit=on_exit)

    # -- spares --------------------------------------------------------------------------------

    def _spawn_spare(self, device: int | None) -> WorkerRecord:
        spare = WorkerRecord(-1, device)
        self._spawn(spare)
        return spare

    def expect_failures(self, count: int) -> None:
        """Say that some of the next tasks may end their worker (the probe of launch
        shapes): spares for them are made ahead and as they are taken.

        Parameters:
            count: how many; 0 when that is over (the pool shrinks back to one spare per
                device).
        """
        with self._lock:
            self._spare_commands.append(count)
        self._wake_w.send(b"")

    def spare_ready(self, device: int | None = None, count: int = 1) -> bool:
        """Whether spares have started and prepared every instance the workers were
        sent, so that a restart now is a hand-over.

        Parameters:
            device: the GPU; None for the CPU workers.
            count: how many spares.

        Returns:
            True when that many are ready.
        """
        return self.spares.ready_count(device, list(self._sent)) >= count

    # -- tasks -------------------------------------------------------------------------------

    def _resolve(self, instance: str | Instance) -> Instance:
        """The Instance object of an id (looked up once) or of itself, its records read."""
        if not isinstance(instance, str):
            return resolved(instance)
        if instance not in self._specs:
            if self._db is None:
                if self._db_path is None:
                    raise TuneError(f"instance {instance!r} given by id, but the executor has "
                                    "no database: pass one, or an Instance object")
                self._db = Database.open(self._db_path)
            self._specs[instance] = resolved(self._db.instance(instance))
        return self._specs[instance]

    def submit(self, settings: ReplaySettings, instance: str | Instance | None = None, *,
               probe: bool = False, guard: bool = False) -> Future:
        """Replay a configuration on a worker.

        Parameters:
            settings: the configuration.
            instance: an id or an Instance object; None for the executor's.
            probe: a task that may well fault (the tuner's probe of launch shapes): with
                ``probe_workers``, it may be tried beside other probe tasks first; its
                failure there is its answer, and if it runs it is replayed again alone.
            guard: try the kernel's guarded variant first
                (mneme.replay.engine.guarded_probe), as a probe task does: a launch shape
                that would fault fails as ``out-of-bounds``, the worker's context intact.

        Returns:
            A Future of the ReplayResult; it raises TrialFailedError when the replay
            fails or does not verify (its ``kind`` says why).

        Raises:
            TuneError: no instance to replay (none given, and the executor has none).
            RuntimeError: the executor is shut down.
        """
        target = self._resolve(instance) if instance is not None else self.instance
        if target is None:
            raise TuneError("submit needs an instance (KERNEL/INSTANCE)")
        if self._closing:
            raise RuntimeError("the executor is shut down")
        key = instance_key(target)
        task = TaskRecord(next(self._ids), key, target, settings.to_json(), Future(), probe=probe,
                     guard=(guard or probe) and bool(self.devices))  # (GPU workers only)
        task.future.set_running_or_notify_cancel()
        with self._lock:
            self._inflight.add(task.future)
        task.future.add_done_callback(self._inflight.discard)
        # (the guarded variant too, where the task tries it first: not in the worker's time)
        identity = (*_compile_identity(key, settings), task.guard)
        if self._compile_pool is not None and identity not in self._compiled:
            compiles = [
                self._compile_pool.submit(
                    precompile, key, target, task.settings_json, arch, self.cache_dir, task.guard
                )
                for arch in self.archs
            ]
            remaining = [len(compiles)]

            def compiled(done: Future) -> None:
                error = done.exception()
                if error is None and isinstance(done.result(), float):
                    with self._lock:
                        self.busy.compile_seconds += done.result()
                if error is not None and not task.future.done():
                    self._finish(task, error=TrialFailedError(failure_kind(error), str(error)))
                with self._lock:
                    remaining[0] -= 1
                    last = remaining[0] == 0
                    if last and error is None:
                        self._compiled.add(identity)
                if last and not task.future.done():
                    self._queue(task)

            for c in compiles:
                c.add_done_callback(compiled)
        else:
            self._queue(task)
        return task.future

    def map(self, settings: Iterable[ReplaySettings], instance: str | Instance | None = None,
            timeout: float | None = None) -> Iterator[ReplayResult]:
        """Replay configurations, like ``Executor.map``.

        Parameters:
            settings: the configurations.
            instance: an id or an Instance object; None for the executor's.
            timeout: seconds to wait for each result; None waits.

        Yields:
            The results in the order of ``settings`` (the first failure raises its
            TrialFailedError).
        """
        futures = [self.submit(s, instance) for s in settings]
        for future in futures:
            yield future.result(timeout)

    def _queue(self, task: TaskRecord) -> None:
        with self._lock:
            self._pending.append(task)
        self._wake_w.send(b"")

    def _finish(self, task: TaskRecord, result: ReplayResult | None = None,
                error: TrialFailedError | None = None) -> None:
        if task.future.done():
            return
        self._tasks_done += 1
        if error is not None:
            self.failures[error.kind] += 1
            task.future.set_exception(error)
        else:
            task.future.set_result(result)

    # -- lifetime ----------------------------------------------------------------------------

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Stop the workers and the dispatcher.

        Parameters:
            wait: wait for the tasks in flight first.
            cancel_futures: fail the tasks not run yet instead of waiting for them.
        """
        if wait and not cancel_futures:
            with self._lock:
                inflight = list(self._inflight)
            concurrent.futures.wait(inflight)
        self._closing = True
        self._wake_w.send(b"")
        self._thread.join(10)
        with self._lock:
            pending = list(self._pending)
            self._pending.clear()
        beside = self.probes.close()
        for task in pending + [w.task for w in [*self._workers, *beside] if w.task is not None]:
            self._finish(task, error=TrialFailedError("error", "the executor was shut down"))
        everyone = [*self._workers, *beside, *self.spares.close()]
        for worker in everyone:
            if worker.conn is not None:
                try:
                    worker.conn.send(None)
                except OSError:
                    pass
        for worker in everyone:
            if worker.process is not None:
                worker.process.join(10)
            self._kill(worker)
        self.reaper.join_all()
        if self._compile_pool is not None:
            self._compile_pool.shutdown(wait=True, cancel_futures=True)
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> ReplayExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown(wait=exc[0] is None, cancel_futures=exc[0] is not None)
