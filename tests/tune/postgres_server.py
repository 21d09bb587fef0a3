"""A throw-away PostgreSQL server for the tests: Debian's ``postgresql`` package (CI
installs it, scripts/setup.sh), a cluster made with initdb in a folder of its own, run by
pg_ctl as an unprivileged user (the ``postgres`` user when the tests run as root)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin folder (None: not installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(found[-1]).parent if found else None


def why_not() -> str | None:
    """Why no server can be started here (None: one can)."""
    if binaries() is None:
        return "PostgreSQL is not installed (apt-get install postgresql; scripts/setup.sh does)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install 'psycopg[binary]')"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser to start PostgreSQL as an unprivileged user"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server(database: str = "mneme") -> Iterator[str]:
    """Start a server with one empty database; yield its SQLAlchemy URL; stop and delete it."""
    bin_dir = binaries()
    assert bin_dir is not None, why_not()
    folder = Path(tempfile.mkdtemp(prefix="mneme-pg-"))  # not under root's private tmp
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(folder, "postgres")
    data, port = folder / "data", _free_port()

    def run(*command: str) -> None:
        subprocess.run([*as_user, *command], check=True, capture_output=True, text=True,
                       timeout=60)

    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
            "--no-sync")
        # fsync off: a test's cluster is thrown away; many connections: 8 tuners and more
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(folder / "log"), "-o",
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200", "start")
        try:
            run(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                database)
            yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/{database}"
        finally:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
