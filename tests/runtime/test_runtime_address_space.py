"""The page manager's bookkeeping on real host mappings (no GPU needed)."""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)
from mneme.runtime import (
    MIN_ALIGNMENT,
    AddressSpace,
    AllocationError,
    OutOfRangeError,
    OutOfSpaceError,
    RangeUnavailableError,
)
from runtime_helpers import TEST_BASE, host_view

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
GRANULE = 64 * KiB  # small granules keep the host tests light; bookkeeping is size-agnostic


def granules_of(address: int, size: int, base: int, granule: int) -> set[int]:
    first = (address - base) // granule
    last = (address + size - 1 - base) // granule
    return set(range(first, last + 1))


def runs(granules: set[int], base: int, granule: int) -> list[tuple[int, int]]:
    result: list[tuple[int, int]] = []
    for g in sorted(granules):
        start = base + g * granule
        if result and result[-1][1] == start:
            result[-1] = (result[-1][0], start + granule)
        else:
            result.append((start, start + granule))
    return result


def proc_maps_protections(start: int, end: int) -> list[tuple[int, int, str]]:
    """(start, end, perms) of /proc/self/maps entries inside [start, end)."""
    entries = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            if lo < end and hi > start:
                entries.append((max(lo, start), min(hi, end), perms))
    return entries


