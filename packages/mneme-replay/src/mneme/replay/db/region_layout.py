"""The layout rules of an instance's region list (docs/format.md, "Layout rules"): the one
definition that the reader enforces and the Python writer checks before it commits (the
C++ writer, recording_writer.cpp, checks the same rules)."""

from __future__ import annotations

from collections.abc import Sequence

from .layout import IN_RANGE_KIND, PEER_KIND
from .schema import RegionInfo

#: The smallest mapping granularity of any backend (a host page): a recorded address
#: range starts and ends on it.
MIN_GRANULARITY = 4096


def region_layout_problem(regions: Sequence[RegionInfo], vas_base: int, vas_size: int) -> str | None:
    """What breaks the rules in ``regions`` (in stored order), as one line; None when
    nothing does: sorted by address with no repeats, no two overlapping, heap regions
    inside the recorded address range ``[vas_base, vas_base + vas_size)``, peer regions
    (another GPU's memory) naming their device and outside it."""
    for a, b in zip(regions, regions[1:], strict=False):
        if b.address == a.address:
            return f"region {a.name} is recorded twice"
        if b.address < a.address:
            return f"regions {a.name} and {b.name} are not sorted by address"
        if a.address + a.size > b.address:
            return f"regions {a.name} and {b.name} overlap"
    hi = vas_base + vas_size
    for r in regions:
        if r.kind == IN_RANGE_KIND and not (vas_base <= r.address and r.address + r.size <= hi):
            return f"heap region {r.name} lies outside the recorded address range"
        if r.kind == PEER_KIND and r.device is None:
            return f"peer region {r.name} names no device"
        if r.kind == PEER_KIND and r.address < hi and vas_base < r.address + r.size:
            return f"peer region {r.name} lies inside the instance's own address range"
    return None


def address_space_problem(vas_base: int, vas_size: int) -> str | None:
    """A recorded address range no recorder reserves: one not on page boundaries."""
    if vas_base % MIN_GRANULARITY or vas_size % MIN_GRANULARITY:
        return (f"address range {vas_base:#x}+{vas_size:#x} is not a whole number of "
                f"{MIN_GRANULARITY}-byte pages (the root metadata was changed)")
    return None
