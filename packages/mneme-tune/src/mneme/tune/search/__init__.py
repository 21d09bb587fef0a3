"""The search of a tuning run: the Tuner and its trial loop, the baseline replayed first, the
probe of launch shapes and the valid region of the sampler, the objectives, the phases
and timing of the run, and the confirmation of the best configurations.

Internal modules are underscore-prefixed; the names below are the package's surface,
imported when first used (Optuna is heavy)."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

#: each public name and its module, imported when first used (PEP 562)
_LAZY = {
    'baseline_failure_line': '._baseline',
    'measure_baseline': '._baseline',
    'CONFIRMATION_ATTR': '._confirmation',
    'confirm': '._confirmation',
    'in_app': '._confirmation',
    'PROBE_SHARE': '._launch_probe',
    'keep_shapes': '._launch_probe',
    'probe_estimate': '._launch_probe',
    'probe_points': '._launch_probe',
    'seed_region': '._launch_probe',
    'shape_cache_applies': '._launch_probe',
    'ALIASES': '._objective',
    'ENERGY_WINDOW_MS': '._objective',
    'METRICS': '._objective',
    'Metric': '._objective',
    'OBJECTIVES': '._objective',
    'evaluate': '._objective',
    'metrics': '._objective',
    'parse_objectives': '._objective',
    'unit': '._objective',
    'PhaseClock': '._run_phases',
    'SHOWN_FROM': '._run_phases',
    'phase_line': '._run_phases',
    'total_seconds': '._run_phases',
    'LEGACY_MODE': '._timing_report',
    'baseline_timing': '._timing_report',
    'check_cache_mode': '._timing_report',
    'instance_timing': '._timing_report',
    'method_label': '._timing_report',
    'resolved_modes': '._timing_report',
    'timing_line': '._timing_report',
    'CLAIM_SECONDS': '._trial_loop',
    'CLAIM_WAIT_SECONDS': '._trial_loop',
    'MAX_INFEASIBLE': '._trial_loop',
    'RECOUNT_SECONDS': '._trial_loop',
    'ABANDONED_AFTER': '._tuner',
    'BASELINE_ATTR': '._tuner',
    'CONFIRM_RUNS': '._tuner',
    'PROBE_WORKERS': '._tuner',
    'Progress': '._tuner',
    'TRIAL_ATTR': '._tuner',
    'TUNER_ATTR': '._tuner',
    'TrialRecord': '._tuner',
    'TuneOptions': '._tuner',
    'TuneOutcome': '._tuner',
    'Tuner': '._tuner',
    'make_executor': '._tuner',
    'EARLIER_RUN': '._valid_region',
    'ENUMERATE_SHAPES': '._valid_region',
    'INVALIDATING': '._valid_region',
    'LaunchRegion': '._valid_region',
    'REDRAWS': '._valid_region',
    'SUSPECT_REDRAWS': '._valid_region',
    'Shape': '._valid_region',
    'ValidRegionSampler': '._valid_region',
    'code_key': '._valid_region',
}

# The same names for type checkers and the API reference (tests/test_types.py checks
# that they are the table's), re-exported explicitly (`name as name`).
# isort: off
if TYPE_CHECKING:
    from ._baseline import (
        baseline_failure_line as baseline_failure_line, measure_baseline as measure_baseline,
    )
    from ._confirmation import (
        CONFIRMATION_ATTR as CONFIRMATION_ATTR, confirm as confirm, in_app as in_app,
    )
    from ._launch_probe import (
        PROBE_SHARE as PROBE_SHARE, keep_shapes as keep_shapes, probe_estimate as probe_estimate,
        probe_points as probe_points, seed_region as seed_region,
        shape_cache_applies as shape_cache_applies,
    )
    from ._objective import (
        ALIASES as ALIASES, ENERGY_WINDOW_MS as ENERGY_WINDOW_MS, METRICS as METRICS,
        OBJECTIVES as OBJECTIVES, Metric as Metric, evaluate as evaluate, metrics as metrics,
        parse_objectives as parse_objectives, unit as unit,
    )
    from ._run_phases import (
        SHOWN_FROM as SHOWN_FROM, PhaseClock as PhaseClock, phase_line as phase_line,
        total_seconds as total_seconds,
    )
    from ._timing_report import (
        LEGACY_MODE as LEGACY_MODE, baseline_timing as baseline_timing,
        check_cache_mode as check_cache_mode, instance_timing as instance_timing,
        method_label as method_label, resolved_modes as resolved_modes, timing_line as timing_line,
    )
    from ._trial_loop import (
        CLAIM_SECONDS as CLAIM_SECONDS, CLAIM_WAIT_SECONDS as CLAIM_WAIT_SECONDS,
        MAX_INFEASIBLE as MAX_INFEASIBLE, RECOUNT_SECONDS as RECOUNT_SECONDS,
    )
    from ._tuner import (
        ABANDONED_AFTER as ABANDONED_AFTER, BASELINE_ATTR as BASELINE_ATTR,
        CONFIRM_RUNS as CONFIRM_RUNS, PROBE_WORKERS as PROBE_WORKERS,
        TRIAL_ATTR as TRIAL_ATTR, TUNER_ATTR as TUNER_ATTR, Progress as Progress,
        TrialRecord as TrialRecord, TuneOptions as TuneOptions, TuneOutcome as TuneOutcome,
        Tuner as Tuner, make_executor as make_executor,
    )
    from ._valid_region import (
        EARLIER_RUN as EARLIER_RUN, ENUMERATE_SHAPES as ENUMERATE_SHAPES,
        INVALIDATING as INVALIDATING, REDRAWS as REDRAWS, SUSPECT_REDRAWS as SUSPECT_REDRAWS,
        LaunchRegion as LaunchRegion, Shape as Shape, ValidRegionSampler as ValidRegionSampler,
        code_key as code_key,
    )
# isort: on


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = sorted(_LAZY)  # (the door: every name of the table)
