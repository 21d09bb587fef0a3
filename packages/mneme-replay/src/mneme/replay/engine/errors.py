"""Errors of the replay engine.

Every class is a condition the user can fix or must be told about (a record id that
does not exist, a block size above the device limit, ...): ``mneme_user_error = True``
makes the CLI print it as one line and exit 2.

Each error also says what kind of failure it is (``kind``), set where it is raised: a
tuner records it as the trial's failure, and a worker process exits only after a
``context-poisoned`` one (docs/tune.md, "Why a trial fails").
"""

from __future__ import annotations

from mneme.instrument.errors import MnemeError

#: failure kinds the engine sets (the compile side's errors, mneme.replay.jit.JitError,
#: are "compile")
INVALID = "invalid"  # a configuration value the replay rejects
LAUNCH_REFUSED = "launch-refused"  # the launch cannot run; the CUDA context is intact
CONTEXT_POISONED = "context-poisoned"  # the CUDA context is unusable: the process must go
RESTORE = "restore"  # the recorded memory cannot be recreated
OUT_OF_BOUNDS = "out-of-bounds"  # the guarded probe caught an access that would fault
ERROR = "error"  # anything else

#: driver errors that leave the CUDA context unusable ("sticky"). Everything else the
#: driver says (a launch refused for its configuration or resources, a module it cannot
#: load, memory it cannot give) leaves the context usable.
STICKY_DRIVER_ERRORS = frozenset({
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED", "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    "CUDA_ERROR_DEINITIALIZED", "CUDA_ERROR_UNKNOWN", "CUDA_ERROR_EXTERNAL_DEVICE",
})


def is_sticky(driver_error: BaseException) -> bool:
    """Whether a driver error (mneme.runtime.DriverError) left the CUDA context unusable."""
    name = getattr(driver_error, "name", "") or ""
    return name in STICKY_DRIVER_ERRORS or any(n in str(driver_error) for n in STICKY_DRIVER_ERRORS)


class ReplayError(MnemeError):
    """Base of every replay-engine error; the message is one line for the user.

    Parameters:
        message: the line.
        kind: the failure kind (``launch-refused``, ``context-poisoned``, ...); None for
            the class's own.
    """

    mneme_user_error = True
    kind = ERROR

    def __init__(self, message: str = "", *, kind: str | None = None):
        super().__init__(message)
        if kind is not None:
            self.kind = kind  # the raiser's word over the class's


class ReplayConfigError(ReplayError):
    """A ReplayConfig field or a command-line override has a bad value."""

    kind = INVALID


class LaunchConfigError(ReplayError):
    """The launch configuration does not fit the device (block size, shared memory)."""

    kind = LAUNCH_REFUSED


class InstanceNotFoundError(ReplayError):
    """The record id (or kernel) asked for is not in the database; lists those that are."""


class RestoreError(ReplayError):
    """The recorded memory cannot be recreated (bad region layout, missing data)."""

    kind = RESTORE


class NoGpuError(ReplayError):
    """A replay that needs a GPU was asked for where there is none."""


class DeviceError(ReplayError):
    """A driver call of the replay failed; ``kind`` is ``context-poisoned`` when the CUDA
    context is unusable afterwards (replay in a fresh process)."""


class KernelFailedError(DeviceError):
    """The replayed kernel faulted on the device (illegal address, trap, ...:
    ``context-poisoned``), or the driver refused to load or launch it
    (``launch-refused``, the context intact)."""

    kind = CONTEXT_POISONED


class OutOfBoundsError(KernelFailedError):
    """The guarded variant caught an access that, unguarded, would fault (the CUDA
    context is intact). Raised by guarded_probe.check."""

    kind = OUT_OF_BOUNDS


# Not ReplayErrors: restore.py catches both and falls back to the host (or, with device
# decompression demanded, raises a RestoreError), so neither reaches the user itself.


class NvcompError(MnemeError):
    """nvCOMP is absent, would not load, or refused a call: restore falls back to the host."""


class DeviceRestoreError(MnemeError):
    """nvCOMP refused a batch or a chunk; the message says which and why (one line)."""
