"""One lock shared by every tuner of a study, whatever the study's storage.

Tuners that share a budget claim trials against it: read what the others hold and have
finished, then publish what this tuner takes. Unless the read and the write are one
atomic step, tuners starting together read the same counts and take the same trials
(8 tuners on an empty PostgreSQL database ran 70 trials for a budget of 40). The lock makes
the claim atomic; it is held for one pull and one attribute write, never across a trial.

Each kind of storage gets the lock its tuners can all see, freed when a holder dies:

* PostgreSQL: a session advisory lock keyed by the study name, on a connection of its own
  (the server frees it with the connection);
* MySQL: ``GET_LOCK`` on a name made from the study's, likewise;
* SQLite (one machine by nature): ``flock`` on a file beside the database;
* a journal file (one machine, or machines sharing a file system): Optuna's own open lock
  (a lock file created exclusively, which NFS honours), taken over after a grace period
  from a holder that died;
* an in-memory storage (one process): a thread lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from pathlib import Path
from typing import Any

#: seconds after which a journal lock left by a dead tuner is taken over
JOURNAL_LOCK_GRACE_SECONDS = 30


class StudyLock:
    """A context manager around ``acquire``/``release``; ``close`` frees what it holds."""

    def __enter__(self) -> StudyLock:
        self.acquire()
        return self

    def __exit__(self, *_exc) -> None:
        self.release()

    def acquire(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Free any connection or file the lock keeps between uses."""


class _ThreadLock(StudyLock):
    def __init__(self) -> None:
        self._lock = threading.Lock()

    def acquire(self) -> None:
        self._lock.acquire()

    def release(self) -> None:
        self._lock.release()


class _FileLock(StudyLock):
    """flock on a file: per open file, so two tuners in one process exclude each other too."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _JournalLock(StudyLock):
    def __init__(self, path: Path) -> None:
        from optuna.storages.journal import JournalFileOpenLock

        self._lock = JournalFileOpenLock(str(path), grace_period=JOURNAL_LOCK_GRACE_SECONDS)

    def acquire(self) -> None:
        self._lock.acquire()

    def release(self) -> None:
        self._lock.release()


class _ServerLock(StudyLock):
    """A database server's named lock, held by a connection kept for it alone."""

    def __init__(self, engine, study_name: str) -> None:
        self._engine = engine
        self._connection: Any = None  # sqlalchemy's Connection, made on first use
        digest = hashlib.blake2b(f"mneme.budget:{study_name}".encode(), digest_size=8).digest()
        self._key = int.from_bytes(digest, "big", signed=True)  # PostgreSQL: a bigint
        self._name = f"mneme-{digest.hex()}"  # MySQL: at most 64 characters
        if engine.dialect.name == "postgresql":
            self._take, self._give = "SELECT pg_advisory_lock(:key)", "SELECT pg_advisory_unlock(:key)"
        else:
            self._take, self._give = "SELECT GET_LOCK(:name, -1)", "SELECT RELEASE_LOCK(:name)"

    def _run(self, statement: str) -> None:
        from sqlalchemy import text

        if self._connection is None:
            # Autocommit: the lock belongs to the session, so no transaction stays open.
            self._connection = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        self._connection.execute(text(statement), {"key": self._key, "name": self._name})

    def acquire(self) -> None:
        self._run(self._take)

    def release(self) -> None:
        self._run(self._give)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def study_lock(storage, study_name: str) -> StudyLock:
    """The lock the tuners of a study share (a server lock for PostgreSQL and MySQL, a
    file lock for SQLite and journal files, a thread lock in memory).

    Parameters:
        storage: the Optuna storage.
        study_name: the study's name.

    Returns:
        The lock.
    """
    backend = getattr(storage, "_backend", storage)  # Optuna wraps RDB storages in a cache
    engine = getattr(backend, "engine", None)
    if engine is not None:
        if engine.dialect.name in ("postgresql", "mysql", "mariadb"):
            return _ServerLock(engine, study_name)
        database = engine.url.database
        if engine.dialect.name == "sqlite" and database and database != ":memory:":
            return _FileLock(Path(f"{database}.mneme-lock"))
        return _ThreadLock()
    path = getattr(backend, "_file_path", None)  # JournalStorage -> JournalFileBackend
    if path is not None:
        return _JournalLock(Path(f"{path}.mneme-budget"))
    return _ThreadLock()
