"""``mneme check``: verify what a reader of a database will get, and list what is broken.

Beyond "every chunk decompresses", check enforces every rule of docs/format.md that
decides what a reader returns: the array metadata plain Zarr readers interpret (codecs,
fill value, chunk grid) exactly as specified, the metadata schema (types and ranges,
annotation tolerances), the region layout rules, the dynamic hash recomputed from the
stored launch configuration and arguments, dense arrays complete, epilogue encodings
consistent, and (format 2) the CRC-32C of every region's full prologue and reconstructed
epilogue and of the IR against the values the writer recorded. No symbolic link is
followed. Its cost is bounded by the data actually stored: chunk grids are never
enumerated beyond the chunk files present, and the zeros of a sparse prologue's absent
chunks enter the checksums arithmetically (hashing.zeros_checksum), never read or
allocated.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import layout
from .chunks import (
    GROUP_SCHEMA,
    ArrayInfo,
    chunk_path,
    load_json,
    pool,
    present_chunks,
    read_array_info,
    read_chunk_file,
    refuse_sparse,
)
from .codec import decode_chunk
from .errors import CorruptDataError, DatabaseError
from .hashing import combine_checksums, content_checksum, dynamic_hash, zeros_checksum
from .instance import Instance
from .param_layout import params_end
from .reader import Database, Kernel
from .region_layout import address_space_problem
from .schema import MAX_ARGS_SIZE


@dataclass(frozen=True)
class Problem:
    where: str
    message: str
    fatal: bool = True

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def abandoned_staging(db: Database) -> list[str]:
    """Staging folders left by writers that were killed (never visible to readers)."""
    root = layout.staging_root(db.root)
    if root.is_symlink() or not root.is_dir():
        return []
    return sorted(os.listdir(root))


def symlinks(root: Path) -> list[Path]:
    """Every symbolic link inside a database (none is allowed; none is followed)."""
    found = []
    for dirpath, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(dirpath) / name
            if path.is_symlink():
                found.append(path)
    return found


def _guard(problems: list[Problem], where: str, fn: Callable[[], object]) -> bool:
    try:
        fn()
        return True
    except DatabaseError as exc:
        problems.append(Problem(where, str(exc)))
        return False


def _group(path: Path) -> None:
    GROUP_SCHEMA.check(load_json(path / "zarr.json"), f"{path}/zarr.json")


def _entries(path: Path, allowed: set[str], what: str) -> list[str]:
    try:
        names = sorted(os.listdir(path))
    except NotADirectoryError:
        raise CorruptDataError(f"{path} is not a directory") from None
    except FileNotFoundError:
        raise CorruptDataError(f"{path} is missing") from None
    extra = [n for n in names if n not in allowed and n != "zarr.json"]
    if extra:
        raise CorruptDataError(f"{path}: unexpected {what} {', '.join(extra[:5])}")
    return names


def _windowed(fn: Callable[[int], object], indices: list[int], width: int = 8) -> Iterator:
    """``fn`` over ``indices`` on the chunk pool, in order, at most ``width`` in flight."""
    executor = pool()
    for lo in range(0, len(indices), width):
        yield from executor.map(fn, indices[lo : lo + width])


def _decode(info: ArrayInfo, index: int) -> np.ndarray | None:
    blob = read_chunk_file(info, index)
    if blob is None:
        return None
    return decode_chunk(blob, info.chunk_size, f"{info.path} chunk {index}")


def _check_dense(info: ArrayInfo) -> int:
    """Decode every chunk of a dense array; returns the CRC-32C of its bytes."""
    crc = 0
    for index, chunk in zip(
        range(info.chunk_count()),
        _windowed(lambda i: _decode(info, i), present_chunks(info)),
        strict=True,
    ):
        lo, hi = info.chunk_bounds(index)
        crc = content_checksum(chunk[: hi - lo], crc)
    return crc


def _file_key(info: ArrayInfo, index: int) -> tuple[int, int] | None:
    """The chunk file's (device, inode): hard links of the content store share it, so a
    chunk that many instances hold is decoded and checksummed once per check."""
    try:
        st = os.lstat(chunk_path(info.path, index))
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _check_region(instance: Instance, name: str, size: int, encoding: str,
                  sums: dict | None = None, advance: Callable[[int], None] = lambda n: None) -> tuple[int, int]:
    """Every stored chunk of a region's two arrays; returns the CRC-32C of the prologue
    and of the epilogue a reader reconstructs. Chunks absent from both arrays (possible
    only where the prologue is sparse and the epilogue an XOR delta) are zeros on both
    sides, added to the checksums arithmetically: the cost is what is stored. ``sums``
    keeps the checksums of chunk files already decoded (by inode), across the regions of
    one check; ``advance`` is told the bytes (prologue and epilogue) of each chunk
    verified, absent ones included."""
    limit = instance.kernel.db.info.vas_size
    pro = read_array_info(instance.path / layout.PROLOGUE / name, limit)
    epi = read_array_info(instance.path / layout.EPILOGUE / name, limit)
    for info, side in ((pro, "prologue"), (epi, "epilogue")):
        if info.size != size:
            raise CorruptDataError(f"{side} array holds {info.size} bytes, metadata says {size}")
        _entries(info.path, {"c"}, "entries")
    if pro.encoding != "bytes":
        raise CorruptDataError(f"prologue array has encoding {pro.encoding!r}, expected bytes")
    if epi.encoding != encoding:
        raise CorruptDataError(f"epilogue array has encoding {epi.encoding!r}, metadata says {encoding}")
    refuse_sparse(epi, "epilogue")
    if epi.chunk_size != pro.chunk_size:
        raise CorruptDataError(
            f"prologue and epilogue chunk shapes differ ({pro.chunk_size} vs {epi.chunk_size})"
        )
    stored_pro = set(present_chunks(pro))
    stored_epi = set(present_chunks(epi))
    sums = {} if sums is None else sums

    def one(index: int) -> tuple[int, int, int]:
        lo, hi = pro.chunk_bounds(index)
        before = None
        pro_key: tuple | None
        if index in stored_pro:
            pro_key = _file_key(pro, index)
            # keyed by everything decoding depends on: the same file linked into an array
            # of another chunk size (only a hostile database does that) is decoded again
            pro_sum_key = ("pro", pro_key, pro.chunk_size, hi - lo)
            before_sum = sums.get(pro_sum_key) if pro_key else None
            if before_sum is None:
                before = _decode(pro, index)
                if before is None:
                    raise CorruptDataError(f"{pro.path}: chunk {index} vanished while it was checked")
                before = before[: hi - lo]
                before_sum = content_checksum(before)
        else:  # an absent chunk of a sparse prologue: zeros
            pro_key, pro_sum_key = ("zero",), None  # (an XOR delta over it is the bytes)
            before_sum = zeros_checksum(hi - lo)
        if index not in stored_epi:  # an absent delta chunk: unchanged
            after_sum = before_sum
        else:
            epi_key = _file_key(epi, index)
            key = ("epi", encoding, pro_key if encoding == "xor-prologue" else None, epi_key,
                   epi.chunk_size, hi - lo)
            after_sum = sums.get(key) if pro_key and epi_key else None
            if after_sum is None:
                after = _decode(epi, index)
                if after is None:
                    raise CorruptDataError(f"{epi.path}: chunk {index} vanished while it was checked")
                after = after[: hi - lo]
                if encoding == "xor-prologue" and index in stored_pro:
                    if before is None:
                        before = _decode(pro, index)[: hi - lo]  # type: ignore[index]
                    after = np.bitwise_xor(after, before)
                after_sum = content_checksum(after)
                if pro_key and epi_key:
                    sums[key] = after_sum
        if pro_sum_key is not None and pro_key:  # only once decoded without error
            sums[pro_sum_key] = before_sum
        return before_sum, after_sum, hi - lo

    crc_before = crc_after = 0
    at = 0  # the next byte not yet in the checksums

    def zeros_up_to(end: int) -> None:
        nonlocal crc_before, crc_after, at
        if end > at:  # chunks absent from both arrays: zeros before and after
            crc_before = zeros_checksum(end - at, crc_before)
            crc_after = zeros_checksum(end - at, crc_after)
            advance(2 * (end - at))
            at = end

    indices = sorted(stored_pro | stored_epi)
    for index, (before_sum, after_sum, length) in zip(indices, _windowed(one, indices), strict=True):
        zeros_up_to(pro.chunk_bounds(index)[0])
        crc_before = combine_checksums(crc_before, before_sum, length)
        crc_after = combine_checksums(crc_after, after_sum, length)
        at += length
        advance(2 * length)
    zeros_up_to(size)
    return crc_before, crc_after


def check_instance(problems: list[Problem], instance: Instance, sums: dict | None = None,
                   advance: Callable[[int], None] = lambda n: None) -> None:
    """Append every problem of one instance node to ``problems`` (``sums``, ``advance``:
    see ``_check_region``)."""
    where = instance.id
    # The schema and the layout rules (reader properties validate on first use).
    if not _guard(problems, where, lambda: (instance._attrs, instance.regions, instance.annotations)):
        return
    attrs = instance._attrs

    def launch():
        _group(instance.path)
        _entries(instance.path, {layout.ARGS, layout.PROLOGUE, layout.EPILOGUE}, "entries")
        info = read_array_info(instance.path / layout.ARGS, MAX_ARGS_SIZE)
        _entries(info.path, {"c"}, "entries")
        refuse_sparse(info, "args")
        if info.encoding not in (None, "bytes"):
            raise CorruptDataError(f"args array has encoding {info.encoding!r}, expected bytes")
        if info.size != attrs["args_size"]:
            raise CorruptDataError(f"args holds {info.size} bytes, metadata says {attrs['args_size']}")
        needed = params_end(instance.kernel.params)
        if attrs["args_size"] < needed:
            kernel = instance.kernel
            raise CorruptDataError(
                f"args holds {attrs['args_size']} bytes but the parameters of kernel "
                f"{kernel.static_hash} ({kernel.demangled_name}) span {needed}: the parameter "
                "layout or the arguments are damaged")
        args = bytearray()
        for index, chunk in zip(range(info.chunk_count()),
                                _windowed(lambda i: _decode(info, i), present_chunks(info)), strict=True):
            lo, hi = info.chunk_bounds(index)
            args += chunk[: hi - lo].tobytes()
        expected = dynamic_hash(instance.kernel.static_hash, instance.grid, instance.block,
                                instance.shared_mem, bytes(args), instance.cluster,
                                instance.cooperative)
        if expected != instance.dynamic_hash:
            raise CorruptDataError(
                "launch configuration or arguments do not match the dynamic hash "
                f"(they hash to {expected})"
            )
        cluster = instance.cluster
        if cluster and any(g % c for g, c in zip(instance.grid, cluster, strict=True)):
            raise CorruptDataError(f"grid {list(instance.grid)} is not a whole number of "
                                   f"clusters {list(cluster)}")

    _guard(problems, where, launch)
    fmt = attrs["epilogue_format"]
    allowed = {"diff": ("xor-prologue",), "bytes": ("bytes",), "best": ("bytes", "xor-prologue")}[fmt]
    names = {r.name for r in instance.regions}
    for side in (layout.PROLOGUE, layout.EPILOGUE):
        _guard(problems, f"{where} {side}",
               lambda s=side: (_group(instance.path / s),  # type: ignore[func-returns-value,misc]
                               _entries(instance.path / s, names, "arrays")))
        missing = sorted(n for n in names if not (instance.path / side / n).is_dir())
        if missing:
            problems.append(Problem(f"{where} {side}", f"arrays of regions {', '.join(missing[:5])} are missing"))
    for region in instance.regions:
        here = f"{where} region {region.name}"

        def one(r=region):
            encoding = instance.epilogue_encoding(r.name)
            if encoding not in allowed:
                raise CorruptDataError(f"epilogue encoding {encoding} contradicts epilogue format {fmt}")
            recorded = instance.region_checksums(r.name)
            if recorded is None and _is_sparse(instance, r.name):
                raise CorruptDataError("the prologue array is sparse, but no content checksums "
                                       "are recorded (format 1) to verify its absent chunks by")
            got = _check_region(instance, r.name, r.size, encoding, sums, advance)
            if recorded is not None:
                for side, want, have in zip(("prologue", "epilogue"), recorded, got, strict=True):
                    if want != have:
                        raise CorruptDataError(
                            f"{side} content checksum mismatch (recorded {want:08x}, "
                            f"read {have:08x}): a reader gets other bytes than were recorded"
                        )

        _guard(problems, here, one)


def _is_sparse(instance: Instance, name: str) -> bool:
    """Whether a region's prologue array says it is sparse (unreadable: not; the region's
    check reports why)."""
    try:
        return read_array_info(instance.path / layout.PROLOGUE / name, instance.kernel.db.info.vas_size).sparse
    except DatabaseError:
        return False


def check_kernel_node(problems: list[Problem], kernel: Kernel) -> bool:
    """Append the problems of a kernel node itself (metadata, IR; not its instances);
    True when it is sound."""
    where = kernel.static_hash

    def ir():
        kernel._attrs  # noqa: B018 - the schema check
        _group(kernel.path)
        _entries(kernel.path, {layout.IR, layout.INSTANCES}, "entries")
        info = read_array_info(kernel.path / layout.IR, kernel.db.info.vas_size)
        _entries(info.path, {"c"}, "entries")
        refuse_sparse(info, "ir")
        if info.encoding != kernel.code:
            raise CorruptDataError(f"ir array has encoding {info.encoding!r}, expected {kernel.code}")
        if info.size != kernel._attrs["ir_size"]:
            raise CorruptDataError(f"ir holds {info.size} bytes, metadata says {kernel._attrs['ir_size']}")
        crc = _check_dense(info)
        recorded = kernel.ir_checksum
        if recorded is not None and recorded != crc:
            raise CorruptDataError(f"IR content checksum mismatch (recorded {recorded:08x}, read {crc:08x})")
        if not kernel.has_ir:  # an nvcc build: the fatbinary must hold this kernel's code
            if not kernel.code_kinds:
                raise CorruptDataError("the stored fatbinary holds no PTX or cubin of this kernel")
            return
        data = kernel.ir()  # the bitcode magic
        if recorded is None:
            _parse_bitcode(kernel, data)

    return _guard(problems, where, ir)


def _check_kernel(problems: list[Problem], kernel: Kernel, progress: Callable[[int], None],
                  sums: dict) -> None:
    where = kernel.static_hash
    if not check_kernel_node(problems, kernel):
        return
    base = kernel.path / layout.INSTANCES
    committed = set(kernel.instance_hashes())
    _guard(problems, where, lambda: _group(base))
    for name in sorted(os.listdir(base)) if base.is_dir() and not base.is_symlink() else []:
        if name == "zarr.json":
            continue
        if name not in committed:
            problems.append(Problem(f"{where}/{name}", "not a committed instance (unexpected entry)"))
    for instance in kernel.instances():
        check_instance(problems, instance, sums, progress)


def _parse_bitcode(kernel: Kernel, data: bytes) -> None:
    """Format 1 records no IR checksum: the IR must at least parse (when mneme's LLVM
    binding is installed)."""
    try:
        from mneme.replay.jit import parse_module
        from mneme.replay.jit.errors import JitError
    except ImportError:  # pragma: no cover - the binding is part of mneme-replay
        return
    try:
        parse_module(data, kernel.static_hash, verify=False)
    except JitError as exc:
        raise CorruptDataError(f"stored IR does not parse as LLVM bitcode ({exc})") from None


def check_database(db: Database, progress: Callable[[int], None] = lambda n: None) -> list[Problem]:
    """Every problem found; ``progress`` is told the region bytes (prologue and epilogue)
    of each chunk verified: their total is ``region_bytes(db)`` when nothing is broken."""
    problems: list[Problem] = []
    sums: dict = {}  # chunk files verified once, however many instances link to them
    for link in symlinks(db.root):
        problems.append(Problem(str(link), "symbolic link inside the database (not followed)"))
    for name in sorted(os.listdir(db.root)):
        if name not in ("zarr.json", layout.KERNELS, layout.PRIVATE_DIR):
            problems.append(Problem(f"{db.root}/{name}", "unexpected entry", fatal=False))
    _guard(problems, str(db.root), lambda: _group(db.root))
    # A changed range shows in the instances too: regions outside it, or the range each
    # instance records (format 2 writers) disagreeing with it (check_instance).
    vas_problem = address_space_problem(db.info.vas_base, db.info.vas_size)
    if vas_problem:
        problems.append(Problem(str(db.root), vas_problem))
    base = db.root / layout.KERNELS
    if base.is_symlink() or not (base / "zarr.json").is_file():
        problems.append(Problem(str(db.root), "kernels group metadata is missing"))
        return problems
    _guard(problems, str(base), lambda: _group(base))
    committed = set(db.kernel_hashes())
    for name in sorted(os.listdir(base)):
        if name != "zarr.json" and name not in committed:
            problems.append(Problem(f"kernels/{name}", "not a committed kernel (unexpected entry)"))
    for static in committed:  # not db.kernels(): that sorts by name, reading metadata
        _check_kernel(problems, Kernel(db, static), progress, sums)
    private = db.root / layout.PRIVATE_DIR
    if private.exists() and not stat.S_ISDIR(os.lstat(private).st_mode):
        problems.append(Problem(str(private), "not a directory"))
    leftovers = abandoned_staging(db)
    if leftovers:
        problems.append(Problem(
            str(db.root),
            f"{len(leftovers)} unfinished write(s) of interrupted writers in .mneme/staging "
            "(invisible to readers; mneme clean --staging removes them)",
            fatal=False,
        ))
    return problems


def region_bytes(db: Database) -> int:
    """Prologue and epilogue bytes of every region of every instance (from the metadata):
    what ``check_database`` reads, for a progress bar."""
    total = 0
    for static in db.kernel_hashes():
        for instance in Kernel(db, static).instances():
            try:
                total += 2 * sum(r.size for r in instance.regions)
            except DatabaseError:
                pass  # check_database reports it
    return total
