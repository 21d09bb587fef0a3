"""What a timed iteration must put back: the bytes the recorded launch changed.

Between timed iterations replay brings memory back to the prologue. Copying every
recorded byte (``DeviceImage.reset``) is correct but rewrites read-only inputs too: on an
instance larger than L2 (three 16 MiB buffers on a 50 MB L2) the copies evict the very
data the kernel is about to use, so ``warm`` and ``app`` measure a cold kernel (seen on
the H200: a damping kernel that reads what the kernel before it wrote ran 0.0114 ms in
the application and 0.016 ms in every replay mode). The bytes the recorded launch
changed are known from the recording alone, without reading it: a region whose prologue
and epilogue checksums agree did not change, and an epilogue stored as its XOR with the
prologue has a chunk file only where the launch changed something (both writers skip
zero chunks). Only those ranges are copied back per iteration; everything else still
holds the prologue, because the unchanged kernel wrote nothing there.

The ``app`` cache mode then also replays what the launch before this one on its stream
moved through L2 (predecessor_traffic.py).

A candidate that writes outside these ranges changes inputs of its later iterations,
which only a wrong candidate does: verification (against the whole epilogue) fails it
either way. Each measurement starts from a full reset, so one candidate's stray writes
never reach the next.
"""

from __future__ import annotations

import os

#: changed ranges closer than this are copied as one (fewer, larger copies)
MERGE_GAP = 256 << 10
#: more copies than this per iteration, and the reset copies whole spans instead
MAX_COPIES = 256


def changed_ranges(instance, region) -> list[tuple[int, int]]:
    """(start, end) offsets of ``region`` the recorded launch changed, from metadata and
    the chunk files' presence (nothing is decompressed); the whole region where the
    recording cannot tell (format 1, an epilogue stored as plain bytes)."""
    whole = [(0, int(region.size))] if region.size else []
    checksums = instance.region_checksums(region.name)
    if checksums is None:
        return whole
    if checksums[0] == checksums[1]:
        return []
    info, encoding = instance.stored_array("epilogue", region.name)
    if encoding == "bytes":
        return whole
    try:
        names = [entry.name for entry in os.scandir(info.path / "c")]
    except FileNotFoundError:
        return whole  # checksums differ but no delta chunk: trust the checksums
    indices = sorted(int(n) for n in names if n.isdigit())
    return merge([info.chunk_bounds(i) for i in indices]) or whole


def merge(ranges: list[tuple[int, int]], gap: int | None = None) -> list[tuple[int, int]]:
    """Sorted ranges with those less than ``gap`` (default MERGE_GAP) apart joined."""
    gap = MERGE_GAP if gap is None else gap
    out: list[list[int]] = []
    for start, end in sorted(ranges):
        if out and start - out[-1][1] < gap:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def written_copies(instance, heap_regions, pristine: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """(dst, src, size) device copies that put back what the recorded launch changed in
    the heap regions (managed and peer memory included), given the full reset's copies
    ``pristine`` (one per span, or per piece of a span around sparse regions' zero ranges,
    sparse_regions.py). A piece with more changed ranges than ``MAX_COPIES`` allows is
    copied whole."""
    by_piece: dict[int, list[tuple[int, int]]] = {}
    for region in heap_regions:
        address = int(region.address)
        for lo, hi in changed_ranges(instance, region):
            start, end = address + lo, address + hi
            piece = next((i for i, (dst, _, size) in enumerate(pristine) if dst <= start < dst + size), None)
            if piece is None:
                continue
            dst, _, size = pristine[piece]
            by_piece.setdefault(piece, []).append((start - dst, min(end, dst + size) - dst))
    copies: list[tuple[int, int, int]] = []
    for piece, ranges in sorted(by_piece.items()):
        dst, src, _ = pristine[piece]
        copies.extend((dst + lo, src + lo, hi - lo) for lo, hi in merge(ranges) if hi > lo)
    if len(copies) > MAX_COPIES:
        return [pristine[piece] for piece in sorted(by_piece) if by_piece[piece]]
    return copies
