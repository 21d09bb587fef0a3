"""The command server: a resident process that has imported what ``mneme tune`` needs and
forks a process per command its clients hand it (_server_client.py).

``mneme tune`` spent about 1 s of its fixed start-up importing the replay engine, Optuna,
NumPy and rich before it did anything (0.9-1.3 s on the H200 host). The server pays that
once. It never touches a GPU itself: the processes it forks make their own CUDA
contexts, and may fork their own workers before they do
(mneme.tune.workers._worker_server.allow_fork_start).

    python -m mneme.cli._server SOCKET IDLE_SECONDS [WARM_GPUS]

is what ``mneme server start`` runs, detached (WARM_GPUS: ``--warm-workers``, comma-separated
ordinals; _server_warm.py). Each command's process takes its client's
standard descriptors, folder, environment and arguments, and ends as a command run from a
shell ends; the server reaps it and sends its exit status to the client. The server
refuses commands once mneme's own files changed after it imported them (it then stops:
the next ``mneme server start`` imports the new ones), answers only its own user, and
ends after IDLE_SECONDS without a command (0: never).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import selectors
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from mneme.tune.workers import PRELOAD as WORKER_PRELOAD
from mneme.tune.workers import allow_fork_start, command_slots, forget_server_children

from ._server_client import SERVED_COMMANDS, recv_message, send_message
from ._server_warm import WarmKeeper

__all__ = ["Server", "source_stamp"]

#: what the server imports before it answers (the rest of a command's imports follow)
#: (the workers' modules too: commands fork their workers from it)
PRELOAD = ["mneme.cli.main", "mneme.tune._tune_run", *WORKER_PRELOAD,
           "multiprocessing.popen_fork", "multiprocessing.popen_forkserver"]


def source_stamp() -> tuple[int, int]:
    """(files, newest modification in ns) of mneme's Python modules and native libraries:
    what changes when mneme is edited, rebuilt or upgraded."""
    import mneme

    count = newest = 0
    for root in mneme.__path__:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith((".py", ".so")):
                    with contextlib.suppress(OSError):
                        newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime_ns)
                        count += 1
    return count, newest


def preload() -> None:
    """Import what a tuning command imports, and the ``tune`` command itself (its entry
    point loaded), without touching a GPU."""
    for name in PRELOAD:
        importlib.import_module(name)
    from .main import cli

    with cli.make_context("mneme", ["--help"], resilient_parsing=True) as ctx:
        for name in SERVED_COMMANDS:
            cli.get_command(ctx, name)


@dataclass
class Running:
    """A command's process and its client's connection."""

    pid: int
    conn: socket.socket
    pidfd: int
    workers: list = field(default_factory=list)  # (warm workers it was handed)


class Server:
    """The server on ``path``: ``serve`` until stopped, stale or idle.

    Parameters:
        path: its socket.
        idle_timeout: seconds without a command before it ends (0: never).
        warm_slots: the GPU of each warm worker it keeps for tuning commands (None: none).
    """

    def __init__(self, path: str, idle_timeout: float, warm_slots: list[int] | None = None):
        self.path = path
        self.idle_timeout = idle_timeout
        self.started = time.time()
        self.stamp = source_stamp()
        self.served = 0
        self.running: dict[int, Running] = {}  # pidfd -> process
        self.stopping = False
        self.last_activity = time.monotonic()
        self.inode: int | None = None  # (of the socket it bound: it removes no other)
        self.selector = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.warm = WarmKeeper(warm_slots, self.selector, _log)

    def bind(self) -> None:
        folder = Path(self.path).parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if folder.stat().st_uid != os.getuid():
            raise SystemExit(f"mneme server: {folder} belongs to another user: not listening there")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # (a dead server's: `mneme server start` found none answering)
        self.listener.bind(self.path)
        self.inode = os.stat(self.path).st_ino
        self.listener.listen(16)
        self.selector.register(self.listener, selectors.EVENT_READ, lambda _fd: self._accept())

    def serve(self) -> None:
        """Answer clients until stopped, stale (and every command ended) or idle."""
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        _log(f"{os.getpid()}: listening on {self.path}")
        self.warm.make()
        try:
            while not (self.stopping and not self.running):
                wait = None
                if self.idle_timeout and not self.running:
                    wait = max(0.0, self.last_activity + self.idle_timeout - time.monotonic())
                    if wait == 0.0:
                        _log(f"no command for {self.idle_timeout:g} s: ending")
                        break
                for key, _ in self.selector.select(wait):
                    key.data(key.fd)
        finally:
            self._close_listener()
            self.warm.close()

    def stop(self) -> None:
        """Take no more commands; end once the running ones have."""
        self.stopping = True
        self._close_listener()

    def _close_listener(self) -> None:
        if self.listener.fileno() < 0:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(self.listener)
        self.listener.close()
        with contextlib.suppress(OSError):  # (only our own socket: it may have been replaced)
            if os.stat(self.path).st_ino == self.inode:
                os.unlink(self.path)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        self.last_activity = time.monotonic()
        conn.settimeout(10)
        fds: list[int] = []
        try:
            uid = _peer_uid(conn)
            message, fds = recv_message(conn)
            if uid != os.getuid():
                send_message(conn, {"refused": "the server answers its own user only"})
            elif message is None:
                pass
            elif message.get("op") == "status":
                send_message(conn, self.status())
            elif message.get("op") == "stop":
                send_message(conn, self.status())
                self.stop()
            elif message.get("op") == "run":
                if self._run(conn, message, fds):
                    return  # (the connection stays open until the command's process ends)
            else:
                send_message(conn, {"refused": f"unknown request {message.get('op')!r}"})
        except (OSError, ValueError) as error:
            _log(f"a request failed: {error}")
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        conn.close()

    def status(self) -> dict:
        return {"pid": os.getpid(), "started": self.started, "served": self.served,
                "running": len(self.running), "socket": self.path, "python": sys.executable,
                "stale": source_stamp() != self.stamp, "stopping": self.stopping,
                "warm": self.warm.status()}

    def _run(self, conn: socket.socket, message: dict, fds: list[int]) -> bool:
        if self.stopping:
            send_message(conn, {"refused": "the server is stopping"})
            return False
        if source_stamp() != self.stamp:
            send_message(conn, {"refused": "mneme's files changed after the server imported "
                                "them; it stops (`mneme server start` starts one with the new)"})
            self.stop()
            return False
        if len(fds) != 3 or not message.get("argv") or message["argv"][0] not in SERVED_COMMANDS:
            send_message(conn, {"refused": "not a command the server runs"})
            return False
        warm = self.warm.take(_command_slots(message["argv"]))
        pid = os.fork()
        if pid == 0:  # the command's process: it never returns
            self._close_in_child(conn, warm)
            _run_command(conn, message, fds, warm)
        self.served += 1
        pidfd = os.pidfd_open(pid)
        handed = self.warm.handed_over(warm) if warm is not None else []
        self.running[pidfd] = Running(pid, conn, pidfd, handed)
        self.selector.register(pidfd, selectors.EVENT_READ, self._reap)
        conn.settimeout(None)
        send_message(conn, {"pid": pid})
        return True

    def _reap(self, pidfd: int) -> None:
        running = self.running.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(running.pid, 0)
        with contextlib.suppress(OSError):
            send_message(running.conn, {"exit": os.waitstatus_to_exitcode(status)})
        running.conn.close()
        self.last_activity = time.monotonic()
        self.warm.reap_later(running.workers)
        if not self.running and not self.stopping:
            self.warm.make()  # (the next set: never while a command measures)

    def _close_in_child(self, keep: socket.socket, warm) -> None:
        """The forked command's process keeps its own client's connection, and the warm
        workers it was handed, only."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        forget_server_children()
        if self.warm.warm is not None:  # (the server's own set, not this command's)
            for worker in self.warm.warm.workers:
                worker.conn.close()
        self.selector.close()
        self.listener.close()
        for running in self.running.values():
            running.conn.close()
            with contextlib.suppress(OSError):
                os.close(running.pidfd)


