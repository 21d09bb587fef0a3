"""The mneme recording database: a Zarr v3 directory of kernels and their instances.

Specification: docs/format.md. ``Database`` reads, ``DatabaseWriter`` writes (the C++
recorder writes the same format), ``check_database`` verifies every chunk.
"""

from .errors import (
    CorruptDataError,
    DatabaseError,
    FormatVersionError,
    IncompatibleDatabaseError,
    InvalidNameError,
    NotADatabaseError,
    NotFoundError,
)
from .hashing import dynamic_hash, fnv1a64
from .instance import Instance, RegionChange
from .layout import EPILOGUE_FORMATS, FORMAT_VERSION
from .reader import Database, Kernel
from .schema import (
    Annotation,
    GlobalVar,
    InstanceRecord,
    KernelRecord,
    Param,
    RecordingInfo,
    Region,
    RegionInfo,
)
from .writer import DatabaseWriter

__all__ = [
    "EPILOGUE_FORMATS",
    "FORMAT_VERSION",
    "Annotation",
    "CorruptDataError",
    "Database",
    "DatabaseError",
    "DatabaseWriter",
    "FormatVersionError",
    "GlobalVar",
    "IncompatibleDatabaseError",
    "Instance",
    "InstanceRecord",
    "InvalidNameError",
    "Kernel",
    "KernelRecord",
    "NotADatabaseError",
    "NotFoundError",
    "Param",
    "RecordingInfo",
    "Region",
    "RegionChange",
    "RegionInfo",
    "dynamic_hash",
    "fnv1a64",
]
