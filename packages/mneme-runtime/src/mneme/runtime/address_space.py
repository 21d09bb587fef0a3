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
    """

    def __init__(self, native: _native.AddressSpace, device=None) -> None:
        self._native = native
        #: the Device whose memory backs the range, None for host memory
        self.device = device

    @classmethod
    def on_host(
        cls, base: int = DEFAULT_BASE, size: int = DEFAULT_SIZE, granularity: int = 2 << 20
    ) -> AddressSpace:
        """A range backed by this process's own memory (mmap), same bookkeeping."""
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
        ``cuCtxEnablePeerAccess`` does not cover. Raises UserError when it cannot reach it."""
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
        return self._native.allocate(size, alignment)

    def allocate_at(self, address: int, size: int) -> Allocation:
        """Recreate an allocation at exactly ``address`` (replay of a recorded layout)."""
        return self._native.allocate_at(address, size)

    def free(self, allocation: Allocation | SupportsInt) -> None:
        self._native.free(int(allocation))

    def reserve_unmapped(self, size: int, alignment: int = 0) -> int:
        """Address space only, whole granules, never mapped by the page manager: what the
        recorder hands an application that maps memory itself (cuMemAddressReserve)."""
        return self._native.reserve_unmapped(size, alignment)

    def release_unmapped(self, address: int) -> bool:
        """Give a reservation back; False when none starts at ``address``."""
        return self._native.release_unmapped(address)

    def live(self) -> list[Allocation]:
        """Live allocations in address order (what a recording snapshots)."""
        return self._native.live()

    def __iter__(self) -> Iterator[Allocation]:
        return iter(self.live())

    def __len__(self) -> int:
        return self._native.stats().live_allocations

    def find(self, address: int) -> Allocation | None:
        """The live allocation containing ``address``, or None."""
        return self._native.find(address)

    def mapped_ranges(self) -> list[tuple[int, int]]:
        """Physically mapped ``[start, end)`` runs of granules."""
        return self._native.mapped_ranges()

    def stats(self) -> AddressSpaceStats:
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
