"""mneme device layer: fixed-address virtual memory on the CUDA VMM API, code loading,
launches, copies and timing, shared by the recorder and the replay engine.

The CUDA driver is loaded at run time: this package imports on machines without
one, and :class:`Device` then raises :class:`NoDriverError` (a user error).
"""

from mneme.runtime.address_space import (
    DEFAULT_BASE,
    DEFAULT_SIZE,
    MIN_ALIGNMENT,
    AddressSpace,
    AddressSpaceStats,
    Allocation,
)
from mneme.runtime.device import (
    Device,
    DeviceProperties,
    Event,
    Function,
    FunctionAttributes,
    Module,
    ParamInfo,
    Stream,
    can_access_peer,
    device_count,
    driver_available,
)
from mneme.runtime.errors import (
    AllocationError,
    DeviceLayerError,
    DriverError,
    NoDeviceError,
    NoDriverError,
    OutOfRangeError,
    OutOfSpaceError,
    RangeUnavailableError,
    UserError,
)

__all__ = [
    "DEFAULT_BASE",
    "DEFAULT_SIZE",
    "MIN_ALIGNMENT",
    "AddressSpace",
    "AddressSpaceStats",
    "Allocation",
    "AllocationError",
    "Device",
    "DeviceLayerError",
    "DeviceProperties",
    "DriverError",
    "Event",
    "Function",
    "FunctionAttributes",
    "Module",
    "NoDeviceError",
    "NoDriverError",
    "OutOfRangeError",
    "OutOfSpaceError",
    "ParamInfo",
    "RangeUnavailableError",
    "Stream",
    "UserError",
    "can_access_peer",
    "device_count",
    "driver_available",
]
