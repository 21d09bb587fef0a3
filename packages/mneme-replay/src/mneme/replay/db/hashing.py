"""The dynamic hash of a kernel instance (specified in docs/format.md).

FNV-1a 64 so that the C++ recorder computes the same value with a few lines of code.
"""

from __future__ import annotations

import struct

from mneme.runtime.recording_format import FNV_OFFSET, FNV_PRIME

_MASK = (1 << 64) - 1


def fnv1a64(data: bytes, value: int = FNV_OFFSET) -> int:
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
) -> str:
    """FNV-1a 64 over: the static hash's 16 ASCII digits, then grid x,y,z, block x,y,z and
    dynamic shared memory as little-endian uint32 (a launch in thread-block clusters adds
    the cluster's x,y,z: earlier launches keep their hashes), then the raw argument buffer."""
    head = static_hash.encode("ascii") + struct.pack("<7I", *grid, *block, shared_mem)
    if is_clustered(cluster):
        head += struct.pack("<3I", *cluster)
    return f"{fnv1a64(bytes(args), fnv1a64(head)):016x}"


def is_clustered(cluster) -> bool:
    """Whether a launch ran in thread-block clusters of more than one block."""
    return cluster is not None and cluster[0] * cluster[1] * cluster[2] > 1
