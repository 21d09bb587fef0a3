"""The workers' fork server: how worker processes start, and its start at the very
beginning of ``mneme tune``.

Worker processes fork from a server process (``forkserver``, the default) that imported
the worker's modules once and never initialises CUDA (cuInit runs at a process's first
device use), so a worker or spare starts in ~50 ms instead of ~0.5-0.7 s of imports, and
makes its own CUDA context after the fork; or, with MNEME_WORKER_START=spawn, as a fresh
interpreter each. This module imports nothing of mneme's beyond the errors: the command
starts the server before it imports the replay engine, Optuna or rich, so the server's
~0.6 s of imports run beside the command's own instead of after them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import signal
import time
from typing import Any

from ..errors import TuneError

__all__ = ["PRELOAD", "allow_fork_start", "fork_context", "fork_every_worker", "start_compile_pool",
           "start_worker_process", "start_worker_server", "stop_worker_server", "usable_cores",
           "worker_context", "worker_spec"]

#: what the server imports once, before it forks any worker
PRELOAD = ["mneme.tune.workers._worker", "mneme.replay.engine", "mneme.replay.jit"]


def worker_context():
    """The multiprocessing context worker processes start from (MNEME_WORKER_START:
    ``forkserver``, the default, or ``spawn``; ``fork`` after fork_every_worker).

    Returns:
        The context.

    Raises:
        TuneError: MNEME_WORKER_START names another method.
    """
    if _fork_every_worker and "MNEME_WORKER_START" not in os.environ:
        forking = fork_context()
        if forking is not None:
            return forking
    method = os.environ.get("MNEME_WORKER_START", "forkserver")
    if method not in ("spawn", "forkserver"):
        raise TuneError(f"MNEME_WORKER_START={method!r}: use spawn or forkserver")
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload(PRELOAD)
    return context


_fork_start_allowed = False
_fork_every_worker = False


def allow_fork_start() -> None:
    """Say that this process has imported the workers' modules and touched no GPU (a
    command server's process, mneme.cli._server): its first GPU workers may fork from it
    (fork_context), with nothing to import, instead of from the workers' server, which
    starts beside the command and imports them first (~0.6 s)."""
    global _fork_start_allowed
    _fork_start_allowed = True


def fork_context():
    """The ``fork`` context while workers may fork from this process: allowed
    (allow_fork_start) and the CUDA driver not loaded here (a context made before a fork
    is unusable after it, in the child; /proc/self/maps says whether libcuda is mapped).

    Returns:
        The context, or None.
    """
    if not _fork_start_allowed:
        return None
    try:
        with open("/proc/self/maps") as maps:
            if any("libcuda.so" in line for line in maps):
                return None
    except OSError:
        return None
    return multiprocessing.get_context("fork")


def fork_every_worker() -> bool:
    """Fork every worker from this process from now on, where it may fork them
    (fork_context: a command server's process) and MNEME_WORKER_START chooses no method:
    a compile-only command, which never loads the CUDA driver, then needs no workers'
    server at all.

    Returns:
        Whether workers fork from this process.
    """
    global _fork_every_worker
    _fork_every_worker = "MNEME_WORKER_START" not in os.environ and fork_context() is not None
    return _fork_every_worker


def start_worker_server() -> None:
    """Start the workers' fork server now (``mneme tune``, first of all: before it imports
    the engine, opens the database, the GPU driver and its clocks). Nothing when workers
    are spawned (MNEME_WORKER_START=spawn) or the server runs already; a server that
    cannot start is left to the executor, which says why."""
    try:
        context = worker_context()
        if context.get_start_method() == "forkserver":
            from multiprocessing import forkserver

            forkserver.ensure_running()
    except Exception:  # noqa: BLE001 - (a bad MNEME_WORKER_START: the executor's error)
        return


def stop_worker_server() -> bool:
    """End the workers' fork server this process started, at once: ``mneme tune``'s last
    step (process_exit.py), every worker gone. Left alone, it ends only once it sees this
    process gone, through its interpreter's teardown (the replay engine, NumPy, the JIT
    binding unloaded: 60-100 ms here), and it holds the command's stdout and stderr open
    meanwhile: a pipe reading them (``| tee``, a benchmark) waited that long for their end.
    SIGTERM's default action ends it without that teardown; it holds nothing to save.

    Returns:
        True when a server was running and was told to end.
    """
    from multiprocessing import forkserver

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if not pid:
        return False
    with contextlib.suppress(OSError):  # (gone already)
        os.kill(pid, signal.SIGTERM)
        return True
    return False


def worker_spec(device: int | None, cache_dir: str, extra: dict | None = None) -> dict[str, Any]:
    """What a worker process is started with (worker.py's worker_main): its GPU (None: a
    CPU worker), the compile cache folder, and ``extra`` (before_run, before_prepare)."""
    return {"device": device, "cache_dir": cache_dir, "before_run": None, "before_prepare": None,
            **(extra or {})}


def _run_worker(conn, spec: dict[str, Any], parent_end=None) -> None:
    # A forked worker holds the parent's end of its pipe too: closed first, or the worker
    # would never see its pipe end when the parent does (killed with SIGKILL, a served
    # command left its GPU workers waiting for good, each with its CUDA context).
    if parent_end is not None:
        parent_end.close()
    from ._worker import worker_main  # (imported by the server already: PRELOAD)

    try:
        worker_main(conn, spec)
    except ConnectionError:  # an answer to a parent that is gone: nothing to say it to
        pass


def start_worker_process(spec: dict[str, Any], name: str = "mneme-worker",
                         context=None) -> tuple[Any, Any, float]:
    """Start a worker process (from the server, unless MNEME_WORKER_START=spawn). Imports
    nothing of the worker's here: early_workers.py starts workers on a thread while the
    command's own thread imports the engine.

    Parameters:
        spec: what it is started with (``worker_spec``).
        name: the process's name.
        context: the multiprocessing context to start it from (default: worker_context).

    Returns:
        (its process, the parent's end of its pipe, when it was started: monotonic s).
    """
    context = context or worker_context()
    parent, child = context.Pipe()
    forked = context.get_start_method() == "fork"  # (else only the child's end is sent)
    process = context.Process(target=_run_worker, args=(child, spec, parent if forked else None),
                              name=name, daemon=True)
    process.start()
    child.close()
    return process, parent, time.monotonic()


def usable_cores() -> int:
    """CPU cores this process may run on.

    Returns:
        Their number (its affinity mask, else the machine's).
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _watch_tuner(tuner: int) -> None:
    """Until process ``tuner`` ends (then this process ends at once)."""
    import select

    from mneme.runtime.processes import pid_alive

    try:
        ended = os.pidfd_open(tuner)
    except (AttributeError, OSError):  # (Linux < 5.3, or gone already: looked at each second)
        while pid_alive(tuner):
            time.sleep(1.0)
    else:
        select.select([ended], [], [])  # (readable once the process has ended)
    os._exit(1)


def _end_with_tuner(tuner: int) -> None:
    """A compile process's first step: a thread that ends it when the tuner that started
    the pool ends. A pool's processes wait on its call queue, which they hold both ends
    of: left alone they outlived a tuner killed with SIGKILL, each one for good (and kept
    the workers' fork server alive, which lives while its children do); forked from a
    served command (early_workers.py), they also held its GPU workers' pipes open, so that
    those never saw the end of theirs and kept their CUDA contexts."""
    import threading

    threading.Thread(target=_watch_tuner, args=(tuner,), name="mneme-tuner-watch",
                     daemon=True).start()


def start_compile_pool(processes: int, context=None) -> concurrent.futures.ProcessPoolExecutor:
    """Start the compile pool's processes now (each is given a first task, so every one
    is started, not only on demand); each ends with this process (``_end_with_tuner``).

    Parameters:
        processes: how many.
        context: the multiprocessing context to start them from (default: worker_context;
            ``fork`` forks them all at once, before the pool's own thread starts).

    Returns:
        The pool.
    """
    pool = concurrent.futures.ProcessPoolExecutor(
        processes, mp_context=context or worker_context(), initializer=_end_with_tuner,
        initargs=(os.getpid(),))
    for _ in range(processes):
        pool.submit(os.getpid)
    return pool
