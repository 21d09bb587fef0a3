"""Helpers of the device-layer tests (a unique module name: tests/ has no packages)."""

from __future__ import annotations

import ctypes

import numpy as np

# Host-memory ranges of the CPU tests live here, away from the default base
# the GPU tests reserve.
TEST_BASE = 0x300000000000


def host_view(address: int, nbytes: int) -> np.ndarray:
    """A uint8 array over process memory at ``address`` (host-backed spaces only)."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
