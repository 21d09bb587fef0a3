"""Sparse regions: restore, reset and verify only the bytes a recording holds.

A framework's memory pool is one region (JAX preallocates 75 % of the GPU: a single
106 GB region on an H200), most of which no kernel ever wrote. The recorder stores such a
region's prologue *sparse*: its all-zero chunks are absent (docs/format.md), and its XOR
epilogue has a chunk only where the launch changed something. A region's **live** ranges
are the chunks stored on either side; everything else was zero before the launch and after
it. Replay maps the whole region at its recorded address (the kernel may read those zeros,
a buffer the application cleared), but keeps pristine and expected copies of the live
ranges only, puts the zero ranges back with a memset on a full reset, and verifies them
against a small zero buffer that the comparison kernels read over and over (one launch per
zero range, however long: ``RegionCheck.period``). Without this a 106 GB region needed three times its size on the
device (itself, its pristine copy, its expected epilogue) and could not be replayed at all.

Regions whose zero ranges would save less than ``MIN_ZERO_BYTES`` are handled whole, as
before: the split only pays where it saves memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from ..db.chunks import stored_chunk_indices
from .reset_plan import merge

#: zero ranges below this in all keep a region whole
MIN_ZERO_BYTES = 64 << 20
#: the zero buffer verification compares zero ranges with, repeated over each range (a power
#: of two that stays in L2: a 64 MiB buffer in pieces cost 1,600 launches per 106 GB pool)
ZERO_BUFFER_BYTES = 1 << 20


@dataclass(frozen=True)
class RegionParts:
    """A sparse region's offsets: ``live`` [lo, hi) ranges hold recorded bytes, ``zero``
    ranges were zero before and after the launch (both sorted, together the region)."""

    live: tuple[tuple[int, int], ...]
    zero: tuple[tuple[int, int], ...]

    @property
    def live_bytes(self) -> int:
        return sum(hi - lo for lo, hi in self.live)

    @property
    def zero_bytes(self) -> int:
        return sum(hi - lo for lo, hi in self.zero)


def region_parts(instance, region, alignment: int) -> RegionParts | None:
    """The live and zero ranges of ``region`` from the chunk files present (nothing is
    read), live ranges widened to ``alignment``; None where the region is handled whole:
    a dense prologue or epilogue, or too little zero to be worth the split."""
    size = int(region.size)
    if size < MIN_ZERO_BYTES:
        return None
    prologue, _ = instance.stored_array("prologue", region.name)
    epilogue, _ = instance.stored_array("epilogue", region.name)
    if not (prologue.absent_is_zero and epilogue.absent_is_zero):
        return None
    present = set(stored_chunk_indices(prologue)) | set(stored_chunk_indices(epilogue))
    widened = []
    for index in present:
        lo, hi = prologue.chunk_bounds(index)
        widened.append((lo // alignment * alignment, min(size, -(-hi // alignment) * alignment)))
    live = merge(widened, gap=1)
    zero, at = [], 0
    for lo, hi in live:
        if lo > at:
            zero.append((at, lo))
        at = hi
    if at < size:
        zero.append((at, size))
    if sum(hi - lo for lo, hi in zero) < MIN_ZERO_BYTES:
        return None
    return RegionParts(tuple(live), tuple(zero))


def subtract(address: int, size: int, holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(address, size) pieces of [address, address + size) outside ``holes`` ((address,
    size), sorted, not overlapping)."""
    pieces, at, end = [], address, address + size
    for start, length in holes:
        lo, hi = max(start, address), min(start + length, end)
        if lo >= hi:
            continue
        if lo > at:
            pieces.append((at, lo - at))
        at = max(at, hi)
    if at < end:
        pieces.append((at, end - at))
    return pieces


class CheckRange(NamedTuple):
    """One device range that verifies (part of) a region."""

    actual: int  # where the replayed bytes are
    expected: int  # where the recorded bytes are (or the zero buffer)
    size: int  # bytes
    address: int  # the recorded address, for mismatches
    period: int = 0  # bytes of ``expected`` repeated over the range (0: as long as it)
