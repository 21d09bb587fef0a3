"""The search of a tuning run: the Tuner and its loop, the baseline replayed first, the
probe of launch shapes and the valid region of the sampler, the objectives, the phases
and timing of the run, and the confirmation of the best configurations.

Internal modules are underscore-prefixed; the names below are the package's surface,
imported when first used (Optuna is heavy)."""

from .._lazy import lazy_exports

#: each public name and its module, imported when first used (PEP 562)
_LAZY = {
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
    'ABANDONED_AFTER': '._tuner',
    'BASELINE_ATTR': '._tuner',
    'CLAIM_SECONDS': '._tuner',
    'CLAIM_WAIT_SECONDS': '._tuner',
    'CONFIRM_RUNS': '._tuner',
    'MAX_INFEASIBLE': '._tuner',
    'PROBE_WORKERS': '._tuner',
    'Progress': '._tuner',
    'RECOUNT_SECONDS': '._tuner',
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


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)


__all__ = sorted(_LAZY)  # (the door: every name of the table)
