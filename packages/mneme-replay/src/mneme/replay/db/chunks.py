"""Reading and writing one-dimensional uint8 Zarr v3 arrays, chunk by chunk: their
zarr.json and their chunk files.

The arrays are plain Zarr v3 (any reader opens them), but the writer encodes chunks itself
on a thread pool: zstd and crc32c release the GIL, and zarr-python's generic pipeline
reached about half the throughput on our 2-core machines (see benchmarks/store_bandwidth.py).
How one chunk is encoded and checked is codec.py. Chunk keys use the default ``c/<index>``
encoding.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from mneme.runtime import recording_format

from . import content_store
from .codec import (
    CODEC_SCHEMAS,
    codecs_metadata,
    decode_chunk,
    encode_chunk,
    max_chunk_file_size,
)
from .errors import CorruptDataError
from .metadata import Array, Bool, Exactly, Int, Obj, OneOf, read_json_file

#: 4 MiB: the measured sweet spot between per-chunk overhead and read granularity.
DEFAULT_CHUNK_SIZE = recording_format.DEFAULT_CHUNK_SIZE
DEFAULT_ZSTD_LEVEL = recording_format.DEFAULT_ZSTD_LEVEL
_WORKERS = max(2, min(32, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2))
_pool: ThreadPoolExecutor | None = None


def pool() -> ThreadPoolExecutor:
    """One shared pool for chunk coding (compression, checksums and file I/O)."""
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="mneme-chunks")
    return _pool


def array_metadata(size: int, chunk_size: int, level: int, attributes: dict) -> dict:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [size],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [chunk_size]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": codecs_metadata(level),
        "attributes": attributes,
        "storage_transformers": [],
    }


def group_metadata(attributes: dict) -> dict:
    return {"zarr_format": 3, "node_type": "group", "attributes": attributes}


def write_json(path: Path, document: dict) -> None:
    """Write a metadata document atomically (temporary file + rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document, indent=2, sort_keys=True))
    os.replace(tmp, path)


def chunk_path(array_dir: Path, index: int) -> Path:
    return array_dir / "c" / str(index)


