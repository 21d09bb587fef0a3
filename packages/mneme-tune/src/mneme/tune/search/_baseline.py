"""The baseline of a tuning run: the recorded configuration, replayed first.

It is replayed in the cache mode asked for (``auto`` resolves here, per instance), or
read back from a resumed study; either fixes the cache mode of every trial. Where its
first replay spent its time (compile, restore, determinism profile, run, verify) is kept
as parts of the run's ``baseline`` phase (run_phases.py).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import optuna

from ..errors import TrialFailedError
from ..tune_types import BASELINE_ATTR
from . import _objective as objectives_mod
from . import _timing_report as timing_report

if TYPE_CHECKING:  # (tuner.py imports this module)
    from ..workers._executor import ReplayExecutor
    from ._tuner import Tuner

__all__ = ["baseline_failure_line", "measure_baseline", "submit_baseline"]

#: the replay's own timings (ReplayResult.timings) shown as parts of the baseline phase
_PARTS = ("restore", "determinism", "run", "verify")


def baseline_failure_line(baseline: dict) -> str:
    """The recorded configuration failing in replay is the recording's problem, not a
    launch shape's or a pipeline's: said so, with what to do.

    Parameters:
        baseline: the baseline's record (``failure`` and ``reason`` of a failed one).

    Returns:
        One line for ``mneme tune``'s output.
    """
    return (f"baseline failed: {baseline['failure']}: {baseline['reason']} (the recorded "
            "configuration itself fails in replay: a problem of the recording, not of the "
            "space; check it with `mneme check`, or record the application again; the "
            "search goes on without a baseline to compare with)")


def submit_baseline(tuner: Tuner, executor: ReplayExecutor) -> list[Future]:
    """The recorded configuration's replays, submitted (one per instance), for
    measure_baseline: before the study is open when it surely holds no baseline.

    Parameters:
        tuner: the tuner.
        executor: the workers to replay on.

    Returns:
        Their futures.
    """
    base = tuner.base_settings()
    return [executor.submit(base, i) for i in tuner.instances]


def measure_baseline(tuner: Tuner, executor: ReplayExecutor, study: optuna.Study,
                     submitted: list[Future] | None = None) -> dict[str, Any]:
    """The recorded configuration, replayed in the cache mode asked for (auto resolves
    here, per instance); a resumed study's stored one, never replayed again. Either
    fixes the cache mode of every trial (``tuner.cache_modes``).

    Parameters:
        tuner: the tuner.
        executor: the workers to replay on.
        study: the study (its stored baseline, where it is resumed).
        submitted: its replays submitted already (submit_baseline); None: submitted here
            when the study holds no baseline.

    Returns:
        The baseline's settings and measurements (values, metrics, timing).
    """
    options = tuner.options
    if BASELINE_ATTR in study.user_attrs:
        # (submitted ahead: another tuner of the study stored one meanwhile, which all use)
        for future in submitted or ():
            future.cancel()
        baseline = study.user_attrs[BASELINE_ATTR]
    else:
        base = tuner.base_settings()
        futures = submitted if submitted is not None else submit_baseline(tuner, executor)
        baseline = {"settings": base.to_dict()}
        try:
            results = [f.result() for f in futures]
        except TrialFailedError as failure:
            baseline.update(failure=failure.kind, reason=failure.message)
        else:
            baseline.update(metrics=objectives_mod.metrics(results),
                            values=objectives_mod.evaluate(tuner.objectives, results),
                            verified=None if options.compile_only else True,
                            device=results[0].device or "cpu")
            timing = timing_report.baseline_timing(results, options.cache)
            if timing is not None:
                baseline["timing"] = timing
            _note_parts(tuner, results[0], executor.prepared_in(tuner.instances[0]))
        study.set_user_attr(BASELINE_ATTR, baseline)
    tuner.cache_modes = timing_report.resolved_modes(
        baseline, options.cache, len(tuner.instances), options.compile_only, study.study_name)
    tuner._baseline_method = (baseline.get("timing") or {}).get("method")
    return baseline


def _note_parts(tuner: Tuner, result, prepared: dict[str, float] | None) -> None:
    """The first instance's replay, by its own count: its prepare in the worker ahead of
    it (compile, module load, restore: ``prepared``'s seconds, where reported), compile (in
    its prepare or its replay; 0 when the compile pool had it ready), restore, determinism
    profile, run, verify."""
    prepared = prepared or {}
    if prepared.get("prepare"):
        tuner.clock.add("baseline.prepare", prepared["prepare"])
    if result.compile_time or prepared.get("compile"):
        tuner.clock.add("baseline.compile", result.compile_time or prepared["compile"])
    for part in _PARTS:
        if result.timings.get(part):
            tuner.clock.add(f"baseline.{part}", result.timings[part])
