"""Finding the instance to replay from what a user typed (-rdb, -rid)."""

from __future__ import annotations

import os
from pathlib import Path

from ..db import CorruptDataError, Database, DatabaseError
from .errors import InstanceNotFoundError


def open_database(spec: str | os.PathLike) -> tuple[Database, str | None]:
    """Open the database a command line names, with the kernel it names in it.

    Parameters:
        spec: ``DB`` or ``DB/KERNEL`` (also ``DB/kernels/KERNEL``, ``DB:KERNEL``);
            KERNEL is a static hash (or prefix) or a kernel name.

    Returns:
        The database and the kernel key (None when ``spec`` names none).

    Raises:
        DatabaseError: no database there (the error of opening ``spec`` itself).
    """
    text = str(spec)
    try:
        return Database.open(Path(text)), None
    except DatabaseError as first_error:
        candidates: list[tuple[Path, str]] = []
        path = Path(text)
        if ":" in text:
            where, _, kernel = text.rpartition(":")
            candidates.append((Path(where), kernel))
        if path.parent != path:
            candidates.append((path.parent, path.name))
            if path.parent.name == "kernels":
                candidates.append((path.parent.parent, path.name))
        for root, kernel in candidates:
            if kernel and (root / "zarr.json").is_file():
                try:
                    return Database.open(root), kernel
                except DatabaseError:
                    continue
        raise first_error from None


def instance_ids(db: Database) -> list[str]:
    return [i.id for i in db.instances()]


def select_instance(db: Database, kernel: str | None = None, record_id: str | None = None):
    """The instance a command line names.

    Parameters:
        db: the database.
        kernel: a kernel key, to look the instance up in; None for the whole database.
        record_id: ``KERNEL/INSTANCE``, or an instance hash or prefix; None when the
            kernel (or the database) holds exactly one instance.

    Returns:
        The instance.

    Raises:
        CorruptDataError: its metadata is broken (refused, saying why, whatever the
            replay would read of it).
        InstanceNotFoundError: no such instance, or several (the message lists them).
        NotFoundError: ``kernel`` or a ``KERNEL/INSTANCE`` names nothing recorded.
    """
    instance = _find_instance(db, kernel, record_id)
    problem = instance.problem()
    if problem:
        raise CorruptDataError(f"{problem} (mneme check {db.root} lists every problem)")
    return instance


def _find_instance(db: Database, kernel: str | None, record_id: str | None):
    if record_id and "/" in record_id:
        return db.instance(record_id)
    if kernel is not None:
        k = db.kernel(kernel)
        if record_id:
            return k.instance(record_id)
        return db.instance(k.static_hash)
    instances = list(db.instances())
    if record_id:
        matches = [i for i in instances if i.dynamic_hash == record_id] or [
            i for i in instances if i.dynamic_hash.startswith(record_id)
        ]
        if len(matches) == 1:
            return matches[0]
        if not matches and record_id in db.kernel_hashes():
            return db.instance(record_id)  # a kernel's static hash: its only instance
        listed = ", ".join(i.id for i in instances) or "none"
        what = "no" if not matches else f"{len(matches)} instances match"
        raise InstanceNotFoundError(
            f"{what} record id {record_id!r} in {db.root}; recorded: {listed}"
        )
    if len(instances) == 1:
        return instances[0]
    listed = ", ".join(i.id for i in instances) or "none"
    raise InstanceNotFoundError(
        f"{db.root} holds {len(instances)} instances; choose one with -rid: {listed}"
    )
