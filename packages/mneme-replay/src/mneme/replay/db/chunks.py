"""Reading and writing one-dimensional uint8 Zarr v3 arrays, chunk by chunk.

The arrays are plain Zarr v3 (any reader opens them), but the writer encodes chunks itself
on a thread pool: zstd and crc32c release the GIL, and zarr-python's generic pipeline
reached about half the throughput on our 2-core machines (see benchmarks/store_bandwidth.py).
Codec chain, in Zarr's order: ``bytes`` → ``zstd`` (no frame checksum) → ``crc32c``
(4 bytes, little-endian, appended). Chunk keys use the default ``c/<index>`` encoding.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import crc32c
import numpy as np
from numcodecs.zstd import Zstd

from .errors import CorruptDataError

#: 4 MiB: the measured sweet spot between per-chunk overhead and read granularity.
DEFAULT_CHUNK_SIZE = 4 << 20
DEFAULT_ZSTD_LEVEL = 1
_WORKERS = max(2, min(8, os.cpu_count() or 2))
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
        "codecs": [
            {"name": "bytes"},
            {"name": "zstd", "configuration": {"level": level, "checksum": False}},
            {"name": "crc32c"},
        ],
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


def encode_chunk(data: np.ndarray | bytes, level: int) -> bytes:
    body = Zstd(level=level).encode(data)
    return bytes(body) + struct.pack("<I", crc32c.crc32c(body))


def decode_chunk(blob: bytes, expected_size: int, where: str) -> np.ndarray:
    if len(blob) < 4:
        raise CorruptDataError(f"{where}: chunk truncated ({len(blob)} bytes)")
    body, (stored,) = blob[:-4], struct.unpack("<I", blob[-4:])
    if crc32c.crc32c(body) != stored:
        raise CorruptDataError(f"{where}: checksum mismatch (data corrupted on disk)")
    try:
        out = np.frombuffer(Zstd().decode(body), dtype=np.uint8)
    except Exception as exc:  # numcodecs raises RuntimeError on bad frames
        raise CorruptDataError(f"{where}: chunk does not decompress ({exc})") from None
    if out.size != expected_size:
        raise CorruptDataError(
            f"{where}: chunk holds {out.size} bytes, expected {expected_size}"
        )
    return out


def chunk_path(array_dir: Path, index: int) -> Path:
    return array_dir / "c" / str(index)


@dataclass(frozen=True)
class ArrayInfo:
    """What the reader needs of an array's zarr.json."""

    path: Path
    size: int
    chunk_size: int
    attributes: dict

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
) -> int:
    """Write ``data`` (uint8, 1-D) as a Zarr v3 array; returns the bytes stored.

    ``skip_zero_chunks`` leaves all-zero chunks out (they read back as the fill value 0):
    used for XOR deltas, where an absent chunk means "unchanged". Otherwise every chunk is
    written, so a missing chunk file is detectable corruption. With ``xor_with`` the array
    stored is ``data ^ xor_with``, computed chunk by chunk on the pool (no full-size copy).
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
        if piece.size < chunk_size:  # the edge chunk, padded with the fill value
            piece = np.concatenate([piece, np.zeros(chunk_size - piece.size, np.uint8)])
        blob = encode_chunk(piece, level)
        chunk_path(array_dir, index).write_bytes(blob)
        return len(blob)

    stored = sum(pool().map(one, range(count)))
    write_json(
        array_dir / "zarr.json",
        array_metadata(flat.size, chunk_size, level, attributes or {}),
    )
    return stored


def read_array_info(array_dir: Path, limit: int) -> ArrayInfo:
    """Parse and validate an array's zarr.json; ``limit`` bounds the declared size."""
    meta = load_json(array_dir / "zarr.json")
    try:
        if meta["zarr_format"] != 3 or meta["node_type"] != "array":
            raise ValueError("not a Zarr v3 array")
        if meta["data_type"] != "uint8" or len(meta["shape"]) != 1:
            raise ValueError("not a one-dimensional uint8 array")
        size = int(meta["shape"][0])
        chunk_size = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
        names = [c["name"] for c in meta["codecs"]]
        attributes = meta.get("attributes", {})
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CorruptDataError(f"{array_dir}: malformed array metadata ({exc})") from None
    if names != ["bytes", "zstd", "crc32c"]:
        raise CorruptDataError(f"{array_dir}: unsupported codec chain {names}")
    if size < 0 or chunk_size <= 0 or size > limit:
        raise CorruptDataError(
            f"{array_dir}: declared size {size} is outside the recorded range (limit {limit})"
        )
    return ArrayInfo(array_dir, size, chunk_size, attributes)


def load_json(path: Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise CorruptDataError(f"{path} is missing") from None
    except OSError as exc:
        raise CorruptDataError(f"cannot read {path}: {exc.strerror}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise CorruptDataError(f"{path}: malformed JSON ({exc})") from None
    if not isinstance(document, dict):
        raise CorruptDataError(f"{path}: expected a JSON object")
    return document


def read_range(
    info: ArrayInfo,
    start: int = 0,
    stop: int | None = None,
    *,
    missing_is_zero: bool = False,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Bytes [start, stop) of the array, decoding only the chunks that cover them."""
    stop = info.size if stop is None else stop
    if not 0 <= start <= stop <= info.size:
        raise ValueError(f"range [{start}, {stop}) outside an array of {info.size} bytes")
    result = np.empty(stop - start, dtype=np.uint8) if out is None else out
    if stop == start:
        return result
    first, last = start // info.chunk_size, (stop - 1) // info.chunk_size

    def one(index: int) -> None:
        lo, hi = info.chunk_bounds(index)
        path = chunk_path(info.path, index)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            if not missing_is_zero:
                raise CorruptDataError(
                    f"{info.path}: chunk {index} is missing (data truncated)"
                ) from None
            chunk = None
        else:
            chunk = decode_chunk(blob, info.chunk_size, f"{info.path} chunk {index}")
        a, b = max(lo, start), min(hi, stop)
        target = result[a - start : b - start]
        if chunk is None:
            target[:] = 0
        else:
            target[:] = chunk[a - lo : b - lo]

    for _ in pool().map(one, range(first, last + 1)):
        pass
    return result


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


def map_chunks(fn: Callable[[int], object], count: int) -> list:
    return list(pool().map(fn, range(count)))
