"""The content store: every distinct chunk once, shared by hard links.

A chunk file ``.../c/<i>`` whose bytes the database already holds (an allocation that did
not change between two launches, the same input of two kernels) is a hard link to one
copy in ``.mneme/chunks/<aa>/<digest>-<chunk length hex>-<zstd level>``; the digest is the
C++ writer's ``chunk_digest`` of the chunk's raw bytes, so both writers name a chunk the
same. Readers (zarr-python, tensorstore, mneme) see ordinary files. A store entry whose
link count is 1 belongs to no array any more: ``collect`` removes it (``mneme clean``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np

from ..files import write_atomic
from . import layout
from .errors import CorruptDataError

STORE = "chunks"

try:  # the digest is the runtime's (the C++ writer's own code)
    from mneme.runtime.digests import chunk_digest as _digest
except ImportError:  # no native runtime: chunks are written plainly, not shared
    _digest = None  # type: ignore[assignment]


def store_dir(root: Path) -> Path:
    return Path(root) / ".mneme" / STORE


def key(piece: np.ndarray, chunk_size: int, level: int) -> str | None:
    """The store name of a chunk's raw (unpadded) bytes, None without the native digest."""
    if _digest is None:
        return None
    return f"{_digest(piece.tobytes())}-{chunk_size:x}-{level}"


def _entry(store: Path, name: str) -> Path:
    return store / name[:2] / name


def link_existing(store: Path, name: str, target: Path) -> bool:
    """Link ``target`` to a stored copy; False when there is none (or links fail)."""
    entry = _entry(store, name)
    try:
        os.link(entry, target)
        return True
    except FileExistsError:
        target.unlink()
        return link_existing(store, name, target)
    except OSError:
        return False


def add(store: Path, name: str, blob: bytes, target: Path) -> bool:
    """Store ``blob`` and link ``target`` to it; False when the store cannot be used (the
    caller writes a plain file). A concurrent writer may store the same bytes first: then
    ``target`` links to its entry, so that the content stays one inode."""
    entry = _entry(store, name)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(entry, blob, exclusive=True)
    except FileExistsError:
        return link_existing(store, name, target)
    except OSError:
        return False
    try:
        os.link(entry, target)
        return True
    except OSError:
        return False


def _stored_files(store: Path):
    """(path, lstat) of every regular file in the store's folders; symlinks are skipped,
    never followed."""
    for sub in store.iterdir():
        if sub.is_symlink() or not sub.is_dir():
            continue
        for entry in sub.iterdir():
            try:
                info = entry.lstat()
            except FileNotFoundError:
                continue
            if stat.S_ISREG(info.st_mode):
                yield entry, info


def entries_by_inode(root: Path) -> dict[tuple[int, int], str]:
    """(device, inode) → store name of every entry of a database's content store."""
    store = store_dir(root)
    if store.is_symlink() or not store.is_dir():
        return {}
    return {(info.st_dev, info.st_ino): entry.name for entry, info in _stored_files(store)
            if not entry.name.startswith(".")}  # "." names: writers' temporaries


def name_matches(name: str, piece: np.ndarray, chunk_size: int) -> bool:
    """Whether a store name (from another database: not trusted) names these raw bytes
    at this chunk size; its level part only says how the entry was compressed."""
    mine = key(piece, chunk_size, 0)
    named, _, level = name.rpartition("-")
    return mine is not None and level.isdigit() and named == mine.rpartition("-")[0]


def collect(root: Path) -> tuple[int, int]:
    """Remove store entries no array links to any more (and stale temporaries); returns
    (files, bytes) removed. Never follows a symlink out of the store."""
    store = store_dir(root)
    removed = freed = 0
    try:
        layout.no_symlinks(Path(root), store / "x")  # never delete through a symlinked .mneme
    except CorruptDataError:
        return 0, 0
    if not store.is_dir():
        return 0, 0
    # Temporaries of writers that died first (entries never start with "."): a writer killed
    # between publishing its temporary as an entry and removing it leaves the entry a second
    # link, which must be gone before the entries' link counts say who is unused.
    for temporaries in (True, False):
        for entry, info in _stored_files(store):
            if entry.name.startswith(".") != temporaries or (not temporaries and info.st_nlink != 1):
                continue
            entry.unlink(missing_ok=True)
            removed += 1
            freed += info.st_size if info.st_nlink == 1 else 0  # a linked one frees nothing
    return removed, freed
