"""The CUDA mapping backend on a real GPU: a large allocation is mapped in physical blocks
of up to 1 GiB (its edge granules alone), small neighbours share its edge granules and keep
their bytes when it is freed, its blocks go back to the device then, the same granules map
again, and every byte keeps what was written to it; nothing stays mapped at the end."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

BASE = 0x2400_0000_0000
GiB = 1 << 30


def _pattern(address: int, size: int) -> np.ndarray:
    return (np.arange(size, dtype=np.uint64) * 2654435761 + address).astype(np.uint8)


def _check(device, address: int, expected: np.ndarray) -> None:
    out = np.empty_like(expected)
    device.copy_from_device(out, address)
    assert np.array_equal(out, expected), f"bytes at {address:#x} changed"


def test_large_allocations_map_in_blocks_and_give_them_back(device):
    free_before = device.memory_info()[0]
    granule = int(device.properties.granularity)
    with device.address_space(BASE, 16 * GiB) as space:
        left = space.allocate_at(BASE, 4096)  # shares the big one's first granule
        big = space.allocate_at(BASE + 8192, 3 * GiB + 5 * granule)
        right = space.allocate_at(BASE + 8192 + 3 * GiB + 5 * granule, 4096)  # its last granule
        assert free_before - device.memory_info()[0] >= 3 * GiB
        data = {}
        for a in (left, right):
            data[int(a.address)] = _pattern(int(a.address), 4096)
        # the big one written at its start, across a block boundary and at its end
        probes = [int(big.address), int(big.address) + GiB + granule - 4096,
                  int(big.address) + int(big.size) - (1 << 20)]
        for at in probes:
            data[at] = _pattern(at, 1 << 20)
        for at, values in data.items():
            device.copy_to_device(at, values)
        device.fill(int(big.address) + 2 * GiB, 0x5A, 64 << 20)
        for at, values in data.items():
            _check(device, at, values)
        # freed: its interior blocks go back; the edge granules stay (the neighbours)
        space.free(int(big.address))
        _check(device, int(left.address), data[int(left.address)])
        _check(device, int(right.address), data[int(right.address)])
        assert free_before - device.memory_info()[0] < GiB
        # allocated again over the same granules, partly inside blocks still live
        again = space.allocate_at(int(big.address), int(big.size))
        values = _pattern(7, 8 << 20)
        for at in (int(again.address), int(again.address) + int(again.size) - values.size):
            device.copy_to_device(at, values)
            _check(device, at, values)
        space.free(int(left.address))
        space.free(int(right.address))
        space.free(int(again.address))
        assert space.stats().mapped_bytes == 0
    assert free_before - device.memory_info()[0] < 64 << 20