class AllocatorMachine(RuleBasedStateMachine):
    """Random allocate / allocate_at / free sequences against a plain model."""

    allocations = Bundle("allocations")

    def __init__(self) -> None:
        super().__init__()
        self.space = AddressSpace.on_host(TEST_BASE, 64 * MiB, GRANULE)
        self.model: dict[int, tuple[int, int, int]] = {}  # address -> (size, requested, seq)
        self.freed: list[tuple[int, int]] = []  # (address, requested) of freed allocations
        self.sequence = 0

    def _fill(self, allocation) -> None:
        # Write a per-allocation byte through the returned address: overlaps
        # and missing mappings show up as wrong bytes (or a crash).
        host_view(allocation.address, allocation.size)[:] = allocation.sequence % 251

    def _record(self, allocation, requested: int) -> None:
        self.sequence += 1
        assert allocation.sequence == self.sequence
        assert allocation.requested_size == requested
        assert allocation.size == -(-requested // MIN_ALIGNMENT) * MIN_ALIGNMENT
        self.model[allocation.address] = (allocation.size, requested, allocation.sequence)
        self._fill(allocation)

    @rule(
        target=allocations,
        size=st.one_of(st.integers(1, 4 * KiB), st.integers(1, 3 * GRANULE)),
        alignment=st.sampled_from([1, 256, 1024, 4096, GRANULE]),
    )
    def allocate(self, size, alignment):
        allocation = self.space.allocate(size, alignment)
        assert allocation.address % max(alignment, MIN_ALIGNMENT) == 0
        if allocation.size >= GRANULE:
            assert allocation.address % GRANULE == 0
        self._record(allocation, size)
        return allocation.address

    @precondition(lambda self: self.freed)
    @rule(target=allocations, pick=st.integers(0, 1 << 30))
    def reallocate_freed_at_same_address(self, pick):
        address, requested = self.freed[pick % len(self.freed)]
        end = address + -(-requested // MIN_ALIGNMENT) * MIN_ALIGNMENT
        overlapping = any(a < end and address < a + s for a, (s, _, _) in self.model.items())
        if overlapping:
            with pytest.raises(AllocationError, match="not free"):
                self.space.allocate_at(address, requested)
            return address  # still not ours; free() of it is checked below
        allocation = self.space.allocate_at(address, requested)
        assert allocation.address == address
        self.freed.remove((address, requested))
        self._record(allocation, requested)
        return address

    @rule(address=consumes(allocations))
    def free(self, address):
        if address not in self.model:
            with pytest.raises(AllocationError, match="no live allocation"):
                self.space.free(address)
            return
        _, requested, _ = self.model.pop(address)
        self.space.free(address)
        self.freed.append((address, requested))

    @invariant()
    def live_listing_is_exact(self):
        live = self.space.live()
        assert [(a.address, a.size, a.requested_size, a.sequence) for a in live] == [
            (address, *self.model[address]) for address in sorted(self.model)
        ]

    @invariant()
    def no_overlap_and_inside_range(self):
        previous_end = self.space.base
        for address in sorted(self.model):
            size = self.model[address][0]
            assert address >= previous_end
            previous_end = address + size
        assert previous_end <= self.space.end

    @invariant()
    def contents_survive(self):
        for address, (size, _, seq) in self.model.items():
            view = host_view(address, size)
            assert view[0] == view[-1] == seq % 251
            assert (view == seq % 251).all()

    @invariant()
    def exactly_the_touched_granules_are_mapped(self):
        touched: set[int] = set()
        for address, (size, _, _) in self.model.items():
            touched |= granules_of(address, size, self.space.base, GRANULE)
        assert self.space.mapped_ranges() == runs(touched, self.space.base, GRANULE)
        stats = self.space.stats()
        assert stats.mapped_bytes == len(touched) * GRANULE
        assert stats.live_bytes == sum(s for s, _, _ in self.model.values())
        assert stats.live_allocations == len(self.model)

    def teardown(self):
        # Freeing everything leaves one coalesced block and nothing mapped.
        for address in list(self.model):
            self.space.free(address)
        stats = self.space.stats()
        assert stats.mapped_bytes == 0
        assert stats.largest_free_block == self.space.size
        whole = self.space.allocate(self.space.size)
        assert whole.address == self.space.base
        self.space.close()


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture
def space():
    with AddressSpace.on_host(TEST_BASE, 256 * MiB, 2 * MiB) as s:
        yield s


def test_small_allocations_share_granules(space):
    blocks = [space.allocate(1 * KiB) for _ in range(1000)]
    stats = space.stats()
    assert stats.live_bytes == 1000 * KiB
    assert stats.mapped_bytes == 2 * MiB  # 1000 KiB fit one 2 MiB granule
    for block in blocks:
        space.free(block)
    assert space.stats().mapped_bytes == 0


def test_large_allocations_are_granule_aligned(space):
    space.allocate(300)
    big = space.allocate(3 * MiB)
    assert big.address % (2 * MiB) == 0
    assert big.size == 3 * MiB


def test_freed_range_is_reused_and_neighbours_coalesce(space):
    a, b, c = (space.allocate(1 * MiB) for _ in range(3))
    space.allocate(1 * MiB)
    space.free(a)
    space.free(c)
    space.free(b)  # joins a and c into one 3 MiB hole
    again = space.allocate(3 * MiB - 4 * KiB, alignment=256)
    assert again.address == a.address


def test_mappings_are_real_and_released(space):
    a = space.allocate(5 * MiB)  # granules 0..2, granule 2 half used
    small = space.allocate(100)  # sub-allocated in the tail of granule 2
    assert small.address == a.address + 5 * MiB
    host_view(a.address, a.size)[:] = 7
    rw = [e for e in proc_maps_protections(space.base, space.end) if e[2].startswith("rw")]
    assert [(lo, hi) for lo, hi, _ in rw] == [(space.base, space.base + 6 * MiB)]
    space.free(a)
    # Granules 0 and 1 are released; granule 2 stays for `small`.
    rw = [e for e in proc_maps_protections(space.base, space.end) if e[2].startswith("rw")]
    assert [(lo, hi) for lo, hi, _ in rw] == [(space.base + 4 * MiB, space.base + 6 * MiB)]
    # Released granules come back as fresh pages; the kept one kept its bytes.
    again = space.allocate(4 * MiB)
    assert again.address == a.address
    assert not host_view(again.address, again.size).any()
    space.free(again)
    space.allocate_at(a.address + 4 * MiB, 1 * MiB)
    assert (host_view(a.address + 4 * MiB, 1 * MiB) == 7).all()


def test_allocate_at_reproduces_a_recorded_layout():
    rng = np.random.default_rng(7)
    with AddressSpace.on_host(TEST_BASE, 256 * MiB, 2 * MiB) as recording:
        handles = []
        for _ in range(300):
            if handles and rng.random() < 0.4:
                recording.free(handles.pop(rng.integers(len(handles))))
            else:
                handles.append(recording.allocate(int(rng.integers(1, 3 * MiB))))
        layout = [(a.address, a.requested_size, a.size) for a in recording.live()]
        mapped = recording.mapped_ranges()
    with AddressSpace.on_host(TEST_BASE, 256 * MiB, 2 * MiB) as replay:
        for address, requested, _ in reversed(layout):  # any order works
            replay.allocate_at(address, requested)
        assert [(a.address, a.requested_size, a.size) for a in replay.live()] == layout
        assert replay.mapped_ranges() == mapped


def test_allocate_at_rejects_overlap_and_outside(space):
    a = space.allocate(4 * KiB)
    with pytest.raises(AllocationError, match=r"overlaps live allocation #1 at 0x300000000000"):
        space.allocate_at(a.address + 1 * KiB, 16 * KiB)
    with pytest.raises(OutOfRangeError, match="outside the reserved address range") as info:
        space.allocate_at(space.end - 256, 4 * KiB)
    assert type(info.value).mneme_user_error
    with pytest.raises(OutOfRangeError):
        space.allocate_at(space.base - 4 * KiB, 256)


def test_free_of_unknown_address_is_an_api_error(space):
    a = space.allocate(4 * KiB)
    with pytest.raises(AllocationError, match="no live allocation starts there"):
        space.free(a.address + 256)
    assert not getattr(AllocationError, "mneme_user_error", False)


def test_find_resolves_interior_pointers(space):
    a = space.allocate(1000)
    b = space.allocate(3 * MiB)
    assert space.find(a.address + 999) == a
    assert space.find(b.address + 3 * MiB - 1) == b
    assert space.find(b.address + 3 * MiB) is None
    assert space.find(space.base - 1) is None


def test_out_of_space_says_what_range_would_fit():
    with AddressSpace.on_host(TEST_BASE, 8 * MiB, 2 * MiB) as space:
        space.allocate(5 * MiB)
        with pytest.raises(OutOfSpaceError) as info:
            space.allocate(4 * MiB)
        error = info.value
        assert type(error).mneme_user_error
        message = str(error)
        assert "cannot allocate 4 MiB" in message
        assert "holds 8 MiB" in message
        assert re.search(r"--vass (\d+)", message).group(1) == str(error.needed_gib)
        assert error.requested == 4 * MiB and error.range_size == 8 * MiB
    # The suggested size does hold the same sequence.
    with AddressSpace.on_host(TEST_BASE, error.needed_size, 2 * MiB) as bigger:
        bigger.allocate(5 * MiB)
        bigger.allocate(4 * MiB)


def test_range_in_use_is_a_user_error(space):
    with pytest.raises(RangeUnavailableError, match="cannot reserve .* at 0x300000000000") as info:
        AddressSpace.on_host(TEST_BASE, 2 * MiB, 2 * MiB)
    assert type(info.value).mneme_user_error


def test_closed_space_refuses_use():
    space = AddressSpace.on_host(TEST_BASE, 8 * MiB, 2 * MiB)
    space.close()
    space.close()
    with pytest.raises(AllocationError, match="closed"):
        space.allocate(1)
    # The range really went back: it can be reserved again.
    AddressSpace.on_host(TEST_BASE, 8 * MiB, 2 * MiB).close()


def test_bad_arguments(space):
    with pytest.raises(AllocationError, match="positive"):
        space.allocate(0)
    with pytest.raises(AllocationError, match="power of two"):
        space.allocate(16, alignment=3)
    with pytest.raises(AllocationError, match="multiple of the mapping granularity"):
        AddressSpace.on_host(TEST_BASE + 4096, 8 * MiB, 2 * MiB)


def test_concurrent_threads_never_share_bytes(space):
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        mine = []
        try:
            for _ in range(300):
                if mine and rng.random() < 0.5:
                    a = mine.pop(rng.integers(len(mine)))
                    assert (host_view(a.address, a.size) == seed).all()
                    space.free(a)
                else:
                    a = space.allocate(int(rng.integers(1, 64 * KiB)))
                    host_view(a.address, a.size)[:] = seed
                    mine.append(a)
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_reservations_for_memory_the_application_maps_itself():
    """cuMemAddressReserve served from the range: whole granules of address space that the
    page manager never maps and never hands to an allocation, given back whole."""
    space = AddressSpace.on_host(TEST_BASE, 64 * MiB, GRANULE)
    try:
        small = space.allocate(100)
        reserved = space.reserve_unmapped(3 * GRANULE + 1)
        assert reserved % GRANULE == 0 and TEST_BASE <= reserved < TEST_BASE + 64 * MiB
        assert not (reserved <= small.address < reserved + 4 * GRANULE)
        # nothing of it is mapped by the page manager, and allocations go around it
        assert all(end <= reserved or start >= reserved + 4 * GRANULE
                   for start, end in space.mapped_ranges())
        others = [space.allocate(GRANULE) for _ in range(8)]
        assert all(a.address + a.size <= reserved or a.address >= reserved + 4 * GRANULE
                   for a in others)
        assert space.release_unmapped(reserved) and not space.release_unmapped(reserved)
        again = space.allocate(4 * GRANULE, GRANULE)  # the space is free again
        assert again.address == reserved
    finally:
        space.close()
