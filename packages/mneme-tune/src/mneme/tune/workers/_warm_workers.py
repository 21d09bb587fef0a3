"""GPU workers a command server keeps warm and hands to the command whose slots they are.

A GPU worker's start is mostly its CUDA context: 0.5-0.7 s from its fork on the H200
host. A served ``mneme tune`` (mneme.cli._server) has no imports left to hide that behind,
so it waited for it. The server keeps one set of workers, started for the slots a tuning
command asks for by default (GPU 0, one worker), forked from the server, which never
touches a GPU. Each is past its context and its hello (which stays in its pipe for the
executor to read).

A command whose slots they are takes them: its process, a fork of the server, finds them
as early workers (early_workers.provide) and its executor adopts them. They first receive
the command's folder and environment (worker.py's ``adopt``). The server then forgets
them (it reaps them once they end) and starts the next set when the command has ended, so
that no context is made while the command measures.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import multiprocessing.process
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence

from .._option_values import device_ordinals
from . import _early_workers
from ._early_workers import EarlyWorker, EarlyWorkers
from ._worker_server import fork_context, start_worker_process, worker_spec

__all__ = ["AdoptedProcess", "WarmWorkers", "command_slots", "device_ordinals", "forget_server_children"]


def command_slots(params: dict) -> list[int] | None:
    """The GPU slots a ``mneme tune`` command takes, from its parsed options.

    Parameters:
        params: click's ``params`` of the command.

    Returns:
        The GPU of each worker slot; None for a command that starts no GPU workers of its
        own (compile-only, ``--app``) or whose options it will refuse itself.
    """
    from .._gpu_start import worker_slots

    if params.get("compile_only") or params.get("whole_app"):
        return None
    return worker_slots(params.get("devices"), params.get("workers_per_device") or 1)


class _Folder:
    """A compile cache folder made by the server, removed by the command that owns it."""

    def __init__(self, name: str):
        self.name = name

    def cleanup(self) -> None:
        shutil.rmtree(self.name, ignore_errors=True)


class WarmWorkers:
    """One set of warm workers, a GPU per slot (``start`` makes it).

    Parameters:
        slots: the GPU of each worker, in the executor's slot order.
    """

    def __init__(self, slots: Sequence[int]):
        self.slots = list(slots)
        self.cache = tempfile.mkdtemp(prefix="mneme-tune-cache-")
        self.workers: list[EarlyWorker] = []
        self.started = time.monotonic()

    @classmethod
    def start(cls, slots: Sequence[int]) -> WarmWorkers:
        """Fork a worker per slot from this process, which must be allowed to fork them
        (_worker_server.allow_fork_start) and hold no CUDA driver.

        Raises:
            RuntimeError: forking is not allowed here.
        """
        context = fork_context()
        if context is None:
            raise RuntimeError("warm workers fork from a process without the CUDA driver")
        warm = cls(slots)
        try:
            for device in warm.slots:
                process, conn, started = start_worker_process(
                    worker_spec(device, warm.cache), "mneme-warm-worker", context)
                warm.workers.append(EarlyWorker(device, process, conn, started))
        except BaseException:
            warm.stop()
            raise
        return warm

    def sentinels(self) -> list[int]:
        """What becomes readable when one of them ends."""
        return [w.process.sentinel for w in self.workers]

    def ready(self) -> bool:
        """Whether every one has answered (its hello or its failure waits in its pipe)."""
        return all(w.conn.poll() for w in self.workers)

    def failure(self) -> str | None:
        """What a worker that ended said (its ``fatal`` line), or how it ended; None while
        every one runs. (Called once the set is dropped: it reads their pipes.)"""
        for worker in self.workers:
            with contextlib.suppress(EOFError, OSError):
                while worker.conn.poll():
                    message = worker.conn.recv()
                    if message and message[0] == "fatal":
                        return str(message[1])
        for worker in self.workers:
            worker.process.join(1)  # (its sentinel can be readable a moment before it is reaped)
            if worker.process.exitcode is not None:
                return f"a warm worker ended (exit {worker.process.exitcode})"
        return None

    def stop(self) -> None:
        """End them (asked, then killed) and remove their cache folder."""
        for worker in self.workers:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(None)
        for worker in self.workers:
            worker.process.join(5)
            with contextlib.suppress(OSError, ValueError, AttributeError):
                worker.process.kill()
                worker.process.join(1)
            with contextlib.suppress(OSError, ValueError):
                worker.conn.close()
        self.workers = []
        shutil.rmtree(self.cache, ignore_errors=True)

    def handed_over(self) -> list:
        """In the server, once a command's process has them: its own ends of their pipes
        closed (a worker ends when its command's end closes); their processes, to be
        reaped once they end."""
        for worker in self.workers:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.close()
        return [w.process for w in self.workers]

    def take_in_command(self, folder: str, environ: dict[str, str]) -> None:
        """In the command's process (a fork of the server): they become this command's
        early workers, working in its folder and environment."""
        for worker in self.workers:
            worker.conn.send(("adopt", folder, environ))
        early = EarlyWorkers(self.slots, cache=_Folder(self.cache))
        # (the executor's start timeout counts from now)
        early.workers = [EarlyWorker(w.device, AdoptedProcess(w.process), w.conn, time.monotonic())
                         for w in self.workers]
        _early_workers.provide(early)


class AdoptedProcess:
    """A worker process handed to this command by the server that started it: not this
    process's child, so multiprocessing's own object refuses (is_alive, join: "can only
    test a child process") and waitpid cannot see it. It is watched through its sentinel
    (readable once it ended) instead, and its exit status read from /proc while it is a
    zombie: the server reaps it only once this command has ended, so its pid stays its
    own until then.

    Parameters:
        process: the server's multiprocessing object of it, as this process inherited it.
    """

    def __init__(self, process):
        self.pid = process.pid
        self.name = process.name
        self.sentinel = process.sentinel
        self._exitcode: int | None = None

    def _ended(self) -> bool:
        return bool(multiprocessing.connection.wait([self.sentinel], 0))

    @property
    def exitcode(self) -> int | None:
        if self._exitcode is None and self._ended():
            self._exitcode = _zombie_exit_code(self.pid)
        return self._exitcode

    def is_alive(self) -> bool:
        return not self._ended()

    def join(self, timeout: float | None = None) -> None:
        multiprocessing.connection.wait([self.sentinel], timeout)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def _signal(self, signum: int) -> None:
        if not self._ended():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.sentinel)


def _zombie_exit_code(pid: int) -> int:
    """An ended process's exit status (multiprocessing's: -N for signal N), from field 52
    of its /proc/PID/stat (Linux 3.5 and later), readable until it is reaped; 1 where it
    cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return os.waitstatus_to_exitcode(int(fields[49]))
    except (OSError, ValueError, IndexError):
        return 1


def forget_server_children() -> None:
    """In a command's process forked from the server: the server's worker processes are
    not this process's children (multiprocessing, inheriting its list, would stop them at
    this process's exit)."""
    children = getattr(multiprocessing.process, "_children", None)  # (CPython's set of them)
    if children is not None:
        children.clear()

