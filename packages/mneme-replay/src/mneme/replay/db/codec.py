"""One chunk of a recording's arrays, encoded and decoded (docs/format.md).

Codec chain, in Zarr's order: ``bytes`` → ``zstd`` (no frame checksum) → ``crc32c``
(4 bytes, little-endian, appended). Decoding checks the CRC and the content size the zstd
frame declares before it decompresses, into a buffer of the chunk's size.
"""

from __future__ import annotations

import struct

import numpy as np

from .errors import CorruptDataError
from .hashing import content_checksum
from .metadata import Bool, Exactly, Int, Obj


def codecs_metadata(level: int) -> list[dict]:
    """The ``codecs`` of an array's zarr.json: the chain above at zstd ``level``."""
    return [
        {"name": "bytes"},
        {"name": "zstd", "configuration": {"level": level, "checksum": False}},
        {"name": "crc32c"},
    ]


#: What each codec of an array's zarr.json must be, in the chain's order.
CODEC_SCHEMAS = (
    Exactly({"name": "bytes"}),
    Obj(
        {
            "name": Exactly("zstd"),
            "configuration": Obj({"level": Int(-(1 << 17), 22), "checksum": Bool()}, extra=False),
        },
        extra=False,
    ),
    Exactly({"name": "crc32c"}),
)


def _zstd(level: int = 0):
    # (imported at the first chunk, not with the database: numcodecs costs ~0.05 s of
    # imports on the GPU host, and `mneme tune`'s own process reads no chunk)
    from numcodecs.zstd import Zstd

    return Zstd(level=level)


def encode_chunk(data: np.ndarray | bytes, level: int) -> bytes:
    body = bytes(_zstd(level).encode(data))
    return body + struct.pack("<I", content_checksum(body))


_ZSTD_MAGIC = 0xFD2FB528


def frame_content_size(body: bytes) -> int | None:
    """The content size a zstd frame header declares (None: not declared or no frame)."""
    if len(body) < 6 or int.from_bytes(body[:4], "little") != _ZSTD_MAGIC:
        return None
    descriptor = body[4]
    fcs_flag, single_segment, dict_flag = descriptor >> 6, (descriptor >> 5) & 1, descriptor & 3
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if width == 0 or len(body) < pos + width:
        return None
    value = int.from_bytes(body[pos : pos + width], "little")
    return value + 256 if width == 2 else value


def max_chunk_file_size(chunk_size: int) -> int:
    """Upper bound of a stored chunk (ZSTD_compressBound + the CRC): larger files are
    damaged and are not read into memory."""
    return chunk_size + (chunk_size >> 8) + (((128 << 10) - chunk_size) >> 11 if chunk_size < 128 << 10 else 0) + 64 + 4


def decode_chunk(blob: bytes, expected_size: int, where: str, out: np.ndarray | None = None) -> np.ndarray:
    """Check and decompress one stored chunk. The chunk size the metadata declares is a
    hard limit: the frame must declare exactly that content size, and decompression
    writes into a buffer of that size (a small file cannot inflate to gigabytes); ``out``:
    that buffer (``expected_size`` contiguous bytes), else a new one."""
    check_frame(blob, expected_size, where)
    body = blob[:-4]
    if out is None:
        out = np.empty(expected_size, dtype=np.uint8)
    try:
        _zstd().decode(body, out)
    except Exception as exc:  # numcodecs raises RuntimeError/ValueError on bad frames
        raise CorruptDataError(f"{where}: chunk does not decompress ({exc})") from None
    return out


def check_frame(blob, expected_size: int, where: str) -> None:
    """The checks ``decode_chunk`` makes before decompressing: the CRC-32C after the frame
    and the content size the frame declares (exactly the chunk size)."""
    if len(blob) < 4:
        raise CorruptDataError(f"{where}: chunk truncated ({len(blob)} bytes)")
    body = blob[:-4]
    if content_checksum(body) != int.from_bytes(blob[-4:], "little"):
        raise CorruptDataError(f"{where}: checksum mismatch (data corrupted on disk)")
    declared = frame_content_size(bytes(body[:18]))
    if declared != expected_size:
        raise CorruptDataError(
            f"{where}: chunk declares {declared} bytes, expected {expected_size}"
            if declared is not None
            else f"{where}: chunk is not a zstd frame with a declared size"
        )
