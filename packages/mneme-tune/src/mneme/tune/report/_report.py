"""The report of a tuning run: best configuration, every trial, and plots (plots.py).

``write_report(outcome, DIR)`` writes:

- ``best.json``: the best configuration, accepted by ``mneme replay --config``
- ``summary.json``: study, objectives, baseline, counts, the best configurations
- ``trials.csv``: one row per finished trial (parameters, objectives, verification, reason)
- plots as PNG and HTML: ``history`` (or ``pareto`` for several objectives),
  ``importance``, ``parallel``, and ``times`` (the objective of every configuration);
  without matplotlib (PNG) or plotly (HTML) that format is skipped, said in one line
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
from pathlib import Path
from typing import Any

from mneme.replay.engine import ReplaySettings
from mneme.replay.files import write_atomic

from ..errors import TuneError
from ..search._objective import unit
from ..tune_types import TrialRecord, TuneOutcome
from ._plots import write_plots

TOP = 10


def exported_settings(record: TrialRecord) -> dict[str, Any]:
    """A trial's configuration as ``mneme replay --config`` takes it.

    Parameters:
        record: the trial.

    Returns:
        Its settings as JSON data, to replay on a GPU (the compile-only flag of a static
        tuning run dropped).
    """
    settings = ReplaySettings.from_dict(record.settings)  # type: ignore[arg-type]
    replay = settings.replay.with_(compile_only=False)
    return ReplaySettings(settings.compile, replay).to_dict()


def verdict(outcome: TuneOutcome) -> str:
    """What the search found against the recorded configuration, with its noise.

    Parameters:
        outcome: the run's outcome.

    Returns:
        One line ("no significant speedup" when the difference is inside the noise).
    """
    c = outcome.confirmation
    if not c:
        return "no configuration to compare with the recorded one"
    if c.get("objective") != "time":
        name = c.get("objective")
        if not c.get("significant"):
            return f"no improvement of {name} over the recorded configuration"
        # "24 against 32 registers", "5992 against 6760 bytes of binary_size"
        what = unit(name) if unit(name) == name else f"{unit(name)} of {name}"  # type: ignore[arg-type]
        return (f"best (trial {c['trial']}) {c['best'][0]:g} against {c['baseline'][0]:g} "
                f"{what} for the recorded configuration (exact, compile-only)")
    runs = f"{len(c['best'])} and {len(c['baseline'])} runs"
    base, best = statistics.median(c["baseline"]), statistics.median(c["best"])
    numbers = (f"best (trial {c['trial']}) {best:.4g} ms against {base:.4g} ms recorded, "
               f"{c['speedup']:.2f}x, noise ±{100 * c['noise']:.1f} % ({runs})")
    if c.get("failure"):
        return f"no significant speedup: {c['failure']}"
    across = c.get("noise_across_runs") or 0.0
    if across:
        numbers += f", ±{100 * across:.1f} % across {c.get('runs_compared')} runs"
    if not c.get("significant"):
        if c["speedup"] and max(c["best"]) < min(c["baseline"]) and c["speedup"] - 1 <= across:
            return f"no significant speedup: {numbers}, below the noise across runs"
        return f"no significant speedup: {numbers}, the ranges overlap"
    return f"significant speedup: {numbers}"


def best_configuration(outcome: TuneOutcome) -> dict[str, Any]:
    """What best.json holds.

    Parameters:
        outcome: the run's outcome (its best first).

    Returns:
        The best configuration, with what it was tuned on and how it compared.
    """
    data = exported_settings(outcome.best[0])
    if outcome.identity:
        c = outcome.confirmation
        data["identity"] = {**outcome.identity, "trial": outcome.best[0].number,
                            "speedup": c.get("speedup"), "significant": c.get("significant"),
                            "verdict": verdict(outcome)}
        if outcome.baseline.get("timing"):
            # how the times were measured: method, cache mode, in-app time, fidelity, SM clock
            data["identity"]["timing"] = outcome.baseline["timing"]
    return data


def summary(outcome: TuneOutcome) -> dict[str, Any]:
    """What summary.json holds.

    Parameters:
        outcome: the run's outcome.

    Returns:
        The study, objectives, baseline, best trials, confirmation and the run's counts.
    """

    def row(r: TrialRecord) -> dict[str, Any]:
        out: dict[str, Any] = {"trial": r.number, "values": r.values, "params": r.params,
               "metrics": r.metrics, "speedup": r.speedup, "verified": r.verified}
        if r.timing_method:
            out["timing_method"] = r.timing_method  # not as the baseline was timed
        return out

    failures: dict[str, int] = {}
    for r in outcome.trials:
        if r.state == "failed":
            failures[r.failure or "error"] = failures.get(r.failure or "error", 0) + 1
    data = {
        "study": outcome.study.study_name,
        "objectives": [{"name": n, "unit": unit(n)} for n in outcome.objectives],
        "baseline": outcome.baseline,
        # how the times were measured (None: compile-only, nothing timed), at which clocks
        "timing": outcome.baseline.get("timing"),
        "clock_control": outcome.clock_control,
        "trials": len(outcome.trials),
        "complete": sum(1 for r in outcome.trials if r.state == "complete"),
        "failed": failures,
        "this_run": {"trials": outcome.ran, "failed": outcome.failed,
                     "seconds": outcome.elapsed, "search_seconds": outcome.search_seconds,
                     "worker_restarts": outcome.restarts,
                     "trials_per_second": outcome.trials_per_second,
                     # where the time went (run_phases.py): seconds per phase, in order
                     "phases": outcome.phases,
                     # each pool's use over the search and which bounded it (pool_use.py)
                     "pool_use": outcome.pool_use},
        "best": [row(r) for r in outcome.best[:TOP]],
        "identity": outcome.identity,
        "confirmation": outcome.confirmation,
        "verdict": verdict(outcome),
    }
    if outcome.in_app:  # --confirm-in-app: replayed and in-app speedups (app_confirm.py)
        data["in_app"] = outcome.in_app
    return data


def write_trials_csv(outcome: TuneOutcome, path: Path) -> None:
    """Write trials.csv: one row per trial (values, parameters, metrics, failure).

    Parameters:
        outcome: the run's outcome.
        path: the file.
    """
    params = sorted({k for r in outcome.trials for k in r.params})
    metrics = sorted({k for r in outcome.trials for k in r.metrics})
    header = ["trial", "state", *(f"value_{n}" for n in outcome.objectives), *params, *metrics, "speedup", "verified",
              "failure", "reason"]
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for r in sorted(outcome.trials, key=lambda r: r.number):
        values = r.values or [None] * len(outcome.objectives)  # type: ignore[list-item]
        writer.writerow([r.number, r.state, *values, *(r.params.get(p) for p in params),
                         *(r.metrics.get(m) for m in metrics), r.speedup, r.verified,
                         r.failure, r.reason])
    write_atomic(path, out.getvalue().encode())


def write_report(outcome: TuneOutcome, directory: str | os.PathLike,
                 plots: bool | str = True) -> dict[str, Any]:
    """Write the report files: summary.json, trials.csv, best.json and the plots.

    Parameters:
        outcome: the run's outcome.
        directory: the folder (created).
        plots: True draws them before returning, ``"background"`` hands them to a
            process of their own (_background_plots.py; ``plots_pending`` in the summary
            until it is done), False draws none.

    Returns:
        The summary (what summary.json holds).

    Raises:
        TuneError: the folder cannot be created.
    """
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TuneError(f"cannot create report folder {directory}: {error.strerror}") from None
    data = summary(outcome)
    if outcome.best:
        write_atomic(directory / "best.json",
                     json.dumps(best_configuration(outcome), indent=2, sort_keys=True).encode())
    write_trials_csv(outcome, directory / "trials.csv")
    if plots == "background":
        data["plots_pending"] = True
    elif plots:
        data["plots"], data["plots_skipped"] = write_plots(outcome, directory)
    write_atomic(directory / "summary.json", json.dumps(data, indent=2, sort_keys=True, default=str).encode())
    if plots == "background":  # after summary.json, which the drawing process completes
        from ._background_plots import draw_in_background

        data["plots_pid"] = draw_in_background(outcome, directory)
    return data
