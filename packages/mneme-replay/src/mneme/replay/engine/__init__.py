"""The replay engine: restore a recorded instance's memory at its recorded addresses,
recompile its kernel under any configuration, run it, verify it on the device, measure.

    from mneme.replay.db import Database
    from mneme.replay.engine import ReplayConfig, ReplaySession
    from mneme.replay.jit import CompileConfig

    instance = Database.open("app.rdb").instance("saxpy")
    with ReplaySession(instance) as session:
        result = session.run(CompileConfig.for_level("O3"), ReplayConfig(iterations=10))
    result.time, result.verified, result.registers, result.to_json()

See docs/replay.md.
"""

from .config import ReplayConfig, ReplaySettings
from .errors import (
    DeviceError,
    InstanceNotFoundError,
    KernelFailedError,
    LaunchConfigError,
    NoGpuError,
    ReplayConfigError,
    ReplayError,
    RestoreError,
)
from .kernel_code import arch_of, derive_compile_config
from .launch_limits import check_clusters, check_launch
from .restore import DeviceImage
from .restore_layout import Span, merge_spans
from .result import ReplayResult
from .select import open_database, select_instance
from .session import ReplaySession, replay
from .verify import (
    DeviceVerifier,
    Mismatch,
    RegionCheck,
    Tolerance,
    evaluate,
    plan_check,
    reference_words,
    verify_host,
)

__all__ = [
    "DeviceError",
    "DeviceImage",
    "DeviceVerifier",
    "InstanceNotFoundError",
    "KernelFailedError",
    "LaunchConfigError",
    "Mismatch",
    "NoGpuError",
    "RegionCheck",
    "ReplayConfig",
    "ReplayConfigError",
    "ReplayError",
    "ReplayResult",
    "ReplaySession",
    "ReplaySettings",
    "RestoreError",
    "Span",
    "Tolerance",
    "arch_of",
    "check_clusters",
    "check_launch",
    "derive_compile_config",
    "evaluate",
    "merge_spans",
    "open_database",
    "plan_check",
    "reference_words",
    "replay",
    "select_instance",
    "verify_host",
]
