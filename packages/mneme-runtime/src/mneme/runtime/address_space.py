"""A fixed virtual address range with an allocator inside it (see docs/runtime.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import SupportsInt

from mneme.runtime import _native

Allocation = _native.Allocation
AddressSpaceStats = _native.AddressSpaceStats

#: Where ranges are reserved unless told otherwise: 32 TiB, far from the
#: kernel's mmap area and the CUDA driver's own mappings.
DEFAULT_BASE: int = _native.DEFAULT_BASE
#: Default range size (64 GiB); the recorder's ``--vass`` sets it.
DEFAULT_SIZE: int = _native.DEFAULT_SIZE
#: Every allocation is aligned to at least this many bytes, like cudaMalloc.
MIN_ALIGNMENT: int = _native.MIN_ALIGNMENT

GiB = 1 << 30


class AddressSpace:
    """Allocations at stable addresses inside one reserved range.

    Get one from :meth:`mneme.runtime.Device.address_space` (device memory) or
    :meth:`on_host` (host memory, no GPU needed). Close it (or use ``with``) to
    give the memory back.

    Parameters:
        native: the native range (``mneme.runtime._native.AddressSpace``) this wraps.
        device: the Device whose memory backs the range; None for host memory.
    """

    def __init__(self, native: _native.AddressSpace, device=None) -> None:
        self._native = native
        #: the Device whose memory backs the range, None for host memory
        self.device = device

    @classmethod
    def on_host(
        cls, base: int = DEFAULT_BASE, size: int = DEFAULT_SIZE, granularity: int = 2 << 20
    ) -> AddressSpace:
        """A range backed by this process's own memory (mmap), same bookkeeping.

        Parameters:
            base: the range's first address.
            size: its size in bytes.
            granularity: the size of the pages mapped and unmapped as allocations come
                and go.

        Returns:
            The range, reserved.

        Raises:
            RangeUnavailableError: part of ``[base, base + size)`` is in use.
        """
        return cls(_native.host_address_space(base, size, granularity))

    @property
    def base(self) -> int:
        return self._native.base

    @property
    def size(self) -> int:
        return self._native.size

    def share_with(self, device) -> None:
        """Let ``device`` (a Device or an ordinal) read and write the range's memory as
        well, mapped now and later: peer access for memory of the VMM API, which
        ``cuCtxEnablePeerAccess`` does not cover.

        Parameters:
            device: a Device or a device ordinal.

        Raises:
            UserError: ``device`` cannot reach this range's device.
        """
        self._native.share_with(int(getattr(device, "ordinal", device)))

    @property
    def end(self) -> int:
        return self._native.base + self._native.size

    @property
    def granularity(self) -> int:
        return self._native.granularity

    @property
    def closed(self) -> bool:
        return self._native.closed

    def allocate(self, size: int, alignment: int = MIN_ALIGNMENT) -> Allocation:
        """A new allocation, first fit from the lowest address (the same requests give
        the same addresses).

        Parameters:
            size: bytes requested (rounded up to 256).
            alignment: at least 256; allocations of a granule or more are
                granule-aligned.

        Returns:
            The allocation (``int()`` of it is its address).

        Raises:
            OutOfSpaceError: no free block fits; it carries the range size that would.
        """
        return self._native.allocate(size, alignment)

    def allocate_at(self, address: int, size: int) -> Allocation:
        """Recreate an allocation at exactly ``address`` (replay of a recorded layout).

        Parameters:
            address: where the allocation starts.
            size: its size in bytes.

        Returns:
            The allocation.

        Raises:
            OutOfRangeError: ``[address, address + size)`` is not inside the range.
            AllocationError: a live allocation overlaps it.
        """
        return self._native.allocate_at(address, size)

    def free(self, allocation: Allocation | SupportsInt) -> None:
        """Free an allocation; a granule no live allocation touches is unmapped.

        Parameters:
            allocation: an Allocation or its address.

        Raises:
            AllocationError: no live allocation starts there.
        """
        self._native.free(int(allocation))

    def reserve_unmapped(self, size: int, alignment: int = 0) -> int:
        """Address space only, whole granules, never mapped by the page manager: what the
        recorder hands an application that maps memory itself (cuMemAddressReserve).

        Parameters:
            size: bytes (rounded up to whole granules).
            alignment: of the start; 0 for the granularity.

        Returns:
            The reservation's first address.

        Raises:
            OutOfSpaceError: no free block of the range fits.
        """
        return self._native.reserve_unmapped(size, alignment)

    def release_unmapped(self, address: int) -> bool:
        """Give a reservation of :meth:`reserve_unmapped` back.

        Parameters:
            address: the reservation's first address.

        Returns:
            False when no reservation starts at ``address``.
        """
        return self._native.release_unmapped(address)

    def live(self) -> list[Allocation]:
        """Live allocations in address order (what a recording snapshots).

        Returns:
            The allocations.
        """
        return self._native.live()

    def __iter__(self) -> Iterator[Allocation]:
        return iter(self.live())

    def __len__(self) -> int:
        return self._native.stats().live_allocations

    def find(self, address: int) -> Allocation | None:
        """The live allocation containing an address (an interior pointer resolved).

        Parameters:
            address: any address.

        Returns:
            The allocation, or None when no live allocation holds ``address``.
        """
        return self._native.find(address)

    def mapped_ranges(self) -> list[tuple[int, int]]:
        """Physically mapped runs of granules.

        Returns:
            ``(start, end)`` of each run, in address order.
        """
        return self._native.mapped_ranges()

    def stats(self) -> AddressSpaceStats:
        """The range's counters: live allocations and bytes (and their peaks), mapped
        bytes, free bytes and the largest free block, allocations and frees so far.

        Returns:
            A snapshot of them.
        """
        return self._native.stats()

    def close(self) -> None:
        """Unmap everything and release the range; idempotent."""
        self._native.close()

    def __enter__(self) -> AddressSpace:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "AddressSpace(closed)"
        return (
            f"AddressSpace(base={self.base:#x}, size={_native.format_bytes(self.size)}, "
            f"granularity={_native.format_bytes(self.granularity)}, "
            f"backend={self._native.backend!r})"
        )
