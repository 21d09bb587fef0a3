"""Fixtures of the device-layer tests."""

from __future__ import annotations

import pytest
from mneme.runtime import Device, driver_available


@pytest.fixture(scope="module")
def device() -> Device:
    if not driver_available():
        pytest.skip("no usable CUDA driver (libcuda.so.1 missing or cuInit failed)")
    return Device(0)
