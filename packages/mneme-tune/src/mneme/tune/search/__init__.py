"""The search of a tuning run: the Tuner and its loop, the baseline replayed first, the
probe of launch shapes and the valid region of the sampler, the objectives, the phases
and timing of the run, and the confirmation of the best configurations.

Internal modules are underscore-prefixed; the names below are the package's surface,
imported when first used (Optuna is heavy)."""

import importlib

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


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # (looked up here once)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ABANDONED_AFTER",
    "ALIASES",
    "BASELINE_ATTR",
    "CLAIM_SECONDS",
    "CLAIM_WAIT_SECONDS",
    "CONFIRMATION_ATTR",
    "CONFIRM_RUNS",
    "EARLIER_RUN",
    "ENERGY_WINDOW_MS",
    "ENUMERATE_SHAPES",
    "INVALIDATING",
    "LEGACY_MODE",
    "LaunchRegion",
    "MAX_INFEASIBLE",
    "METRICS",
    "Metric",
    "OBJECTIVES",
    "PROBE_SHARE",
    "PROBE_WORKERS",
    "PhaseClock",
    "Progress",
    "RECOUNT_SECONDS",
    "REDRAWS",
    "SHOWN_FROM",
    "SUSPECT_REDRAWS",
    "Shape",
    "TRIAL_ATTR",
    "TUNER_ATTR",
    "TrialRecord",
    "TuneOptions",
    "TuneOutcome",
    "Tuner",
    "ValidRegionSampler",
    "baseline_timing",
    "check_cache_mode",
    "code_key",
    "confirm",
    "evaluate",
    "in_app",
    "instance_timing",
    "keep_shapes",
    "make_executor",
    "measure_baseline",
    "method_label",
    "metrics",
    "parse_objectives",
    "phase_line",
    "probe_estimate",
    "probe_points",
    "resolved_modes",
    "seed_region",
    "shape_cache_applies",
    "timing_line",
    "total_seconds",
    "unit"
]
