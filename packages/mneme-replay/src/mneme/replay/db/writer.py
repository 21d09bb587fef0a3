"""Writing a recording database.

Crash consistency: every kernel and every instance is built completely in a private
staging folder (``.mneme/staging`` inside the database, so on the same file system) and
then renamed into place. The rename is the commit: readers never see a half-written node,
and a writer killed at any point leaves only staging garbage behind, which readers ignore
and ``mneme check``/``mneme clean --staging`` report and remove. Several processes (MPI
ranks) may write into one database: renames of different nodes do not interfere, a node
that appeared meanwhile is kept (same hash, same content), and occurrence counts are
updated under a file lock.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import os
import shutil
import socket
import uuid
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from . import content_store, layout
from .chunks import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_ZSTD_LEVEL,
    group_metadata,
    load_json,
    stored_bytes,
    write_array,
    write_json,
)
from .errors import (
    CorruptDataError,
    DatabaseError,
    IncompatibleDatabaseError,
    NotADatabaseError,
    NotFoundError,
)
from .hashing import content_checksum, dynamic_hash, is_clustered
from .reader import Database
from .region_layout import region_layout_problem
from .schema import (
    InstanceRecord,
    KernelRecord,
    RecordingInfo,
    Region,
    as_bytes_array,
)


def tool_version() -> str:
    try:
        return version("mneme-replay")
    except PackageNotFoundError:
        return "unknown"


def _now() -> str:
    # (timezone.utc: datetime.UTC is Python 3.11's, and the package supports 3.10)
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class DatabaseWriter:
    """Adds kernels and instances to a recording database (created if needed).

    >>> with DatabaseWriter.create(path, RecordingInfo(vas_base=..., vas_size=...)) as db:
    ...     db.add_kernel(KernelRecord(...))
    ...     db.add_instance(static_hash, InstanceRecord(...))

    Parameters:
        root: the database's folder (made by :meth:`create`).
        info: the recording's information (its root attributes).
        epilogue_format: how epilogues are stored by default: ``diff`` (XOR with the
            prologue), ``bytes``, or ``best`` (whichever is smaller).
        chunk_size: bytes per chunk of the arrays written.
        level: the zstd compression level.

    Raises:
        DatabaseError: an unknown epilogue format or a chunk size that is not positive.
    """

    def __init__(
        self,
        root: Path,
        info: RecordingInfo,
        *,
        epilogue_format: str = "diff",
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        level: int = DEFAULT_ZSTD_LEVEL,
    ):
        if epilogue_format not in layout.EPILOGUE_FORMATS:
            raise DatabaseError(
                f"unknown epilogue format {epilogue_format!r}: use one of "
                + ", ".join(layout.EPILOGUE_FORMATS)
            )
        if chunk_size <= 0:
            raise DatabaseError(f"chunk size must be positive, not {chunk_size}")
        self.root = root
        self.info = info
        self.epilogue_format = epilogue_format
        self.chunk_size = chunk_size
        self.level = level

    # -- creation -----------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike, info: RecordingInfo, **options) -> DatabaseWriter:
        """Open ``path`` for writing: create a database there, or append to the one that is
        there if it recorded the same address range (several processes may do this at
        once: the decision is taken under a lock).

        Parameters:
            path: the database's folder; its parent must exist.
            info: the recording's information; its missing facts (host, tool version,
                creation time) are filled in.
            **options: the constructor's keyword arguments (``epilogue_format``,
                ``chunk_size``, ``level``).

        Returns:
            The writer.

        Raises:
            NotADatabaseError: ``path`` is a file, its parent does not exist, or it is a
                folder holding something other than a mneme database.
            IncompatibleDatabaseError: the database there recorded another address range.
            DatabaseError: the folder cannot be created or written.
        """
        root = Path(path)
        info = _complete(info)
        if root.exists() and not root.is_dir():
            raise NotADatabaseError(f"{root} is a file, not a database directory")
        if not root.parent.is_dir():
            raise NotADatabaseError(f"{root.parent} does not exist: create it first")
        try:
            root.mkdir(exist_ok=True)
        except OSError as exc:
            raise DatabaseError(f"cannot create {root}: {exc.strerror}") from None
        if not os.access(root, os.W_OK | os.X_OK):
            raise DatabaseError(f"{root} is not writable: choose another --record-db-dir")
        meta = root / "zarr.json"
        if not meta.exists() and _foreign(root):
            raise NotADatabaseError(
                f"{root} is not empty and not a mneme database: choose a new or empty directory"
            )
        # Several ranks may create the same database at once: decide under the lock.
        (root / layout.PRIVATE_DIR).mkdir(exist_ok=True)
        with _locked(root):
            if meta.exists():
                existing = Database.open(root).info  # the reader's validation
                if (existing.vas_base, existing.vas_size) != (info.vas_base, info.vas_size):
                    raise IncompatibleDatabaseError(
                        f"{root} holds a recording of address range {existing.vas_base:#x}+"
                        f"{existing.vas_size:#x}, not {info.vas_base:#x}+{info.vas_size:#x}: "
                        "use a new directory"
                    )
                info = existing
            else:
                if _foreign(root):
                    raise NotADatabaseError(
                        f"{root} is not empty and not a mneme database: choose a new or empty directory"
                    )
                layout.staging_root(root).mkdir(parents=True, exist_ok=True)
                kernels = root / layout.KERNELS
                kernels.mkdir(exist_ok=True)
                write_json(kernels / "zarr.json", group_metadata({}))
                # The root metadata comes last: it is what makes the directory a database.
                write_json(meta, group_metadata({layout.ATTRS_KEY: info.to_json()}))
        layout.staging_root(root).mkdir(parents=True, exist_ok=True)
        return cls(root, info, **options)

    def __enter__(self) -> DatabaseWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Nothing is buffered: every add_* call is durable when it returns."""

    # -- kernels ------------------------------------------------------------------------

    def has_kernel(self, static_hash: str) -> bool:
        """Whether a kernel is stored.

        Parameters:
            static_hash: the kernel's static hash.

        Returns:
            True when its node is committed.
        """
        return (layout.kernel_dir(self.root, static_hash) / "zarr.json").exists()

    def add_kernel(self, kernel: KernelRecord) -> bool:
        """Store a kernel (written aside, then committed by a rename: durable when this
        returns).

        Parameters:
            kernel: the kernel.

        Returns:
            False when it was there already (same static hash).
        """
        final = layout.kernel_dir(self.root, kernel.static_hash)
        if (final / "zarr.json").exists():
            return False
        with self._staging() as stage:
            node = stage / kernel.static_hash
            node.mkdir()
            write_array(
                node / layout.IR,
                as_bytes_array(kernel.ir),
                chunk_size=self.chunk_size,
                level=self.level,
                attributes={layout.ATTRS_KEY: {"encoding": kernel.code}},
            )
            (node / layout.INSTANCES).mkdir()
            write_json(node / layout.INSTANCES / "zarr.json", group_metadata({}))
            write_json(node / "zarr.json", group_metadata({layout.ATTRS_KEY: kernel.attributes()}))
            return commit_node(node, final)

    # -- instances ----------------------------------------------------------------------

    def add_instance(
        self, static_hash: str, record: InstanceRecord, *, epilogue_format: str | None = None
    ) -> tuple[str, bool]:
        """Store an instance of a stored kernel; a repeat of a stored instance only
        increments its occurrence count. Durable when this returns.

        Parameters:
            static_hash: the kernel's static hash (:meth:`add_kernel` first).
            record: the instance.
            epilogue_format: how to store its epilogues; None for the writer's default.

        Returns:
            Its dynamic hash, and whether it was newly stored.

        Raises:
            DatabaseError: an unknown epilogue format, or an instance the format does
                not allow (its regions, annotations or launch dimensions).
            NotFoundError: the kernel is not stored.
        """
        fmt = epilogue_format or self.epilogue_format
        if fmt not in layout.EPILOGUE_FORMATS:
            raise DatabaseError(f"unknown epilogue format {fmt!r}")
        if not self.has_kernel(static_hash):
            raise NotFoundError(f"kernel {static_hash} is not in {self.root}: add_kernel first")
        dyn = dynamic_hash(static_hash, record.grid, record.block, record.shared_mem, record.args,
                           record.cluster, record.cooperative)
        final = layout.instance_dir(self.root, static_hash, dyn)
        if (final / "zarr.json").exists():
            self._count_occurrence(final)
            return dyn, False
        regions = self._validate(record)
        with self._staging() as stage:
            node = stage / dyn
            self._write_instance(node, dyn, record, regions, fmt)
            if commit_node(node, final):
                return dyn, True
        self._count_occurrence(final)
        return dyn, False

    def _validate(self, record: InstanceRecord) -> list:
        pro = [r.info() for r in record.prologue]
        epi = [r.info() for r in record.epilogue]
        if sorted(pro, key=lambda r: r.address) != sorted(epi, key=lambda r: r.address):
            raise DatabaseError("prologue and epilogue must hold the same regions")
        pro.sort(key=lambda r: r.address)
        # The reader's rules: an instance it would refuse is never committed.
        problem = region_layout_problem(pro, self.info.vas_base, self.info.vas_size)
        if problem:
            raise DatabaseError(f"instance not written: {problem}")
        names = {r.name for r in pro}
        unknown = set(record.annotations) - names
        if unknown:
            raise DatabaseError(f"annotations name unknown regions: {sorted(unknown)}")
        for a in (*record.grid, *record.block, *(record.cluster or ())):
            if not 1 <= a < 1 << 31:
                raise DatabaseError(f"invalid launch dimension {a}")
        if record.cluster and any(g % c for g, c in zip(record.grid, record.cluster, strict=True)):
            raise DatabaseError(f"grid {list(record.grid)} is not a whole number of clusters "
                                f"{list(record.cluster)}")
        return pro

    def _write_instance(self, node: Path, dyn: str, record: InstanceRecord, regions, fmt: str):
        options: dict[str, Any] = {"chunk_size": self.chunk_size, "level": self.level,
                   "store": content_store.store_dir(self.root)}
        node.mkdir()
        write_array(node / layout.ARGS, as_bytes_array(record.args),
                    attributes={layout.ATTRS_KEY: {"encoding": "bytes"}}, **options)
        by_address_pro = {r.address: r for r in record.prologue}
        by_address_epi = {r.address: r for r in record.epilogue}
        for side in (layout.PROLOGUE, layout.EPILOGUE):
            (node / side).mkdir()
            write_json(node / side / "zarr.json", group_metadata({}))
        encodings, checksums = {}, {}
        for info in regions:
            before = as_bytes_array(by_address_pro[info.address].data)
            after = as_bytes_array(by_address_epi[info.address].data)
            write_array(  # sparse: all-zero chunks are not stored (docs/format.md)
                node / layout.PROLOGUE / info.name,
                before,
                attributes={layout.ATTRS_KEY: {"encoding": "bytes", "sparse": True}},
                skip_zero_chunks=True,
                **options,
            )
            encodings[info.name] = _write_epilogue(node / layout.EPILOGUE / info.name, before, after, fmt, options)
            checksums[info.name] = {
                "prologue_crc32c": content_checksum(before),
                "epilogue_crc32c": content_checksum(after),
            }
        attrs = {
            "kind": "instance",
            "dynamic_hash": dyn,
            "grid": list(record.grid),
            "block": list(record.block),
            "shared_mem": record.shared_mem,
            "stream": record.stream,
            "args_size": len(record.args),
            "occurrences": 1,
            "epilogue_format": fmt,
            "regions": [
                {**info.to_json(), "epilogue_encoding": encodings[info.name], **checksums[info.name]}
                for info in regions
            ],
            "annotations": {k: v.to_json() for k, v in sorted(record.annotations.items())},
            "recorded": _now(),
            "address_space": {"base": self.info.vas_base, "size": self.info.vas_size},
        }
        if is_clustered(record.cluster):
            attrs["cluster"] = list(record.cluster)  # type: ignore[arg-type]
        if record.cooperative:
            attrs["cooperative"] = True
        write_json(node / "zarr.json", group_metadata({layout.ATTRS_KEY: attrs}))

    def _count_occurrence(self, node: Path) -> None:
        with self._lock():
            doc = load_json(node / "zarr.json")
            try:
                doc["attributes"][layout.ATTRS_KEY]["occurrences"] += 1
            except (KeyError, TypeError):
                raise CorruptDataError(f"{node}: malformed instance metadata") from None
            write_json(node / "zarr.json", doc)

    # -- helpers ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _staging(self):
        stage = layout.staging_root(self.root) / f"{os.getpid()}-{uuid.uuid4().hex}"
        stage.mkdir(parents=True)
        try:
            yield stage
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def _lock(self):
        return _locked(self.root)


