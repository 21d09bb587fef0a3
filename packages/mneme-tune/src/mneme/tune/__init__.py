"""Autotuning of recorded kernels: search spaces, a worker pool across GPUs, Optuna
studies and reports.

    from mneme.tune import ReplayExecutor, Tuner, TuneOptions, write_report

    tuner = Tuner("app.rdb", ["KERNEL/INSTANCE"], "launch,pipeline",
                  TuneOptions(trials=200, devices=[0]))
    outcome = tuner.run()
    write_report(outcome, "report/")

See docs/tune.md.
"""

from .errors import DeviceSelectionError, SpaceError, StudyError, TrialFailed, TuneError
from .executor import ReplayExecutor, as_completed
from .objective import METRICS, OBJECTIVES
from .space import (
    BUILTIN_SPACES,
    PRESETS,
    BoundSpace,
    BoundsSpace,
    Categorical,
    CodegenSpace,
    Constraint,
    IntParam,
    LaunchSpace,
    PipelineSpace,
    Space,
    SpaceContext,
    SpecializeSpace,
    TransformSpace,
    resolve_spaces,
    settings_with,
    space,
)
from .tune_types import TrialRecord, TuneOptions, TuneOutcome
from .tuner import Tuner


def write_report(outcome, directory, plots: bool = True):
    """See mneme.tune.report.write_report (imported lazily: plotting libraries are heavy)."""
    from .report import write_report as write

    return write(outcome, directory, plots)


__all__ = [
    "BUILTIN_SPACES",
    "METRICS",
    "OBJECTIVES",
    "PRESETS",
    "BoundSpace",
    "BoundsSpace",
    "Categorical",
    "CodegenSpace",
    "Constraint",
    "DeviceSelectionError",
    "IntParam",
    "LaunchSpace",
    "PipelineSpace",
    "ReplayExecutor",
    "Space",
    "SpaceContext",
    "SpaceError",
    "SpecializeSpace",
    "StudyError",
    "TransformSpace",
    "TrialFailed",
    "TrialRecord",
    "TuneError",
    "TuneOptions",
    "TuneOutcome",
    "Tuner",
    "as_completed",
    "resolve_spaces",
    "settings_with",
    "space",
    "write_report",
]
