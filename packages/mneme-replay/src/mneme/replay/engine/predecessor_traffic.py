"""What the launch before an instance on its stream moved through L2, replayed before each
timed iteration of ``app`` mode (timing.py), so the cache holds what it held in the
application when the instance started.

The recorder keeps, per instance, the memory that launch may have written and read
("predecessor", docs/format.md). In the application it streamed those ranges through L2
together; what stays cached is the end of that stream, dirty where it wrote. Replay goes
over the same amount of memory in the same interleaved way with one kernel (l2_touch.py):

- ranges inside the instance's recorded memory are touched in place (a written one is
  rewritten with its own bytes: dirty in L2, unchanged, since the iteration's reset has
  just put the prologue back);
- ranges outside it (the application's other buffers, not part of the replay) are
  touched on scratch memory of the same size, so they take their share of L2 as well.

Bounds: the recorder counts a range from the pointer to its allocation's end, so each is
cut to L2's size from its start (a kernel's data begins at its pointer); when the traffic
still exceeds ``TAIL_FACTOR`` times L2, only the same last fraction of every range is
touched (what came before would be evicted by the time the instance runs). Recordings
made before reads were kept replay the writes alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from .l2_touch import UNIT

#: traffic beyond this many L2 sizes is left out (its start; see the module docstring)
TAIL_FACTOR = 2


@dataclass(frozen=True)
class TrafficPlan:
    """``in_place``: (device address, bytes, written) in the instance's memory;
    ``elsewhere``: (offset into scratch, bytes, written); ``scratch_bytes`` of scratch."""

    in_place: list[tuple[int, int, bool]]
    elsewhere: list[tuple[int, int, bool]]
    scratch_bytes: int

    def segments(self, scratch: int) -> list[tuple[int, int, bool]]:
        """Every segment at its device address, given where the scratch memory is."""
        return self.in_place + [(scratch + offset, size, written) for offset, size, written in self.elsewhere]

    @property
    def bytes(self) -> int:
        return sum(size for _, size, _ in self.in_place + self.elsewhere)


def scratch_bound(l2_bytes: int) -> int:
    """Scratch a plan can need at most (reserved with the image's address space)."""
    return TAIL_FACTOR * l2_bytes + UNIT


def plan(instance, spans: list[tuple[int, int]], l2_bytes: int) -> TrafficPlan | None:
    """The plan for ``instance`` whose recorded memory is ``spans`` ((address, bytes));
    None when the recording does not say what the launch before it touched."""
    before = getattr(instance, "predecessor", None)
    if before is None or before.writes is None:
        return None
    ranges = [(a, min(n, l2_bytes), True) for a, n in before.writes]
    ranges += [(a, min(n, l2_bytes), False) for a, n in before.reads or ()]
    total = sum(n for _, n, _ in ranges)
    if total > TAIL_FACTOR * l2_bytes:  # only the end of the stream stays in L2
        keep = TAIL_FACTOR * l2_bytes / total
        ranges = [(a + n - int(n * keep), int(n * keep), w) for a, n, w in ranges]
    in_place, elsewhere, scratch = [], [], 0
    for address, size, written in ranges:
        inside, outside = _split(address, size, spans)
        in_place += [_units(a, n, written) for a, n in inside]
        for piece in outside:
            elsewhere.append((scratch, piece, written))
            scratch += piece
    in_place = [s for s in in_place if s[1] > 0]
    elsewhere = [(offset, size // UNIT * UNIT, w) for offset, size, w in elsewhere if size >= UNIT]
    return TrafficPlan(in_place, elsewhere, sum(size for _, size, _ in elsewhere))


def _split(address: int, size: int, spans: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[int]]:
    """The parts of [address, address+size) inside ``spans`` ((address, bytes) each) and
    the sizes of the parts outside."""
    inside, outside, at, end = [], [], address, address + size
    for lo, n in sorted(spans):
        hi = lo + n
        if hi <= at or lo >= end:
            continue
        if lo > at:
            outside.append(lo - at)
        inside.append((max(lo, at), min(hi, end) - max(lo, at)))
        at = min(hi, end)
    if at < end:
        outside.append(end - at)
    return inside, outside


def _units(address: int, size: int, written: bool) -> tuple[int, int, bool]:
    """Whole 16-byte units of the range (its ragged ends are left out)."""
    start = -(-address // UNIT) * UNIT
    stop = (address + size) // UNIT * UNIT
    return start, max(stop - start, 0), written
