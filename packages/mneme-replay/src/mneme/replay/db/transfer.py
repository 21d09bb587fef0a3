"""``clean``, ``copy`` and ``move`` of whole kernels between databases.

Each step keeps the destination consistent: a kernel (or instance) is copied into the
destination's staging area and renamed into place, and is removed from a database by
renaming it into the staging area first, so no reader ever sees half of one.

Nothing is trusted: a source node is checked before it is copied, only regular files are
copied (a symbolic link inside a database is refused, never followed), every copied node
is compared with its source byte for byte after the commit, and an existing destination
node is compared the same way: if it differs or is corrupt, the transfer is refused (or,
with ``force``, the destination node is replaced). ``move`` deletes a source kernel only
after every one of its instances checked out at the destination.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import uuid
from collections.abc import Set
from pathlib import Path

import numpy as np

from . import content_store, layout
from .chunks import ArrayInfo, read_array_info, read_range, stored_chunk_indices
from .errors import CorruptDataError, DatabaseError, IncompatibleDatabaseError, TransferError
from .instance import Instance
from .integrity import Problem, check_instance, check_kernel_node
from .reader import Database, Kernel
from .writer import DatabaseWriter, commit_node

#: Bytes compared at a time when checking a copy against its source.
_WINDOW = 64 << 20


def _scratch(root: Path) -> Path:
    staging = layout.staging_root(root)
    layout.no_symlinks(root, staging / "x")
    path = staging / f"{os.getpid()}-{uuid.uuid4().hex}"
    path.mkdir(parents=True)
    return path


def _safe_node(db_root: Path, path: Path) -> None:
    """The node and every folder above it inside the database are real directories."""
    layout.no_symlinks(db_root, path)
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        raise CorruptDataError(f"{path} is not a directory")


def _discard(db_root: Path, node: Path) -> None:
    """Delete a kernel or instance node: atomically invisible, then deleted."""
    _safe_node(db_root, node)
    scratch = _scratch(db_root)
    os.rename(node, scratch / node.name)
    shutil.rmtree(scratch)


def remove_kernel(kernel: Kernel) -> None:
    """Delete a kernel and all its instances (atomically invisible, then deleted)."""
    _discard(kernel.db.root, kernel.path)


def _remove_instance(instance: Instance) -> None:
    _discard(instance.kernel.db.root, instance.path)


def remove_staging(db: Database) -> int:
    """Delete what interrupted writers left in the staging area; returns how many."""
    root = layout.staging_root(db.root)
    layout.no_symlinks(db.root, root / "x")  # never delete through a symlinked .mneme/staging
    names = os.listdir(root) if root.is_dir() else []
    for name in names:
        path = root / name
        if path.is_symlink() or not path.is_dir():
            path.unlink()  # the link itself, never its target
        else:
            shutil.rmtree(path)
    return len(names)


class SharedChunks:
    """Chunk files the source shares through its content store stay shared at the
    destination: each goes into the destination's store once (under the source's name,
    checked against the bytes first: the source is not trusted) and every copy links to
    it. Without this a copy of eight instances sharing an input would take eight times
    its disk space."""

    def __init__(self, source: Database, destination_root: Path):
        self.source_root = source.root
        self.store = content_store.store_dir(destination_root)
        self._names: dict[tuple[int, int], str] | None = None
        self._checked: dict[tuple[int, int], str | None] = {}  # source inode → name, or None
        self._arrays: dict[Path, ArrayInfo] = {}
        self._limit = source.info.vas_size

    def copy(self, source: Path, target: Path, info: os.stat_result) -> bool:
        """Link ``target`` to the destination's store entry for ``source`` (a chunk file
        ``.../<array>/c/<index>``); False when it is not a shared chunk (copy it plainly)."""
        if info.st_nlink < 2 or source.parent.name != "c" or not source.name.isdigit():
            return False
        inode = (info.st_dev, info.st_ino)
        if inode not in self._checked:
            self._checked[inode] = self._name_of(source, inode)
        name = self._checked[inode]
        if name is None:
            return False
        if content_store.link_existing(self.store, name, target):
            return True
        return content_store.add(self.store, name, source.read_bytes(), target)

    def _name_of(self, source: Path, inode: tuple[int, int]) -> str | None:
        if self._names is None:
            self._names = content_store.entries_by_inode(self.source_root)
        name = self._names.get(inode)
        if name is None:
            return None
        array = source.parent.parent
        try:
            if array not in self._arrays:
                self._arrays[array] = read_array_info(array, self._limit)
            array_info = self._arrays[array]
            piece = read_range(array_info, *array_info.chunk_bounds(int(source.name)))
        except (DatabaseError, OSError, ValueError):
            return None  # damaged: the copy's check reports it
        return name if content_store.name_matches(name, piece, array_info.chunk_size) else None


def _copy_tree(source: Path, target: Path, skip: Set[str] = frozenset(),
               shared: SharedChunks | None = None) -> None:
    """Copy a node's regular files and folders; a symbolic link (or any other special
    file) inside the source is refused, never followed. ``shared``: chunk files the
    source shares stay shared at the destination."""
    target.mkdir()
    with os.scandir(source) as entries:
        for entry in entries:
            if entry.name in skip:
                continue
            if entry.is_symlink():
                raise CorruptDataError(f"{entry.path} is a symbolic link (not copied; run mneme check)")
            if entry.is_dir(follow_symlinks=False):
                _copy_tree(Path(entry.path), target / entry.name, shared=shared)
            elif entry.is_file(follow_symlinks=False):
                if shared is None or not shared.copy(Path(entry.path), target / entry.name,
                                                     entry.stat(follow_symlinks=False)):
                    shutil.copyfile(entry.path, target / entry.name, follow_symlinks=False)
            else:
                raise CorruptDataError(f"{entry.path} is not a regular file (not copied)")


def _instance_problems(instance: Instance, sums: dict | None = None) -> list[str]:
    problems: list[Problem] = []
    check_instance(problems, instance, sums)
    return [str(p) for p in problems if p.fatal]


def _kernel_problems(kernel: Kernel) -> list[str]:
    problems: list[Problem] = []
    check_kernel_node(problems, kernel)
    return [str(p) for p in problems if p.fatal]


def kernel_difference(a: Kernel, b: Kernel) -> str | None:
    """Why two kernels of the same static hash differ (None when they do not)."""
    keys = ("name", "demangled_name", "params", "globals", "launch_bounds", "ir_size")
    for key in keys:
        if a._attrs.get(key) != b._attrs.get(key):
            return f"kernel metadata {key!r} differs"
    if a.ir() != b.ir():
        return "the IR differs"
    return None


def instance_difference(a: Instance, b: Instance) -> str | None:
    """Why two instances of the same dynamic hash differ, comparing what a reader gets
    byte for byte (None when they do not; occurrence counts and times may differ)."""
    for key in ("grid", "block", "shared_mem", "args", "annotations"):
        if getattr(a, key) != getattr(b, key):
            return f"{key} differ"
    shape = [(r.name, r.kind, r.size, r.symbol) for r in a.regions]
    if shape != [(r.name, r.kind, r.size, r.symbol) for r in b.regions]:
        return "the regions differ"
    for region in a.regions:
        sides = ["prologue", "epilogue"]
        pro_a, pro_b = a.stored_array("prologue", region.name)[0], b.stored_array("prologue", region.name)[0]
        same = _same_stored(pro_a, pro_b)
        if same is False:
            return f"region {region.name} prologue bytes differ"
        if same:  # equal prologues: equal XOR deltas give equal epilogues
            sides.remove("prologue")
            (epi_a, enc_a), (epi_b, enc_b) = (a.stored_array("epilogue", region.name),
                                              b.stored_array("epilogue", region.name))
            if enc_a == enc_b == "xor-prologue":
                if not _same_stored(epi_a, epi_b):
                    return f"region {region.name} epilogue bytes differ"
                continue
        for lo in range(0, region.size, _WINDOW):
            hi = min(lo + _WINDOW, region.size)
            for side in sides:
                mine = getattr(a, side)(region.name, lo, hi)
                theirs = getattr(b, side)(region.name, lo, hi)
                if not np.array_equal(mine, theirs):
                    return f"region {region.name} {side} bytes differ"
    return None


def _same_stored(a: ArrayInfo, b: ArrayInfo) -> bool | None:
    """Whether two arrays whose absent chunks read as zeros (sparse prologues, XOR deltas)
    of the same grid hold the same bytes, reading only the chunks either stores: a sparse
    region of 100 GB costs what is stored. None when the arrays are not both such."""
    if not (a.absent_is_zero and b.absent_is_zero and a.size == b.size and a.chunk_size == b.chunk_size):
        return None
    for index in sorted(set(stored_chunk_indices(a)) | set(stored_chunk_indices(b))):
        lo, hi = a.chunk_bounds(index)
        if not np.array_equal(read_range(a, lo, hi), read_range(b, lo, hi)):
            return False
    return True


def _refuse_or_replace(what: str, why: str, force: bool) -> None:
    if not force:
        raise TransferError(
            f"the destination already holds {what}, and it {why}: "
            "run mneme check on it, or pass --force to replace it"
        )


def copy_kernel(kernel: Kernel, destination: DatabaseWriter, *, force: bool = False) -> int:
    """Copy a kernel with every instance the destination lacks; returns instances copied.

    Every node copied and every node already at the destination is compared with the
    source; a difference raises ``TransferError`` (``force``: the destination node is
    replaced). When this returns, every instance of ``kernel`` is at the destination and
    identical to the source. When it raises, what this call committed is removed again
    (the kernel node if it created it, else its new instances) and the destination's
    content store is collected: the destination holds whole kernels only. A full disk
    raises ``TransferError`` naming the destination."""
    problems = _kernel_problems(kernel)
    if problems:
        raise TransferError(f"source kernel {kernel.static_hash} is damaged, not copied: {problems[0]}")
    committed: list[Path] = []
    try:
        return _copy_nodes(kernel, destination, force, committed)
    except BaseException as exc:  # Ctrl-C too: an interrupted copy keeps whole kernels only
        left = _roll_back(destination.root, committed)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise TransferError(_full_disk(exc, kernel, destination.root, left)) from None
        raise


def _roll_back(dst_root: Path, committed: list[Path]) -> Path | None:
    """Remove the nodes one copy committed (a kernel node takes its instances with it),
    then store entries nothing links to any more; returns a node that could not be
    removed, None when all were."""
    # A kernel node this call created is committed first, and holds every later node.
    created_kernel = committed[:1] and committed[0].parent.name == layout.KERNELS
    for node in committed[:1] if created_kernel else committed:
        try:
            _discard(dst_root, node)
        except (OSError, DatabaseError):
            return node
    try:
        content_store.collect(dst_root)
    except OSError:
        pass  # unreferenced entries only cost space; mneme clean collects them later
    return None


def _full_disk(exc: OSError, kernel: Kernel, dst_root: Path, left: Path | None) -> str:
    kept = ("none of it was kept" if left is None
            else f"its partial copy {left} could not be removed: run mneme clean {dst_root} "
                 f"{kernel.static_hash}")
    return (f"cannot copy kernel {kernel.static_hash} into {dst_root}: {exc.strerror} there "
            f"({kept}; kernels reported copied before it are complete): free space on that "
            "disk or copy to another destination")


def _copy_nodes(kernel: Kernel, destination: DatabaseWriter, force: bool,
                committed: list[Path]) -> int:
    """copy_kernel's work; every node it commits is appended to ``committed``."""
    dst_root = destination.root
    dst_db = Database.open(dst_root)
    target = layout.kernel_dir(dst_root, kernel.static_hash)
    layout.no_symlinks(dst_root, target / "x")
    if (target / "zarr.json").exists():
        existing = Kernel(dst_db, kernel.static_hash)
        why = _kernel_problems(existing)
        reason = f"is damaged ({why[0]})" if why else kernel_difference(kernel, existing)
        if reason is not None:
            _refuse_or_replace(f"kernel {kernel.static_hash}", reason, force)
            only_there = set(existing.instance_hashes()) - set(kernel.instance_hashes())
            if only_there:
                raise TransferError(
                    f"the destination's kernel {kernel.static_hash} {reason}, and replacing it would "
                    f"delete {len(only_there)} instance(s) only the destination holds: "
                    "copy them elsewhere or clean the kernel there first"
                )
            remove_kernel(existing)
    if not (target / "zarr.json").exists():
        scratch = _scratch(dst_root)
        try:
            staged = scratch / kernel.static_hash
            _copy_tree(kernel.path, staged, skip={layout.INSTANCES})
            (staged / layout.INSTANCES).mkdir()
            shutil.copyfile(kernel.path / layout.INSTANCES / "zarr.json",
                            staged / layout.INSTANCES / "zarr.json", follow_symlinks=False)
            if commit_node(staged, target):
                committed.append(target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        copied_kernel = Kernel(dst_db, kernel.static_hash)
        reason = (_kernel_problems(copied_kernel) or [None])[0] or kernel_difference(kernel, copied_kernel)  # type: ignore[list-item]
        if reason is not None:
            raise TransferError(f"kernel {kernel.static_hash}: the copy does not check out ({reason})")
    copied = 0
    shared = SharedChunks(kernel.db, dst_root)
    source_sums: dict = {}  # chunks checked once, however many instances share them
    copy_sums: dict = {}
    for instance in kernel.instances():
        problems = _instance_problems(instance, source_sums)
        if problems:
            raise TransferError(f"source instance {instance.id} is damaged, not copied: {problems[0]}")
        final = layout.instance_dir(dst_root, kernel.static_hash, instance.dynamic_hash)
        dst_kernel = Kernel(dst_db, kernel.static_hash)
        if final.exists() or final.is_symlink():
            present = Instance(dst_kernel, instance.dynamic_hash)
            why = _instance_problems(present)
            reason = f"is damaged ({why[0]})" if why else instance_difference(instance, present)
            if reason is None:
                continue  # already there, identical
            _refuse_or_replace(f"instance {instance.id}", reason, force)
            if final.is_symlink():
                final.unlink()
            else:
                _remove_instance(present)
        scratch = _scratch(dst_root)
        try:
            staged = scratch / instance.dynamic_hash
            _copy_tree(instance.path, staged, shared=shared)
            mine = commit_node(staged, final)
            if mine:
                committed.append(final)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        result = Instance(dst_kernel, instance.dynamic_hash)
        reason = (_instance_problems(result, copy_sums) or [None])[0] or instance_difference(instance, result)  # type: ignore[list-item]
        if reason is not None:
            if mine:
                _remove_instance(result)
                committed.remove(final)
            raise TransferError(f"instance {instance.id}: the copy does not check out ({reason})")
        copied += mine
    return copied


def same_or_nested(a: Path, b: Path) -> bool:
    """``a`` and ``b`` are the same directory or one lies inside the other."""
    ra, rb = a.resolve(), b.resolve()
    return ra == rb or ra in rb.parents or rb in ra.parents


def open_destination(source: Database, path: Path) -> DatabaseWriter:
    """The destination of a copy: created with the source's recording information, or an
    existing database of the same address range (never the source, inside it or around it)."""
    if same_or_nested(source.root, path):
        raise TransferError(
            f"cannot copy {source.root} into {path}: the destination is the source, lies inside "
            "it or contains it"
        )
    try:
        writer = DatabaseWriter.create(path, source.info)
    except IncompatibleDatabaseError as exc:
        raise IncompatibleDatabaseError(
            f"cannot copy: {exc} (instances are only valid at the addresses they were recorded at)"
        ) from None
    if writer.info.format_version > source.info.format_version:
        raise TransferError(
            f"{path} is a format {writer.info.format_version} database and {source.root} format "
            f"{source.info.format_version}: its instances carry no content checksums; copy them "
            "into a new database"
        )
    return writer