def _peer_uid(conn: socket.socket) -> int:
    import struct

    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _watch_client(conn: socket.socket) -> None:
    """A client that goes away (killed, its terminal closed) interrupts its command, which
    then ends as after Ctrl-C (clocks restored, workers stopped)."""
    try:
        while conn.recv(64):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGINT)


def _command_slots(argv: list[str]) -> list[int] | None:
    """The GPU slots of a tuning command (its options parsed as click will parse them)."""
    from .main import cli

    try:
        with cli.make_context("mneme", list(argv), resilient_parsing=True) as group:
            command = cli.get_command(group, argv[0])
            if command is None:
                return None
            with command.make_context(argv[0], list(argv[1:]), parent=group,
                                      resilient_parsing=True) as ctx:
                return command_slots(ctx.params)
    except Exception:  # noqa: BLE001 - (the command says what is wrong with its options)
        return None


def _log(line: str) -> None:
    print(f"mneme server: {line}", flush=True)


def _run_command(conn: socket.socket, message: dict, fds: list[int], warm=None) -> None:
    """In the forked process: take the client's descriptors, folder, environment and
    arguments (and the warm workers handed to it), run the command, and end (the server
    reports the exit status)."""
    status = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        env = message.get("env") or {}
        for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
            if isinstance(stream, io.TextIOWrapper):  # (Python's own; a replaced one as it is)
                stream.reconfigure(line_buffering=os.isatty(fd),
                                   write_through=bool(env.get("PYTHONUNBUFFERED")))
        os.environ.clear()
        os.environ.update(env)
        try:
            os.chdir(message["cwd"])
        except OSError as error:
            print(f"mneme: error: the command's folder {message['cwd']}: {error.strerror}",
                  file=sys.stderr)
            os._exit(2)
        sys.argv = ["mneme", *message["argv"]]
        if warm is not None:
            warm.take_in_command(os.getcwd(), dict(os.environ))
        threading.Thread(target=_watch_client, args=(conn,), daemon=True,
                         name="mneme-client-watch").start()
        from .main import main

        allow_fork_start()
        try:
            main(started=message.get("started"))
            status = 0
        except SystemExit as end:
            status = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
            if isinstance(end.code, str):
                print(end.code, file=sys.stderr)
        except KeyboardInterrupt:
            status = 130
        except BaseException:  # noqa: BLE001 - printed as Python would, then the exit
            import traceback

            traceback.print_exc()
            status = 1
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        run_exit_handlers = getattr(__import__("atexit"), "_run_exitfuncs", None)
        if run_exit_handlers is not None:
            run_exit_handlers()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)


def main() -> None:
    path, idle, warm = sys.argv[1], float(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else ""
    try:  # (how it waits for its commands' processes: Linux 5.3 and later)
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError) as error:
        raise SystemExit(f"mneme server: this system has no pidfd_open ({error}): a command server "
                         "needs Linux 5.3 or later; commands run in their own processes") from None
    preload()
    allow_fork_start()  # (the warm workers fork from this process, which never loads the driver)
    server = Server(path, idle, [int(d) for d in warm.split(",") if d] or None)
    server.bind()
    server.serve()
    sys.stdout.flush()
    os._exit(0)  # (nothing to save: the interpreter's teardown of every module is skipped)


if __name__ == "__main__":
    main()
