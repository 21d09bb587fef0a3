"""A new SQLite study storage, copied from a template instead of built table by table.

Optuna's RDBStorage makes a new SQLite file by creating its tables one statement at a
time and stamping the file's schema version with alembic (which reads every migration
script): 0.15-0.3 s, and seconds on a slow disk, for each new ``mneme-tune.sqlite3``. The
empty, initialised database is the same every time for one Optuna version, so it is made
once per user and Optuna version (``$XDG_CACHE_HOME/mneme``, else ``~/.cache/mneme``) and a
new storage file is a copy of it. The template is in WAL mode already, as mneme opens every
SQLite storage (study/_study.py): the copy's first connection then switches no journal
mode (a write and a sync, 17 ms a fresh study here); a WAL file is an ordinary SQLite
database, which plain Optuna and sqlite3 open as any other.

Only a path that does not exist yet is written, and never over a file another process
made meanwhile: the copy goes to a temporary file beside the target and is hard-linked
to the target's name, which fails if the name exists. Tuners starting together on one
new path thus all open the same complete file (the first link wins, the others find
it). Where that cannot be done (no hard links on the file system, no writable cache),
Optuna creates the file as before.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sqlite3
import tempfile
from pathlib import Path

import optuna
from mneme.runtime.user_dirs import user_cache_dir

__all__ = ["copy_template", "template_path"]


def template_path() -> Path:
    """The empty study database new SQLite storages are copied from, for the installed
    Optuna (its schema and alembic stamp are that version's).

    Returns:
        Its path in mneme's cache directory (``mneme.runtime.user_dirs``).
    """
    return user_cache_dir() / f"optuna-{optuna.__version__}-empty-wal.sqlite3"


def _make_template(path: Path) -> None:
    """An empty database as Optuna initialises it, in WAL mode, written whole or not at
    all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    os.unlink(temporary)  # (Optuna makes the file; an empty one it would take as made)
    try:
        storage = optuna.storages.RDBStorage(f"sqlite:///{temporary}")
        storage.engine.dispose()  # closed: no journal beside it, the file is complete
        connection = sqlite3.connect(temporary)
        try:  # (persistent in the file; closing the last connection checkpoints it whole
            # and removes the -wal and -shm files, so the file alone is the database)
            connection.execute("PRAGMA journal_mode=WAL")
        finally:
            connection.close()
        os.replace(temporary, path)  # atomic: readers see no template or a whole one
    finally:
        for leftover in (temporary, f"{temporary}-wal", f"{temporary}-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)


def copy_template(target: Path) -> bool:
    """Make ``target`` a copy of the template when it does not exist; True when this call
    made it.

    Parameters:
        target: the SQLite file to make.

    Returns:
        True when this call made it; False when it exists already (made by another
        process meanwhile too) or when no copy could be made: Optuna then creates or
        opens it itself.
    """
    if target.exists():
        return False
    template = template_path()
    # Beside the target (a link stays on one file system), mode 0666 less the umask as
    # SQLite would make it; a random name of its own, so concurrent tuners never share one.
    temporary = target.parent / f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        if not template.is_file():
            _make_template(template)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as out, open(template, "rb") as source:
            shutil.copyfileobj(source, out)
            os.fsync(out.fileno())  # on disk before it has its name, as Optuna's commits are
        os.link(temporary, target)  # fails on an existing target: nothing is clobbered
        return True
    except Exception:  # noqa: BLE001 - FileExistsError (another tuner was first), no hard
        return False  # links, no cache, Optuna failing on the template: Optuna's own way
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