@dataclass(frozen=True)
class ArrayInfo:
    """What the reader needs of an array's zarr.json."""

    path: Path
    size: int
    chunk_size: int
    attributes: dict

    @property
    def encoding(self) -> str | None:
        """``attributes.mneme.encoding`` (None where absent: format 1 ``args``)."""
        return self.attributes.get("mneme", {}).get("encoding")

    @property
    def sparse(self) -> bool:
        """``attributes.mneme.sparse``: a ``bytes`` array whose all-zero chunks are not
        stored (prologues; docs/format.md). Only ``true`` passes the schema."""
        return self.attributes.get("mneme", {}).get("sparse") is True

    @property
    def absent_is_zero(self) -> bool:
        """Whether an absent chunk reads as zeros (a sparse array, an ``xor-prologue``
        delta) rather than being corruption (every other array is dense)."""
        return self.sparse or self.encoding == "xor-prologue"

    def chunk_count(self) -> int:
        return -(-self.size // self.chunk_size)

    def chunk_bounds(self, index: int) -> tuple[int, int]:
        start = index * self.chunk_size
        return start, min(start + self.chunk_size, self.size)


def write_array(
    array_dir: Path,
    data: np.ndarray,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    level: int = DEFAULT_ZSTD_LEVEL,
    attributes: dict | None = None,
    skip_zero_chunks: bool = False,
    xor_with: np.ndarray | None = None,
    store: Path | None = None,
) -> int:
    """Write ``data`` (uint8, 1-D) as a Zarr v3 array; returns the bytes stored.

    ``skip_zero_chunks`` leaves all-zero chunks out (they read back as the fill value 0):
    used for XOR deltas, where an absent chunk means "unchanged", and for sparse prologues
    (whose attributes must then say ``"sparse": true``). Otherwise every chunk is written,
    so a missing chunk file is detectable corruption. With ``xor_with`` the array
    stored is ``data ^ xor_with``, computed chunk by chunk on the pool (no full-size copy).
    With ``store`` (the database's content store) a chunk whose bytes are already there is
    a hard link to that copy, neither compressed nor written again (content_store.py).
    """
    flat = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
    other = None if xor_with is None else np.ascontiguousarray(xor_with, dtype=np.uint8).reshape(-1)
    if other is not None and other.size != flat.size:
        raise ValueError("xor_with must have the size of data")
    # Small arrays get one chunk of their own size: Zarr stores edge chunks padded to the
    # full chunk shape, which would cost a whole chunk's memory on every read.
    chunk_size = max(1, min(chunk_size, flat.size))
    array_dir.mkdir(parents=True, exist_ok=True)
    (array_dir / "c").mkdir(exist_ok=True)
    count = -(-flat.size // chunk_size)

    def one(index: int) -> int:
        piece = flat[index * chunk_size : (index + 1) * chunk_size]
        if other is not None:
            piece = np.bitwise_xor(piece, other[index * chunk_size : (index + 1) * chunk_size])
        if skip_zero_chunks and not piece.any():
            return 0
        target = chunk_path(array_dir, index)
        key = content_store.key(piece, chunk_size, level) if store is not None else None
        if key is not None and content_store.link_existing(store, key, target):  # type: ignore[arg-type]
            return 0
        if piece.size < chunk_size:  # the edge chunk, padded with the fill value
            piece = np.concatenate([piece, np.zeros(chunk_size - piece.size, np.uint8)])
        blob = encode_chunk(piece, level)
        if key is None or not content_store.add(store, key, blob, target):  # type: ignore[arg-type]
            target.write_bytes(blob)
        return len(blob)

    stored = sum(pool().map(one, range(count)))
    write_json(
        array_dir / "zarr.json",
        array_metadata(flat.size, chunk_size, level, attributes or {}),
    )
    return stored


ENCODINGS = ("bytes", "llvm-bitcode", "cuda-fatbin", "ptx", "cubin", "xor-prologue")


def _sparse_rule(mneme: dict, where: str) -> None:
    """``sparse`` is ``true`` or absent, and only on an array of encoding ``bytes``."""
    if "sparse" not in mneme:
        return
    if mneme["sparse"] is not True:
        raise CorruptDataError(
            f"{where}.sparse: must be true (a dense array leaves the key out), got "
            f"{json.dumps(mneme['sparse'])[:40]}")
    if mneme.get("encoding") != "bytes":
        raise CorruptDataError(
            f"{where}.sparse: only an array of encoding bytes may be sparse, not "
            f"{mneme.get('encoding')}")


def refuse_sparse(info: ArrayInfo, what: str) -> None:
    """Only prologue arrays may be sparse: ``args``, ``ir`` and epilogue arrays (``what``)
    are dense, so a missing chunk of theirs stays detectable corruption."""
    if info.sparse:
        raise CorruptDataError(
            f"{info.path}: the {what} array is marked sparse (only prologue arrays may be)")
_SIZE = Int(0, 1 << 62)

#: An array's zarr.json exactly as docs/format.md specifies it: everything a plain Zarr
#: reader interprets (data type, chunk grid, key encoding, fill value, codecs) must be
#: what mneme wrote, or plain readers would return different bytes than mneme's reader.
ARRAY_SCHEMA = Obj(
    {
        "zarr_format": Exactly(3),
        "node_type": Exactly("array"),
        "shape": Array(_SIZE, 1, 1),
        "data_type": Exactly("uint8"),
        "chunk_grid": Obj(
            {
                "name": Exactly("regular"),
                "configuration": Obj({"chunk_shape": Array(Int(1, 1 << 62), 1, 1)}, extra=False),
            },
            extra=False,
        ),
        "chunk_key_encoding": Exactly({"name": "default", "configuration": {"separator": "/"}}),
        "fill_value": Exactly(0),
        "codecs": Array(Obj({}), 3, 3),
        "attributes": Obj({}, {"mneme": Obj({"encoding": OneOf(ENCODINGS)},
                                             {"sparse": Bool()}, extra=False, rule=_sparse_rule)}),
    },
    {"storage_transformers": Exactly([])},
    extra=False,
)
#: A group's zarr.json: plain Zarr readers refuse unknown fields.
GROUP_SCHEMA = Obj(
    {"zarr_format": Exactly(3), "node_type": Exactly("group")},
    {"attributes": Obj({}), "consolidated_metadata": Exactly(None)},
    extra=False,
)

def read_array_info(array_dir: Path, limit: int) -> ArrayInfo:
    """Parse and validate an array's zarr.json; ``limit`` bounds the declared size."""
    meta = load_json(array_dir / "zarr.json")
    where = f"{array_dir}/zarr.json"
    ARRAY_SCHEMA.check(meta, where)
    for i, (codec, spec) in enumerate(zip(meta["codecs"], CODEC_SCHEMAS, strict=True)):
        spec.check(codec, f"{where} codecs[{i}]")
    size = meta["shape"][0]
    chunk_size = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
    if size > limit:
        raise CorruptDataError(
            f"{array_dir}: declared size {size} is outside the recorded range (limit {limit})"
        )
    if chunk_size > max(size, 1):
        # Writers use one chunk of the array's own size for small arrays; a larger chunk
        # would make every read allocate and inflate the larger size.
        raise CorruptDataError(
            f"{array_dir}: chunk shape {chunk_size} is larger than the array ({size} bytes)"
        )
    return ArrayInfo(array_dir, size, chunk_size, meta["attributes"])


def load_json(path: Path) -> dict:
    """A metadata document (bounded parsing, metadata.parse_json); must be an object."""
    document = read_json_file(path)
    if not isinstance(document, dict):
        raise CorruptDataError(f"{path}: expected a JSON object")
    return document


def stored_chunk_indices(info: ArrayInfo) -> list[int]:
    """Indices of the chunk files present (sorted); anything else in ``c/`` is corruption.
    Costs what is stored, not what the chunk grid declares."""
    folder = info.path / "c"
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise CorruptDataError(f"{folder} is not a directory") from None
    except OSError as exc:
        raise CorruptDataError(f"cannot list {folder}: {exc.strerror}") from None
    count = info.chunk_count()
    indices = []
    for name in names:
        if not (name.isascii() and name.isdigit()) or (len(name) > 1 and name[0] == "0"):
            raise CorruptDataError(f"{folder}: unexpected entry {name!r}")
        index = int(name)
        if index >= count:
            raise CorruptDataError(f"{folder}: chunk {index} lies beyond the array's {count} chunks")
        indices.append(index)
    return sorted(indices)


def present_chunks(info: ArrayInfo) -> list[int]:
    """``stored_chunk_indices``, and for a dense array (``not info.absent_is_zero``: args,
    ir, a prologue not marked sparse, a ``bytes`` epilogue) the check that none is missing
    (CorruptDataError naming the first gap)."""
    present = stored_chunk_indices(info)
    if not info.absent_is_zero and len(present) != info.chunk_count():
        gap = next((i for i, j in enumerate(present) if i != j), len(present))
        raise CorruptDataError(
            f"{info.path}: chunk {gap} is missing ({info.chunk_count() - len(present)} of "
            f"{info.chunk_count()} missing, data truncated)"
        )
    return present


def read_range(
    info: ArrayInfo,
    start: int = 0,
    stop: int | None = None,
    *,
    missing_is_zero: bool | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Bytes [start, stop) of the array, decoding only the chunks that cover them.

    ``missing_is_zero``: whether an absent chunk reads as zeros; None (the default) takes
    the array's own rule, ``info.absent_is_zero`` (sparse and ``xor-prologue`` arrays);
    otherwise an absent chunk is corruption (CorruptDataError)."""
    if missing_is_zero is None:
        missing_is_zero = info.absent_is_zero
    stop = info.size if stop is None else stop
    if not 0 <= start <= stop <= info.size:
        raise ValueError(f"range [{start}, {stop}) outside an array of {info.size} bytes")
    result = np.empty(stop - start, dtype=np.uint8) if out is None else out
    if stop == start:
        return result
    first, last = start // info.chunk_size, (stop - 1) // info.chunk_size
    present: set[int] | None = None  # None: every chunk is looked for
    if last - first >= _LIST_FIRST:
        # Many chunks: visit only those stored (cost bounded by the data on disk).
        stored = [i for i in stored_chunk_indices(info) if first <= i <= last]
        if not missing_is_zero and len(stored) != last - first + 1:
            gap = next((i for i, j in zip(range(first, last + 1), stored, strict=False) if i != j),
                       first + len(stored))
            raise CorruptDataError(f"{info.path}: chunk {gap} is missing (data truncated)")
        present = set(stored)

    def one(index: int) -> None:
        lo, hi = info.chunk_bounds(index)
        a, b = max(lo, start), min(hi, stop)
        target = result[a - start : b - start]
        blob = read_chunk_file(info, index) if present is None or index in present else None
        if blob is None:
            if not missing_is_zero:
                raise CorruptDataError(f"{info.path}: chunk {index} is missing (data truncated)")
            target[:] = 0  # on the workers: a large sparse range is not zeroed on one thread
        elif a == lo and b - a == info.chunk_size and target.flags.c_contiguous:
            decode_chunk(blob, info.chunk_size, f"{info.path} chunk {index}", out=target)
        else:
            chunk = decode_chunk(blob, info.chunk_size, f"{info.path} chunk {index}")
            target[:] = chunk[a - lo : b - lo]

    for _ in pool().map(one, range(first, last + 1)):
        pass
    return result


#: Reads spanning more chunks than this list the stored chunks first.
_LIST_FIRST = 256


@contextlib.contextmanager
def _chunk_fd(info: ArrayInfo, path) -> Iterator[int | None]:
    """A chunk file open for reading (None when absent), never through a symlink; errors
    reading it become CorruptDataError, and it is closed after."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        yield None
        return
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CorruptDataError(f"{path} is a symbolic link (not allowed in a database)") from None
        if exc.errno == errno.ENOTDIR:
            raise CorruptDataError(f"{info.path}/c is not a directory") from None
        raise CorruptDataError(f"cannot read {path}: {exc.strerror}") from None
    try:
        yield fd
    except IsADirectoryError:
        raise CorruptDataError(f"{path} is a directory, expected a chunk file") from None
    except OSError as exc:
        raise CorruptDataError(f"cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def read_chunk_file(info: ArrayInfo, index: int) -> bytes | None:
    """The stored bytes of chunk ``index`` (None when absent); never follows a symlink
    and never reads more than a chunk can take."""
    path = chunk_path(info.path, index)
    with _chunk_fd(info, path) as fd:
        if fd is None:
            return None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptDataError(f"{path} is not a regular file")
        limit = max_chunk_file_size(info.chunk_size)
        if st.st_size > limit:
            raise CorruptDataError(f"{path}: {st.st_size} bytes, more than a chunk can take ({limit})")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit + 1)


def stored_chunk_sizes(info: ArrayInfo) -> dict[int, int]:
    """Bytes of each stored chunk file by index (absent chunks left out), with the checks
    ``read_chunk_file`` makes: no symlinks, regular files no larger than a chunk can take.
    For readers that place the stored bytes themselves (restore's device path)."""
    limit = max_chunk_file_size(info.chunk_size)
    sizes = {}
    for index in stored_chunk_indices(info):
        path = chunk_path(info.path, index)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CorruptDataError(f"cannot read {path}: {exc.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            raise CorruptDataError(f"{path} is a symbolic link (not allowed in a database)")
        if not stat.S_ISREG(st.st_mode):
            raise CorruptDataError(f"{path} is not a regular file")
        if st.st_size > limit:
            raise CorruptDataError(f"{path}: {st.st_size} bytes, more than a chunk can take ({limit})")
        sizes[index] = st.st_size
    return sizes


def read_chunk_into(info: ArrayInfo, index: int, out: memoryview) -> None:
    """Fill ``out`` with the stored bytes of chunk ``index``, whose file must hold exactly
    ``len(out)`` bytes (its size from ``stored_chunk_sizes``); never follows a symlink."""
    path = chunk_path(info.path, index)
    with _chunk_fd(info, path) as fd:
        if fd is None:
            raise CorruptDataError(f"{info.path}: chunk {index} is missing (data truncated)")
        if os.fstat(fd).st_size != len(out):
            raise CorruptDataError(f"{path} changed size while it was read")
        done = 0
        while done < len(out):
            got = os.readv(fd, [out[done:]])
            if got == 0:
                raise CorruptDataError(f"{path} changed size while it was read")
            done += got


def iter_chunk_indices(info: ArrayInfo) -> Iterable[int]:
    return range(info.chunk_count())


def stored_bytes(path: Path) -> int:
    """Bytes on disk under ``path`` (files only)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _file_infos(path: Path):
    """lstat of every file under ``path`` (unreadable ones left out)."""
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                yield os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue


def own_bytes(path: Path) -> int:
    """Bytes on disk under ``path`` that nothing else in the database shares: files with
    no other link than the content store's (content_store.py)."""
    return sum(info.st_size for info in _file_infos(path) if info.st_nlink <= 2)


def disk_bytes(path: Path) -> int:
    """Bytes on disk under ``path``, every shared (hard-linked) file counted once."""
    sizes = {(info.st_dev, info.st_ino): info.st_size for info in _file_infos(path)}
    return sum(sizes.values())


@dataclass
class Usage:
    """Bytes on disk under a tree of kernels, from one ``lstat`` of each file
    (``tree_usage``): ``disk`` counts every file once however many links it has, and
    ``nodes`` holds per instance folder (keyed ``<static>/<dynamic>``) its ``stored`` bytes
    (every file) and its ``own`` bytes (files no other node links to, as ``own_bytes``)."""

    disk: int
    nodes: dict[str, tuple[int, int]]


def tree_usage(kernels: Path) -> Usage:
    """What ``disk_bytes(kernels)`` and, per instance, ``stored_bytes`` and ``own_bytes``
    return, in one walk: ``mneme ls`` then stats each file once, not three times."""
    sizes: dict[tuple[int, int], int] = {}
    nodes: dict[str, list[int]] = {}
    for dirpath, _dirs, files in os.walk(kernels):
        parts = Path(dirpath).relative_to(kernels).parts
        node = (f"{parts[0]}/{parts[2]}" if len(parts) >= 3 and parts[1] == "instances" else None)
        totals = nodes.setdefault(node, [0, 0]) if node else None
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            sizes[(st.st_dev, st.st_ino)] = st.st_size
            if totals is not None:
                totals[0] += st.st_size
                if st.st_nlink <= 2:
                    totals[1] += st.st_size
    return Usage(sum(sizes.values()), {k: (v[0], v[1]) for k, v in nodes.items()})


def map_chunks(fn: Callable[[int], object], count: int) -> list:
    return list(pool().map(fn, range(count)))
