"""The format's hashes and checksums (specified in docs/format.md).

The dynamic hash of a kernel instance is FNV-1a 64, so that the C++ recorder computes the
same value with a few lines of code. The content checksum of an array is CRC-32C; two
checksums combine into the checksum of the concatenation by GF(2) matrix arithmetic.
"""

from __future__ import annotations

import functools
import struct

import numpy as np
from mneme.runtime.recording_format import FNV_OFFSET, FNV_PRIME

_MASK = (1 << 64) - 1


def fnv1a64(data: bytes, value: int = FNV_OFFSET) -> int:
    """FNV-1a 64 of a byte string (the dynamic hash's function).

    Parameters:
        data: the bytes.
        value: the hash to continue from (the offset basis for a new hash).

    Returns:
        The hash.
    """
    for byte in data:
        value = ((value ^ byte) * FNV_PRIME) & _MASK
    return value


def dynamic_hash(
    static_hash: str,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    shared_mem: int,
    args: bytes,
    cluster: tuple[int, int, int] | None = None,
    cooperative: bool = False,
) -> str:
    """An instance's dynamic hash: FNV-1a 64 over the static hash's 16 ASCII digits, then
    grid x,y,z, block x,y,z and dynamic shared memory as little-endian uint32 (a launch in
    thread-block clusters adds the cluster's x,y,z, a cooperative launch then one more
    word, 1: earlier launches keep their hashes), then the raw argument buffer.

    Parameters:
        static_hash: the kernel's static hash.
        grid: the launch's grid.
        block: its block.
        shared_mem: its dynamic shared memory in bytes.
        args: its argument buffer.
        cluster: its cluster shape; None (or 1,1,1) for none.
        cooperative: whether it was launched cooperatively.

    Returns:
        The hash as 16 hex digits.
    """
    head = static_hash.encode("ascii") + struct.pack("<7I", *grid, *block, shared_mem)
    if is_clustered(cluster):
        head += struct.pack("<3I", *cluster)  # type: ignore[misc]
    if cooperative:
        head += struct.pack("<I", 1)
    return f"{fnv1a64(bytes(args), fnv1a64(head)):016x}"


def is_clustered(cluster) -> bool:
    """Whether a launch ran in thread-block clusters of more than one block."""
    return cluster is not None and cluster[0] * cluster[1] * cluster[2] > 1


def content_checksum(data: np.ndarray | bytes, value: int = 0) -> int:
    """The format's content checksum: CRC-32C (Castagnoli) of the bytes, as an int."""
    # (imported at the first checksum, not with the database: with its metadata, crc32c
    # costs ~0.05 s of imports on the GPU host, and `mneme tune`'s own process reads no
    # chunk before its search)
    import crc32c

    if not isinstance(data, (bytes, bytearray, memoryview)):
        data = np.ascontiguousarray(data)
    return crc32c.crc32c(data, value)


_CRC32C_POLY = 0x82F63B78  # reflected Castagnoli polynomial


def _gf2_apply(operator: tuple[int, ...], vector: int) -> int:
    out, bit = 0, 0
    while vector:
        if vector & 1:
            out ^= operator[bit]
        vector >>= 1
        bit += 1
    return out


def _gf2_compose(outer: tuple[int, ...], inner: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_gf2_apply(outer, column) for column in inner)


@functools.cache
def _zeros_power(power: int) -> tuple[int, ...]:
    """The operator of ``2**power`` zero bytes (squared from the one before)."""
    if power == 0:
        op = (_CRC32C_POLY, *(1 << n for n in range(31)))  # one zero bit
        for _ in range(3):
            op = _gf2_compose(op, op)
        return op
    previous = _zeros_power(power - 1)
    return _gf2_compose(previous, previous)


def _shift(register: int, length: int) -> int:
    """``register`` fed ``length`` zero bytes: one operator application per set bit of
    the length (about 0.1 ms for any length below 2**64), the operators cached."""
    power = 0
    while length:
        if length & 1:
            register = _gf2_apply(_zeros_power(power), register)
        length >>= 1
        power += 1
    return register


def combine_checksums(first: int, second: int, second_length: int) -> int:
    """The content checksum of A followed by B from A's, B's and B's length (zlib's
    crc32_combine for CRC-32C): a chunk checksummed once adds to any region holding it."""
    return _shift(first, second_length) ^ second


def zeros_checksum(length: int, value: int = 0) -> int:
    """The content checksum of ``length`` zero bytes, continuing from ``value`` as
    ``content_checksum(zeros, value)`` would, computed without the zeros (no memory, cost
    independent of the length): an absent chunk of a sparse array adds to a region's
    checksum at no cost.

    Parameters:
        length: how many zero bytes.
        value: the checksum of what precedes them (0 for none).

    Returns:
        The checksum.
    """
    if length < 0:
        raise ValueError("length must not be negative")
    # CRC-32C inverts its register before and after: the zeros shift the inverted value.
    return _shift(value ^ 0xFFFFFFFF, length) ^ 0xFFFFFFFF
