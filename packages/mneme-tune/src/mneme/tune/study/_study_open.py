"""The study opened on a thread of its own, beside the workers' start and the baseline.

Opening the study is the tuner's own Python work: importing SQLAlchemy and Optuna's RDB
models (0.3-1 s), reading or creating the study. The workers' start and the baseline are
mostly waiting on other processes (their imports, CUDA contexts, the GPU). ``StudyOpening``
runs the opening on a thread begun with the tuner; ``Tuner.run`` joins it when it first
needs the study, after submitting the baseline. That is done only for a study that
``fresh_study`` finds surely not in the storage: it cannot hold a stored baseline (a
resumed study's is never measured again), and its opening can hardly fail (a local file in
a writable folder), so errors still come before the run as a rule.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from ._study import default_storage_url, journal_file, sqlite_file

__all__ = ["StudyOpening", "fresh_study"]

T = TypeVar("T")


def _file_of(url: str | None, default_dir: Path | None) -> tuple[str, Path | None]:
    """(kind, file) of a storage URL as open_storage reads it (None: the default):
    ``sqlite`` or ``journal`` with its file (None: in memory), or ``other`` (a server)."""
    if url is None:
        url = default_storage_url(default_dir)
    if (journal := journal_file(url)) is not None:
        return "journal", journal
    if url.startswith("sqlite:///"):
        return "sqlite", sqlite_file(url)
    return "other", None


def fresh_study(url: str | None, default_dir: Path | None, name: str) -> bool:
    """Whether the storage is a local one that surely holds no study ``name`` yet (so no
    baseline of it either) and can be written.

    Parameters:
        url: the storage URL (``--storage``; None: the default, default_storage_url).
        default_dir: the default file's folder; None for the current one.
        name: the study's name.

    Returns:
        True for a SQLite or journal file not made yet in a writable folder, an in-memory
        SQLite database, or a writable SQLite file whose studies lack the name (read with
        the sqlite3 module, not SQLAlchemy); False when unsure (a server, a journal file
        that exists, a file or folder that cannot be read or written).
    """
    kind, file = _file_of(url, default_dir)
    if kind == "other":
        return False
    if file is None:
        return True  # (sqlite:///:memory:: a new database each time)
    try:
        if not file.exists():
            return file.parent.is_dir() and os.access(file.parent, os.W_OK | os.X_OK)
        if kind != "sqlite" or not os.access(file, os.R_OK | os.W_OK):
            return False
        import sqlite3

        uri = file.absolute().as_uri() + "?mode=ro"
        connection = sqlite3.connect(uri, uri=True, timeout=1.0)
        try:
            row = connection.execute("SELECT 1 FROM studies WHERE study_name = ?",
                                     (name,)).fetchone()
        finally:
            connection.close()
    except Exception:  # noqa: BLE001 - no table, locked, not a database: unsure
        return False
    return row is None


class StudyOpening(Generic[T]):
    """``open()`` run on a thread of its own; ``result()`` joins it.

    Parameters:
        open: opens the storage and the study (everything it reads given to it now, on
            the caller's thread).
    """

    def __init__(self, open: Callable[[], T]):  # noqa: A002 - what it does
        self._open = open
        #: seconds ``open()`` took on its thread (once it returned or raised)
        self.seconds = 0.0
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mneme-study-open", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        began = time.monotonic()
        try:
            self._value = self._open()
        except BaseException as error:  # noqa: BLE001 - raised again on the caller's thread
            self._error = error
        self.seconds = time.monotonic() - began

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> T:
        """What ``open()`` returned, once it has; what it raised is raised here
        (StudyError: the storage cannot be opened, or holds another study of the name)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
