"""Decompressing fatbinary entries: zstd frames (``compression.zstd``, the ``zstandard``
module or the system's libzstd, whichever exists) and LZ4 blocks (the system's liblz4 or
our own decoder). Errors are ValueError; fatbin.py turns them into one FatbinError line."""

from __future__ import annotations

import ctypes
import ctypes.util

_LZ4_LIB: list = []


def lz4(src: bytes, size: int) -> bytes:
    """One LZ4 block of ``size`` bytes: the system's liblz4 (Debian's liblz4-1, always
    installed) where it loads, else the decoder below (pure Python, slower)."""
    if not _LZ4_LIB:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("lz4") or "liblz4.so.1")
            lib.LZ4_decompress_safe.argtypes = [
                ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int
            ]
            lib.LZ4_decompress_safe.restype = ctypes.c_int
        except (OSError, AttributeError):
            lib = None
        _LZ4_LIB.append(lib)
    lib = _LZ4_LIB[0]
    if lib is None or len(src) >= 1 << 31:
        return lz4_block(src, size)
    buffer = ctypes.create_string_buffer(max(size, 1))
    written = lib.LZ4_decompress_safe(src, buffer, len(src), size)
    if written < 0:
        raise ValueError("damaged LZ4 block")
    return _checked(buffer.raw[:written], size)


def lz4_block(src: bytes, size: int) -> bytes:
    """Decode one LZ4 block whose output is exactly ``size`` bytes (pure Python)."""
    out = bytearray()
    pos, end = 0, len(src)
    while pos < end:
        token = src[pos]
        pos += 1
        literals = token >> 4
        if literals == 15:
            while True:
                if pos >= end:
                    raise ValueError("truncated literal length")
                extra = src[pos]
                pos += 1
                literals += extra
                if extra != 255:
                    break
        if pos + literals > end or len(out) + literals > size:
            raise ValueError("literals run past the block")
        out += src[pos : pos + literals]
        pos += literals
        if pos >= end:
            break  # the last sequence has literals only
        if pos + 2 > end:
            raise ValueError("truncated match offset")
        offset = src[pos] | src[pos + 1] << 8
        pos += 2
        if offset == 0 or offset > len(out):
            raise ValueError("match offset outside the output")
        length = token & 15
        if length == 15:
            while True:
                if pos >= end:
                    raise ValueError("truncated match length")
                extra = src[pos]
                pos += 1
                length += extra
                if extra != 255:
                    break
        length += 4
        if len(out) + length > size:
            raise ValueError("match runs past the declared size")
        start = len(out) - offset
        if length <= offset:
            out += out[start : start + length]
        else:  # overlapping copy: the pattern repeats
            pattern = bytes(out[start:])
            out += (pattern * (length // offset + 1))[:length]
    if len(out) != size:
        raise ValueError(f"{len(out)} bytes decoded, {size} declared")
    return bytes(out)


def _zstd_system():
    name = ctypes.util.find_library("zstd") or "libzstd.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    lib.ZSTD_decompress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    lib.ZSTD_isError.restype = ctypes.c_uint
    return lib


_ZSTD_LIB: list = []


def zstd_frame(src: bytes, size: int) -> bytes:
    """One zstd frame whose content is ``size`` bytes."""
    try:
        from compression import zstd  # Python >= 3.14

        return _checked(zstd.decompress(src), size)
    except ImportError:
        pass
    try:
        import zstandard  # optional

        return _checked(zstandard.ZstdDecompressor().decompress(src, max_output_size=size), size)
    except ImportError:
        pass
    if not _ZSTD_LIB:
        _ZSTD_LIB.append(_zstd_system())
    lib = _ZSTD_LIB[0]
    if lib is None:
        raise ModuleNotFoundError(
            "zstd-compressed entry: install libzstd1 (apt) or the zstandard module (pip)"
        )
    buffer = ctypes.create_string_buffer(max(size, 1))
    written = lib.ZSTD_decompress(buffer, size, src, len(src))
    if lib.ZSTD_isError(written):
        raise ValueError("damaged zstd frame")
    return _checked(buffer.raw[:written], size)


def _checked(data: bytes, size: int) -> bytes:
    if len(data) != size:
        raise ValueError(f"{len(data)} bytes decoded, {size} declared")
    return data
