"""Files the replay side and the commands above it write: whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, mode: int | None = 0o644, *, exclusive: bool = False) -> None:
    """Write ``data`` through a temporary file in the same folder and a rename: a reader
    never sees half a file, and a failure leaves no temporary behind. ``mode`` (default
    readable by all, as database files are) or None to keep the temporary's private mode.
    ``exclusive``: publish with a hard link instead, so that of writers racing to create
    ``path`` the first wins and the others get FileExistsError (a rename would replace
    the winner's file under the links already made to it)."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        if mode is not None:
            os.chmod(temporary, mode)
        if exclusive:
            os.link(temporary, path)
            os.unlink(temporary)
        else:
            os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def writable_directory(path: Path, purpose: str, error: type[Exception]) -> None:
    """Create ``path`` if needed and check it can be written, before any long work;
    otherwise one line, ``error("cannot <purpose> <path>: <why>")``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as failure:
        raise error(f"cannot {purpose} {path}: {failure.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise error(f"cannot {purpose} {path}: not writable")