@contextlib.contextmanager
def _locked(root: Path):
    """The database-wide writer lock (.mneme/lock): creation and occurrence updates."""
    with open(root / layout.PRIVATE_DIR / layout.LOCK_FILE, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _foreign(root: Path) -> bool:
    """Holds something other than a database (being) created by mneme."""
    return any(
        p.name not in (layout.PRIVATE_DIR, layout.KERNELS) and not _is_metadata_temporary(p.name)
        for p in root.iterdir()
    )


def _is_metadata_temporary(name: str) -> bool:
    """``.zarr.json.<pid>.tmp``: another writer is creating this database right now."""
    return name.startswith(".zarr.json.") and name.endswith(".tmp")


def _write_epilogue(path: Path, before: np.ndarray, after: np.ndarray, fmt: str, options) -> str:
    """Write one epilogue region in ``fmt``; returns the encoding used (``bytes`` or
    ``xor-prologue``). ``best`` writes both and keeps the smaller."""

    def as_bytes(target: Path) -> int:
        return write_array(target, after, attributes={layout.ATTRS_KEY: {"encoding": "bytes"}}, **options)

    def as_delta(target: Path) -> int:
        return write_array(
            target,
            after,
            xor_with=before,
            attributes={layout.ATTRS_KEY: {"encoding": "xor-prologue"}},
            skip_zero_chunks=True,
            **options,
        )

    if fmt == "bytes":
        as_bytes(path)
        return "bytes"
    if fmt == "diff":
        as_delta(path)
        return "xor-prologue"
    alternative = path.with_name(path.name + ".bytes")
    delta_size, bytes_size = as_delta(path), as_bytes(alternative)
    if bytes_size < delta_size:
        shutil.rmtree(path)
        alternative.rename(path)
        return "bytes"
    shutil.rmtree(alternative)
    return "xor-prologue"


def commit_node(node: Path, final: Path) -> bool:
    """Rename a finished node into place; False if another writer got there first."""
    try:
        os.rename(node, final)
        return True
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise


def _complete(info: RecordingInfo) -> RecordingInfo:
    from dataclasses import replace

    return replace(
        info,
        # A database made from another one's information (copy) keeps its format; a
        # format-1 database holds no content checksums, so it cannot claim format 2.
        format_version=info.format_version or layout.FORMAT_VERSION,
        tool_version=info.tool_version or tool_version(),
        created=info.created or _now(),
        host=info.host or socket.gethostname(),
    )


def region(kind: str, address: int, data, symbol: str | None = None) -> Region:
    """Shorthand for building writer input."""
    return Region(kind, address, data, symbol)


__all__ = ["DatabaseWriter", "region", "stored_bytes", "tool_version"]
