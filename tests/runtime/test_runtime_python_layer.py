"""The Python surface of the device layer that needs no GPU."""

from __future__ import annotations

import struct
import sys

import mneme.runtime as rt
import numpy as np
import pytest
from mneme.runtime import _native
from mneme.runtime.device import _byte_view, _dim3, _encode


def test_no_driver_is_a_clean_user_error():
    if rt.driver_available():
        pytest.skip("a CUDA driver is installed here")
    with pytest.raises(rt.NoDriverError, match="no CUDA driver: cannot load libcuda.so.1") as info:
        rt.Device(0)
    assert type(info.value).mneme_user_error
    assert isinstance(info.value, RuntimeError)


def test_error_classes_split_user_and_driver_errors():
    for cls in (
        rt.RangeUnavailableError,
        rt.OutOfSpaceError,
        rt.OutOfRangeError,
        rt.NoDriverError,
        rt.NoDeviceError,
    ):
        assert issubclass(cls, RuntimeError) and cls.mneme_user_error is True
    for cls in (rt.DriverError, rt.AllocationError, rt.DeviceLayerError):
        assert not getattr(cls, "mneme_user_error", False)
    error = rt.DriverError("cuMemMap failed", code=2, name="CUDA_ERROR_OUT_OF_MEMORY")
    assert (error.code, error.name) == (2, "CUDA_ERROR_OUT_OF_MEMORY")


def test_native_module_uses_the_stable_abi():
    if sys.version_info < (3, 12):
        pytest.skip("the stable ABI build is for Python >= 3.12")
    assert _native.__file__.endswith(".abi3.so")


def test_argument_encoding():
    assert _encode(0x1122, 8) == struct.pack("<Q", 0x1122)
    assert _encode(-1, 4) == b"\xff\xff\xff\xff"
    assert _encode(1.5, 4) == struct.pack("<f", 1.5)
    assert _encode(1.5, 8) == struct.pack("<d", 1.5)
    assert _encode(np.float16(2.0), 2) == np.float16(2.0).tobytes()
    assert _encode(b"abc", 3) == b"abc"
    with pytest.raises(ValueError, match="float"):
        _encode(1.0, 2)


def test_launch_shapes():
    assert _dim3(7) == (7, 1, 1)
    assert _dim3((2, 3)) == (2, 3, 1)
    with pytest.raises(ValueError, match="1 to 3"):
        _dim3((1, 2, 3, 4))


def test_buffers_are_flat_byte_views_not_copies():
    data = bytearray(b"hello")
    view = _byte_view(data, writable=True)
    data[0] = ord("j")
    assert view.tobytes() == b"jello"
    array = np.arange(12, dtype=np.int32).reshape(3, 4)
    flat = _byte_view(array)
    assert flat.dtype == np.uint8 and flat.nbytes == array.nbytes
    assert np.shares_memory(flat, array)
    structured = np.zeros(3, dtype=[("x", np.float16), ("flag", np.bool_)])
    assert _byte_view(structured).nbytes == structured.nbytes
    strided = _byte_view(array[:, ::2])
    assert strided.view(np.int32).tolist() == [0, 2, 4, 6, 8, 10]
    assert _byte_view(b"abc").tobytes() == b"abc"
    with pytest.raises(ValueError, match="C-contiguous"):
        _byte_view(array[:, ::2], writable=True)
    with pytest.raises(ValueError, match="read-only"):
        _byte_view(b"abc", writable=True)
    with pytest.raises(TypeError):
        _byte_view([1, 2, 3])
