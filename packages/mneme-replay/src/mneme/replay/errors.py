"""Every exception of mneme-replay, in one place.

The three parts keep their own errors.py and root, each under mneme's one root
``MnemeError`` (mneme.instrument.errors): ``ReplayError`` (engine: restore, launch,
verify), ``JitError`` (compile) and ``DatabaseError`` (the recording database). The
engine's nvCOMP errors and the database's JSON limit error never reach the user (the
code that raises them catches them) and derive from MnemeError directly.

    from mneme.replay.errors import DatabaseError, JitError, ReplayError

Importing this module imports the three parts (the LLVM binding among them); code
inside the package imports the part's own errors module instead.
"""

from mneme.instrument.errors import MnemeError, is_user_error

from .db.errors import (
    CorruptDataError,
    DatabaseError,
    FormatVersionError,
    IncompatibleDatabaseError,
    InvalidNameError,
    JSONLimitError,
    NotADatabaseError,
    NotFoundError,
    TransferError,
)
from .engine.errors import (
    DeviceError,
    DeviceRestoreError,
    InstanceNotFoundError,
    KernelFailedError,
    LaunchConfigError,
    NoGpuError,
    NvcompError,
    OutOfBoundsError,
    ReplayConfigError,
    ReplayError,
    RestoreError,
)
from .jit.errors import (
    CodegenError,
    InvalidIRError,
    JitConfigError,
    JitError,
    JitToolchainError,
    LinkError,
    PipelineError,
    PtxasError,
    SpecializationError,
    StaleHandleError,
    UnknownPassError,
)

__all__ = [
    "CodegenError",
    "CorruptDataError",
    "DatabaseError",
    "DeviceError",
    "DeviceRestoreError",
    "FormatVersionError",
    "IncompatibleDatabaseError",
    "InstanceNotFoundError",
    "InvalidIRError",
    "InvalidNameError",
    "JSONLimitError",
    "JitConfigError",
    "JitError",
    "JitToolchainError",
    "KernelFailedError",
    "LaunchConfigError",
    "LinkError",
    "MnemeError",
    "NoGpuError",
    "NotADatabaseError",
    "NotFoundError",
    "NvcompError",
    "OutOfBoundsError",
    "PipelineError",
    "PtxasError",
    "ReplayConfigError",
    "ReplayError",
    "RestoreError",
    "SpecializationError",
    "StaleHandleError",
    "TransferError",
    "UnknownPassError",
    "is_user_error",
]
