"""GPU workers started before their executor exists.

``mneme tune`` asks for its GPU workers first of all (tune/_gpu_start.py, once cuInit has
found a driver): each forks as soon as the workers' server has imported its modules and
makes its CUDA context while the command is still importing the engine, Optuna and rich,
instead of after the command has opened the database and made its tuner. The executor the
first tuner makes then adopts them (``take``, ReplayExecutor) instead of starting its
own. Workers nothing adopts (a command refused before its tuner, other GPUs chosen) are
stopped: by ``take`` itself, or when the process ends.
"""

from __future__ import annotations

import atexit
import contextlib
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._worker_server import start_compile_pool, start_worker_process, usable_cores, worker_spec

__all__ = ["EarlyWorker", "EarlyWorkers", "begin", "gpu_slots", "provide", "started", "take"]


def gpu_slots(devices: Sequence[int], per_device: int) -> list[int]:
    """The GPU of each slot worker: ``per_device`` (at least one) of each of ``devices``, in
    the order ReplayExecutor numbers its slots (early workers are adopted slot by slot)."""
    return [d for d in devices for _ in range(max(1, per_device))]


@dataclass
class EarlyWorker:
    """One started worker: its GPU (None: a CPU worker), process, end of the pipe and
    start (monotonic s)."""

    device: int | None
    process: Any
    conn: Any
    started: float


class EarlyWorkers:
    """The workers of ``slots`` (a GPU per worker, None for a CPU worker, in the executor's
    slot order), with the compile cache folder they were started with (the adopting
    executor owns it then).

    Parameters:
        slots: the GPU of each worker.
        cache: their compile cache folder, where made elsewhere (an object with ``name`` and
            ``cleanup()``, as a TemporaryDirectory; default: a new one).
    """

    def __init__(self, slots: Sequence[int | None], cache: Any = None):
        self.slots = list(slots)
        self.cache = cache or tempfile.TemporaryDirectory(prefix="mneme-tune-cache-")
        self.workers: list[EarlyWorker] = []
        #: the compile pool forked beside them (fork_compile_pool), with its size
        self.compile_pool: Any = None
        self.compile_processes = 0
        self._done = threading.Event()
        atexit.register(self.stop)

    def start(self, context=None) -> None:
        """Start every slot's worker (on the driver's thread: each start waits for the
        workers' server to have imported its modules; or forked from this process, from
        ``context``: _worker_server.fork_context). A start that fails leaves the rest
        to the executor (those started are then not its slots: ``take`` stops them), which
        starts its own and says what failed; the failure is raised to the caller."""
        try:
            for device in self.slots:
                process, conn, started = start_worker_process(
                    worker_spec(device, self.cache.name), context=context)
                self.workers.append(EarlyWorker(device, process, conn, started))
        finally:
            self._done.set()

    def fork_compile_pool(self, context) -> None:
        """Fork the compile pool the executor of these GPU workers would start (a process
        per core they leave) from this process now, with ``context`` (fork_context: a
        command server's process, which loads no driver and has imported the compiler).
        Started by the executor, its processes would come from the workers' fork server,
        and a served command would wait there for that server's own imports (0.2-0.6 s on
        the H200 host: the phase line's ``workers (compile pool ...)``)."""
        self.compile_processes = max(1, usable_cores() - len(self.slots))
        self.compile_pool = start_compile_pool(self.compile_processes, context)

    def take_compile_pool(self, processes: int):
        """The compile pool forked beside the workers when it has ``processes`` processes
        (the adopting executor's); None otherwise (a pool of another size is stopped).

        Parameters:
            processes: the executor's compile processes (0: none).

        Returns:
            The pool, or None.
        """
        pool, self.compile_pool = self.compile_pool, None
        if pool is not None and processes != self.compile_processes:
            pool.shutdown(wait=False, cancel_futures=True)
            return None
        return pool

    def done(self) -> None:
        """Say that no worker is coming (``start`` never began: no driver)."""
        self._done.set()

    def wait(self) -> None:
        self._done.wait()

    def adopted(self) -> None:
        """The executor owns the workers and the cache folder from now on."""
        atexit.unregister(self.stop)

    def stop(self) -> None:
        """Stop the workers nothing adopted and remove their cache folder."""
        for worker in self.workers:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.close()
            with contextlib.suppress(OSError, ValueError, AttributeError):
                worker.process.kill()
        self.workers = []
        if self.compile_pool is not None:
            self.compile_pool.shutdown(wait=False, cancel_futures=True)
            self.compile_pool = None
        self.cache.cleanup()
        atexit.unregister(self.stop)


_lock = threading.Lock()
_pending: EarlyWorkers | None = None


def begin(slots: Sequence[int | None]) -> EarlyWorkers:
    """Announce the workers of ``slots``, to be started (``EarlyWorkers.start``) or
    declared none (``done``) by the caller; an executor made meanwhile waits for them.

    Parameters:
        slots: the GPU of each worker, in the executor's slot order.

    Returns:
        The announced workers.
    """
    global _pending
    # (the thread that starts them then imports nothing: see tune/_gpu_start.py)
    from multiprocessing import popen_forkserver, popen_spawn_posix  # noqa: F401

    with _lock:
        if _pending is not None and _pending.workers and _pending.slots == list(slots):
            return _pending  # (provided, started: a command server's warm workers)
    early = EarlyWorkers(slots)
    with _lock:
        if _pending is not None:
            _pending.stop()
        _pending = early
    return early


def provide(early: EarlyWorkers) -> None:
    """Announce workers started elsewhere (a command server's warm workers, handed to this
    command): ``begin`` for their slots returns them, started, and an executor adopts them
    as it adopts early workers.

    Parameters:
        early: the started workers, with their cache folder.
    """
    global _pending
    early.done()
    with _lock:
        if _pending is not None and _pending is not early:
            _pending.stop()
        _pending = early


def started() -> bool:
    """Whether GPU workers were started for the command and wait to be adopted: they are
    started once a driver was found, or forked where the GPU's device node is
    (_gpu_start.py), so the command need not load the driver itself to know there is
    one."""
    with _lock:
        early = _pending
    return early is not None and any(w.device is not None for w in early.workers)


def take(slots: Sequence[int | None]) -> EarlyWorkers | None:
    """The announced workers, once started, when they are exactly ``slots``'s; None (and
    they are stopped) otherwise, or when none were announced.

    Parameters:
        slots: the GPU of each worker the executor needs, in slot order.

    Returns:
        The workers to adopt (``adopted`` to be called), or None.
    """
    global _pending
    with _lock:
        early, _pending = _pending, None
    if early is None:
        return None
    early.wait()
    if not early.workers or [w.device for w in early.workers] != list(slots):
        early.stop()
        return None
    return early
