"""Autotuning of recorded kernels: search spaces, a worker pool across GPUs, Optuna
studies and reports.

    from mneme.tune import ReplayExecutor, Tuner, TuneOptions, write_report

    tuner = Tuner("app.rdb", ["KERNEL/INSTANCE"], "launch,pipeline",
                  TuneOptions(trials=200, devices=[0]))
    outcome = tuner.run()
    write_report(outcome, "report/")

See docs/tune.md.

Every name below but the errors and ``write_report`` is imported when first used (PEP
562): worker processes fork from a server that imports this package, and the ``mneme
tune`` command starts that server before it imports the replay engine (which the spaces
need), Optuna or rich, so that the server's imports run beside its own.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from .errors import DeviceSelectionError, SpaceError, StudyError, TrialFailedError, TuneError

#: the names imported when first used, and their modules
_LAZY = {
    "BUILTIN_SPACES": ".space",
    "PRESETS": ".space",
    "BoundSpace": ".space",
    "BoundsSpace": ".space",
    "Categorical": ".space",
    "CodegenSpace": ".space",
    "Constraint": ".space",
    "IntParam": ".space",
    "LaunchSpace": ".space",
    "PipelineSpace": ".space",
    "Space": ".space",
    "SpaceContext": ".space",
    "SpecializeSpace": ".space",
    "TransformSpace": ".space",
    "resolve_spaces": ".space",
    "settings_with": ".space",
    "space": ".space",
    "ReplayExecutor": ".workers", "as_completed": ".workers",
    "METRICS": ".search", "OBJECTIVES": ".search",
    "TrialRecord": ".tune_types", "TuneOptions": ".tune_types", "TuneOutcome": ".tune_types",
    "Tuner": ".search",
}

# The same names for type checkers and the API reference (tests/test_types.py checks
# that they are the table's), re-exported explicitly (`name as name`).
# isort: off
if TYPE_CHECKING:
    from .space import (
        BUILTIN_SPACES as BUILTIN_SPACES,
        PRESETS as PRESETS,
        BoundSpace as BoundSpace,
        BoundsSpace as BoundsSpace,
        Categorical as Categorical,
        CodegenSpace as CodegenSpace,
        Constraint as Constraint,
        IntParam as IntParam,
        LaunchSpace as LaunchSpace,
        PipelineSpace as PipelineSpace,
        Space as Space,
        SpaceContext as SpaceContext,
        SpecializeSpace as SpecializeSpace,
        TransformSpace as TransformSpace,
        resolve_spaces as resolve_spaces,
        settings_with as settings_with,
        space as space,
    )
    from .search import METRICS as METRICS, OBJECTIVES as OBJECTIVES, Tuner as Tuner
    from .tune_types import (
        TrialRecord as TrialRecord, TuneOptions as TuneOptions, TuneOutcome as TuneOutcome,
    )
    from .workers import ReplayExecutor as ReplayExecutor, as_completed as as_completed
# isort: on


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


def write_report(outcome, directory, plots: bool = True):
    """Write a run's report folder: summary.json, trials.csv, best.json and the plots
    (mneme.tune.report's write_report, imported when called: plotting libraries are
    heavy).

    Parameters:
        outcome: the TuneOutcome of :meth:`Tuner.run`.
        directory: the folder (created).
        plots: True draws the plots before returning, ``"background"`` in a process of
            their own, False none.

    Returns:
        The summary (what summary.json holds).
    """
    from .report._report import write_report as write

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
    "TrialFailedError",
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
