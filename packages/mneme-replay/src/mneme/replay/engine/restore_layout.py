"""Where a restore puts the recorded memory, decided before any byte moves: heap regions
merged into aligned spans, the mapped slack around them that a canary fills (and every
run checks), and the GPUs of this machine that stand in for the recorded process's other
GPUs (peer regions). restore.py's DeviceImage then maps and fills them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import RestoreError

ALIGNMENT = 256  # what the recorder's allocator (and cudaMalloc) aligns to


def round_up(value: int, multiple: int) -> int:
    """``value`` rounded up to a multiple of ``multiple``."""
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class Span:
    """A run of recorded heap memory allocated as one piece (regions merged).

    Attributes:
        address: its first address.
        size: its size in bytes.
    """

    address: int
    size: int


#: what the mapped bytes around recorded regions hold, checked after every run: a kernel
#: that writes memory it was not recorded with (an out-of-bounds candidate, or a pointer
#: `--capture reachable` could not see) changes them and fails verification
CANARY = 0xA5
#: the slack checked at most; beyond it (many scattered small regions) it is not checked
MAX_SLACK = 256 << 20


def slack_intervals(spans: list[Span], granularity: int) -> list[Span]:
    """The mapped bytes that belong to no span: the rest of every granule a span touches."""
    out: list[Span] = []
    mapped: list[list[int]] = []
    for span in sorted(spans, key=lambda s: s.address):
        lo = span.address // granularity * granularity
        hi = round_up(span.address + span.size, granularity)
        if mapped and lo <= mapped[-1][1]:
            mapped[-1][1] = max(mapped[-1][1], hi)
        else:
            mapped.append([lo, hi])
    ordered = sorted(spans, key=lambda s: s.address)
    for lo, hi in mapped:
        at = lo
        for span in ordered:
            if span.address + span.size <= lo or span.address >= hi:
                continue
            if span.address > at:
                out.append(Span(at, span.address - at))
            at = max(at, span.address + span.size)
        if at < hi:
            out.append(Span(at, hi - at))
    return out


def merge_spans(regions: list, alignment: int = ALIGNMENT) -> list[Span]:
    """The spans to allocate for heap regions: disjoint, aligned, overlaps and touching
    neighbours merged.

    Parameters:
        regions: the regions (anything with ``address`` and ``size``).
        alignment: the spans' alignment.

    Returns:
        The spans, in address order.
    """
    spans: list[list[int]] = []
    for region in sorted(regions, key=lambda r: r.address):
        if region.size == 0:
            continue
        start = region.address // alignment * alignment
        end = round_up(region.address + region.size, alignment)
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    return [Span(start, end - start) for start, end in spans]


def peer_devices(device, recorded: list[int], instance_id: str) -> dict:
    """A GPU of this machine for each other GPU of the recorded process whose memory the
    instance reached (recorded ordinal -> Device), each reachable from ``device`` (peer
    access); the GPU of the same ordinal when it can serve. RestoreError when too few."""
    from mneme.runtime import Device, can_access_peer, device_count

    count = device_count()
    here = device.ordinal
    usable = [o for o in range(count) if o != here and can_access_peer(here, o)]
    if len(usable) < len(recorded):
        need = len(recorded) + 1
        raise RestoreError(
            f"instance {instance_id} reads the memory of {len(recorded)} other GPU(s) of the recorded "
            f"process (peer access): replay it on a machine with {need} GPUs that reach each other "
            f"(this one shows {count}, {len(usable)} reachable from GPU {here})"
        )
    chosen: dict[int, int] = {r: r for r in recorded if r in usable}
    rest = iter(o for o in usable if o not in chosen.values())
    for r in recorded:
        if r not in chosen:
            chosen[r] = next(rest)
    return {r: Device(o) for r, o in chosen.items()}
