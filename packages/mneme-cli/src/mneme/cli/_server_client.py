"""The command server's client side: where a server listens, how a message is framed, and
handing a command to it (standard library only: it runs before anything else is imported).

``mneme server start`` leaves a process (_server.py) that has imported everything
``mneme tune`` needs and touches no GPU. ``mneme tune`` then sends it its arguments,
working folder, environment and its standard input, output and error (the descriptors
themselves, SCM_RIGHTS); the server forks a process that runs the command on them, and
answers with that process's exit status. The command's output goes straight to this
process's terminal or pipe; Ctrl-C and other signals sent here are passed on.

A server serves one Python environment with the settings it was started with: its socket
is named from the interpreter and the environment variables read at import time
(``MNEME_*``, ``CUDA_*``, ``PYTHON*``, ``LD_*``), so a command run with other ones finds
none and runs in its own process, as it does where no server runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time

__all__ = ["SERVED_COMMANDS", "hand_off", "process_started", "recv_message", "request",
           "send_message", "socket_path"]

#: the commands a server runs (their start-up is what it saves)
SERVED_COMMANDS = frozenset({"tune"})
#: set to 0 (or off, no): never hand a command to a server
SWITCH = "MNEME_SERVER"
#: environment variables whose values modules may read as they are imported
IMPORT_TIME_PREFIXES = ("MNEME_", "CUDA_", "PYTHON", "LD_")
_HEADER = struct.Struct("!I")
_SOCKET_PATH_MAX = 107  # (sockaddr_un's sun_path, less its terminating zero)
_MAX_MESSAGE = 16 << 20
#: the signals a client passes on to the command's process
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def process_started() -> float | None:
    """When this process started, as a time.monotonic() value (Linux: /proc/self/stat's
    start time, to the kernel's clock tick); None where that cannot be read."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        ticks = int(fields[19])  # field 22 of proc_pid_stat(5): clock ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.monotonic() - age if 0.0 <= age < 3600.0 else None


def server_key(environ=None) -> str:
    """What a server must share with a command it runs: the interpreter, its environment
    (sys.prefix) and the values of the variables read at import time."""
    environ = os.environ if environ is None else environ
    settings = sorted((k, v) for k, v in environ.items()
                      if k.startswith(IMPORT_TIME_PREFIXES) and k != SWITCH)
    text = json.dumps([sys.executable, sys.prefix, sys.version, settings])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def socket_path(environ=None) -> str:
    """The socket of this environment's server: in $XDG_RUNTIME_DIR/mneme, else (or where
    that path is too long for a socket) in /tmp/mneme-<uid>, a folder only its user may
    enter."""
    environ = os.environ if environ is None else environ
    name = f"server-{server_key(environ)}.sock"
    runtime = environ.get("XDG_RUNTIME_DIR")
    path = os.path.join(runtime, "mneme", name) if runtime else ""
    if not path or len(path.encode()) > _SOCKET_PATH_MAX:
        path = os.path.join(f"/tmp/mneme-{os.getuid()}", name)
    return path


def send_message(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    framed = _HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [framed], fds)
    else:
        sock.sendall(framed)


def _recv_exact(sock: socket.socket, size: int, fds: list[int]) -> bytes | None:
    data = b""
    while len(data) < size:
        if not data and not fds:  # (descriptors come with the first bytes of a message)
            chunk, got, _, _ = socket.recv_fds(sock, size - len(data), 8)
            fds.extend(got)
        else:
            chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def recv_message(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """The next message and the descriptors sent with it; (None, []) at the end of the
    connection."""
    fds: list[int] = []
    header = _recv_exact(sock, _HEADER.size, fds)
    if header is None:
        return None, fds
    (size,) = _HEADER.unpack(header)
    if size > _MAX_MESSAGE:
        raise OSError(f"a message of {size} bytes: not a mneme server's")
    data = _recv_exact(sock, size, fds)
    return (None if data is None else json.loads(data)), fds


def request(message: dict, path: str | None = None, timeout: float = 10.0) -> dict | None:
    """One request to the server (status, stop) and its answer; None when no server
    answers at ``path``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path or socket_path())
        send_message(sock, message)
        answer, _ = recv_message(sock)
        return answer
    except OSError:
        return None
    finally:
        sock.close()


def _std_fds() -> list[int]:
    """Standard input, output and error as this process has them (/dev/null for one it
    lacks)."""
    fds = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, os.O_RDWR))
    return fds


def _say(line: str) -> None:
    print(f"mneme: {line}", file=sys.stderr, flush=True)


def hand_off(argv: list[str]) -> int | None:
    """Run ``mneme ARGV`` on this environment's server, if one runs: its exit status (a
    signal's as 128 + its number), or None when it is to run here (no server, switched off
    with MNEME_SERVER=0, a command the server does not run, or a server that refused it,
    which is said in one line)."""
    if not argv or argv[0] not in SERVED_COMMANDS:
        return None
    if os.environ.get(SWITCH, "").strip().lower() in ("0", "off", "no", "false"):
        return None
    path = socket_path()
    if not os.path.exists(path):
        return None
    started = process_started() or time.monotonic()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as error:
        _say(f"the command server's socket {path} does not answer ({error.strerror}): "
             "running here (`mneme server start` starts a new server)")
        return None
    with sock:
        send_message(sock, {"op": "run", "argv": argv, "cwd": os.getcwd(),
                            "env": dict(os.environ), "started": started}, _std_fds())
        answer, _ = recv_message(sock)
        if answer is None or "pid" not in answer:
            why = (answer or {}).get("refused", "it closed the connection")
            _say(f"the command server did not run this command ({why}): running here")
            return None
        pid = answer["pid"]

        def forward(signum, _frame):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

        for signum in FORWARDED:
            signal.signal(signum, forward)
        answer, _ = recv_message(sock)
    if answer is None or "exit" not in answer:
        _say(f"the command's process ({pid}) on the command server ended without its exit "
             "status (the server was stopped or killed)")
        return 1
    status = answer["exit"]
    return 128 - status if status < 0 else status
