"""Errors of the device layer, under mneme's one root (mneme.instrument.errors.MnemeError).

Classes with ``mneme_user_error = True`` are conditions a user can fix (the CLI
prints them as one line); driver failures and API misuse are distinct. The
native module raises these exact classes, looked up here by name.
"""

from __future__ import annotations

from mneme.instrument.errors import MnemeError


class DeviceLayerError(MnemeError, RuntimeError):
    """Base of every error the device layer raises (a RuntimeError too, as it always was)."""


class UserError(DeviceLayerError):
    """A condition the user can fix; shown as one line, no traceback."""

    mneme_user_error = True


class RangeUnavailableError(UserError):
    """The fixed virtual address range is (partly) in use."""


class OutOfSpaceError(UserError):
    """The reserved range has no free block for an allocation.

    Parameters:
        message: the one line shown (what was requested, what the range holds).
        requested: the bytes asked for.
        range_size: the range's size.
        needed_size: a range size (bytes, whole GiB) that would have held the
            allocation: the ``--vass`` to record with.
    """

    def __init__(
        self, message: str, requested: int = 0, range_size: int = 0, needed_size: int = 0
    ) -> None:
        super().__init__(message)
        self.requested = requested
        self.range_size = range_size
        #: a range size (bytes, whole GiB) that would have held the allocation
        self.needed_size = needed_size

    @property
    def needed_gib(self) -> int:
        """``needed_size`` in GiB, rounded up."""
        return -(-self.needed_size // (1 << 30))


class OutOfRangeError(UserError):
    """An address lies outside the reserved range."""


class ClockPolicyError(UserError):
    """A ``--clock-control`` value mneme does not know (clock_control.py)."""


class NoDriverError(UserError):
    """No usable CUDA driver (libcuda.so.1 missing or too old, or cuInit failed)."""


class NoDeviceError(UserError):
    """The driver works but the requested device does not exist or lacks a feature."""


class AllocationError(DeviceLayerError):
    """Misuse of the allocator: freeing a non-allocation, allocating over a live one."""


class DriverError(DeviceLayerError):
    """A driver call failed.

    Parameters:
        message: what failed, with the driver's own text (``cuGetErrorString``).
        code: the driver's error code.
        name: its name (``CUDA_ERROR_OUT_OF_MEMORY``).
    """

    def __init__(self, message: str, code: int = 0, name: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.name = name
