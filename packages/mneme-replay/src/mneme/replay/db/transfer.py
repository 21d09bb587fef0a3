"""``clean``, ``copy`` and ``move`` of whole kernels between databases.

Each step keeps the destination consistent: a kernel (or instance) is copied into the
destination's staging area and renamed into place, and is removed from a database by
renaming it into the staging area first, so no reader ever sees half of one.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from . import layout
from .errors import IncompatibleDatabaseError
from .reader import Database, Kernel
from .writer import DatabaseWriter, _commit


def _scratch(root: Path) -> Path:
    path = layout.staging_root(root) / f"{os.getpid()}-{uuid.uuid4().hex}"
    path.mkdir(parents=True)
    return path


def remove_kernel(kernel: Kernel) -> None:
    """Delete a kernel and all its instances (atomically invisible, then deleted)."""
    scratch = _scratch(kernel.db.root)
    os.rename(kernel.path, scratch / kernel.static_hash)
    shutil.rmtree(scratch)


def remove_staging(db: Database) -> int:
    """Delete what interrupted writers left in the staging area; returns how many."""
    root = layout.staging_root(db.root)
    names = os.listdir(root) if root.is_dir() else []
    for name in names:
        shutil.rmtree(root / name, ignore_errors=True)
    return len(names)


def copy_kernel(kernel: Kernel, destination: DatabaseWriter) -> int:
    """Copy a kernel with every instance the destination lacks; returns instances copied."""
    dst_root = destination.root
    target = layout.kernel_dir(dst_root, kernel.static_hash)
    copied = 0
    if not (target / "zarr.json").exists():
        scratch = _scratch(dst_root)
        try:
            staged = scratch / kernel.static_hash
            shutil.copytree(kernel.path, staged)
            if _commit(staged, target):
                return len(kernel.instance_hashes())
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    # The kernel is already there: add the instances it lacks, one atomic rename each.
    for instance in kernel.instances():
        final = layout.instance_dir(dst_root, kernel.static_hash, instance.dynamic_hash)
        if (final / "zarr.json").exists():
            continue
        scratch = _scratch(dst_root)
        try:
            staged = scratch / instance.dynamic_hash
            shutil.copytree(instance.path, staged)
            copied += _commit(staged, final)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return copied


def open_destination(source: Database, path: Path) -> DatabaseWriter:
    """The destination of a copy: created with the source's recording information, or an
    existing database of the same address range."""
    try:
        return DatabaseWriter.create(path, source.info)
    except IncompatibleDatabaseError as exc:
        raise IncompatibleDatabaseError(
            f"cannot copy: {exc} (instances are only valid at the addresses they were recorded at)"
        ) from None
