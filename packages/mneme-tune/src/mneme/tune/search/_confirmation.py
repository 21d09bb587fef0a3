"""After the search: the best configuration confirmed against the recorded one.

``confirm`` replays both again, interleaved, while the tuner's workers are still up, to
tell a speedup from noise; ``in_app`` runs the best configurations in the application
itself once the workers are gone (app_confirm.py). Both take the Tuner that searched.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mneme.replay.engine import ReplaySettings

from ..errors import TrialFailedError
from ..tune_types import BASELINE_ATTR, TuneOutcome
from . import _objective as objectives_mod
from ._noise_floor import across_runs, remember

if TYPE_CHECKING:  # (tuner.py imports this module)
    from ._tuner import Tuner

__all__ = ["CONFIRMATION_ATTR", "confirm", "in_app"]

#: study attribute: the baseline and the best timed again, and whether they differ
CONFIRMATION_ATTR = "mneme.confirmation"


def _time_of(tuner: Tuner, executor, settings: list[ReplaySettings]) -> float | str:
    """One more measurement of a configuration: its time (ms), or why it failed."""
    futures = [executor.submit(s, i) for s, i in zip(settings, tuner.instances, strict=True)]
    try:
        results = [f.result() for f in futures]
    except TrialFailedError as failure:
        return f"{failure.kind}: {failure.message}"
    return objectives_mod.METRICS["time"].value(results)  # type: ignore[return-value]


def _run_key(tuner: Tuner, executor, baseline: dict[str, Any]) -> str:
    """Runs compare with runs at the same clock policy on the same GPU model."""
    clocks = tuner.options.clock_control or {}
    locked = sorted(set((clocks.get("locked_sm_mhz") or {}).values()))
    policy = f"locked {locked[0]} MHz" if locked else "unlocked"
    names = sorted({str(i.get("name", "")) for i in getattr(executor, "device_info", None) or []})
    return f"{policy}; {', '.join(names) or (baseline.get('timing') or {}).get('method', '')}"


def confirm(tuner: Tuner, executor, study, outcome: TuneOutcome) -> dict[str, Any]:
    """The best configuration against the recorded one, with its noise.

    On a GPU (``time``): both are replayed ``confirm_runs`` more times, interleaved;
    the speedup is the ratio of the medians of all their measurements, the noise the
    relative half-range of the baseline's, and the speedup counts (``significant``)
    only when every measurement of the best is faster than every measurement of the
    baseline. Static objectives are exact: a different value is significant.

    Parameters:
        tuner: the tuner.
        executor: the workers to replay on.
        study: the study.
        outcome: the run's outcome so far (its best).

    Returns:
        The comparison (speedup or values, noise, ``significant``); empty without a best
        or a baseline.
    """
    options, objectives = tuner.options, tuner.objectives
    baseline = outcome.baseline
    if not outcome.best or "values" not in baseline:
        return {}
    best = outcome.best[0]
    base_value, best_value = baseline["values"][0], best.values[0]  # type: ignore[index]
    if options.compile_only or objectives[0] != "time":
        speedup = base_value / best_value if best_value else None
        result = {"objective": objectives[0], "trial": best.number,
                  "baseline": [base_value], "best": [best_value], "speedup": speedup,
                  "noise": 0.0, "significant": best_value < base_value}
        study.set_user_attr(CONFIRMATION_ATTR, result)
        return result
    base_times = list(baseline.get("times", [baseline["metrics"]["time"]]))
    # The search's own measurement of the best was picked for being the lowest: only
    # the new ones count (it stays when no repeat is asked for).
    best_times = [] if options.confirm_runs > 0 else [best_value]
    settings = tuner.settings_of(best.params)
    base = [tuner.base_settings(i) for i in range(len(tuner.instances))]
    failure = None
    for _ in range(max(0, options.confirm_runs)):
        for times, config in ((base_times, base), (best_times, settings)):
            value = _time_of(tuner, executor, config)
            if isinstance(value, str):
                failure = failure or value
            else:
                times.append(value)
    median = statistics.median(base_times)
    baseline = {**baseline, "times": base_times,
                "metrics": {**baseline["metrics"], "time": median}}
    baseline["values"] = [median if n == "time" else v
                          for n, v in zip(objectives, baseline["values"], strict=True)]
    study.set_user_attr(BASELINE_ATTR, baseline)
    if not best_times:
        best_times = [best_value]
    best_median = statistics.median(best_times)
    noise = (max(base_times) - min(base_times)) / 2 / median if median else 0.0
    # Across processes: the baseline's median in this run beside earlier runs' (noise_floor.py)
    medians = remember(tuner.instances[0], median, _run_key(tuner, executor, baseline))
    across = across_runs(medians)
    speedup = median / best_median if best_median else None
    result = {"objective": "time", "trial": best.number, "baseline": base_times,
              "best": best_times, "speedup": speedup,
              "noise": max(noise, across), "noise_in_run": noise, "noise_across_runs": across,
              "runs_compared": len(medians),
              "significant": (failure is None and max(best_times) < min(base_times)
                              and speedup is not None and speedup - 1 > across)}
    if failure is not None:
        result["failure"] = f"the best failed when replayed again: {failure}"
    study.set_user_attr(CONFIRMATION_ATTR, result)
    return result


def in_app(tuner: Tuner, outcome: TuneOutcome, plain_seconds: float | None,
           on_in_app: Callable[[int, int, str], None] | None) -> dict[str, Any]:
    """(--confirm-in-app) The best configurations run in the application
    (app_confirm.in_app_summary), or ``{"skipped": why}``. Called once the workers are
    gone: the application has the GPU to itself.

    Parameters:
        tuner: the tuner.
        outcome: the run's outcome.
        plain_seconds: the application's wall time (:meth:`Tuner.check_application`).
        on_in_app: called for each run in the application (index, count, what runs).

    Returns:
        The summary of the runs in the application.
    """
    o = tuner.options
    if o.compile_only:
        return {"skipped": "compile-only tuning runs nothing on a GPU"}
    from ..apply._app_confirm import confirm_in_app, run_timeout

    return confirm_in_app(outcome, tuner.database, tuner.instances[0],
                          tuner.app_command,  # type: ignore[arg-type]
                          o.confirm_in_app, run_timeout(plain_seconds), on_in_app)
