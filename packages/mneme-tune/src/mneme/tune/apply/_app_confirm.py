"""The best configurations of a search, confirmed inside the application.

A replayed speedup is a prediction. ``mneme tune ... --confirm-in-app [N] -- ./app args``
(``TuneOptions.confirm_in_app`` and ``app_command``) checks it where it counts: after the
search and its replay confirmation, the unmodified application runs once per
configuration through the ``mneme run --apply`` machinery (apply_plan.py: the
configuration compiled into a plan; app_process.py: ``libmneme_apply.so`` preloaded,
``MNEME_APPLY_TIMING=1``, its report read back):

- the recorded configuration first and last: the application's own code, timed without
  swapping (``MNEME_APPLY_MODE=measure``); its two runs say how much the application's
  median moves from one run to the next;
- the best N distinct configurations in between, in the order the search ranked them,
  each swapped in.

Each run gives the kernel's in-app median per launch (the launches with the recorded
launch shape: those the tuned configuration is swapped into), beside its replayed time:
"replayed ×" and "in-app ×" against the recorded configuration, and Kendall's tau between
the two rankings.

``run_in_app`` measures (benchmarks/fidelity.py measures with it too), ``confirm_in_app``
picks a tuning outcome's candidates and sums up, ``print_in_app`` prints the table. The
application is first run once plain (``check_application``), before any tuning: a command
that fails is one line, exit 2.
"""

from __future__ import annotations

import json
import math
import shlex
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mneme.replay.engine import ReplaySettings
from mneme.replay.tables import Column, print_table
from rich.console import Console
from rich.markup import escape

from ..errors import ApplicationFailedError, ApplyError, TuneError
from ..tune_types import DEFAULT_CANDIDATES  # noqa: F401 - (kept importable here)
from ._app_process import resolve_command, run_once, swap_env, swapper_library, timing_method_of
from ._apply_plan import load_tuned, write_plan
from ._apply_tables import milliseconds

#: a run with the swap is killed after this many times the plain run's wall time...
TIMEOUT_FACTOR = 10.0
#: ...and never before this many seconds
TIMEOUT_MIN_S = 120.0
#: candidates that need both times before a rank correlation means anything
MIN_TAU_CANDIDATES = 3

#: wall time (s) of each command run plain in this process: several studies of one
#: ``mneme tune`` command check their application once
_plain_seconds: dict[tuple[str, ...], float] = {}


@dataclass
class InAppRun:
    """One run of the application with one configuration of the kernel.

    Attributes:
        settings: None: the recorded code, timed without swapping
        median_ms: the kernel's median per launch (ms, first launch apart) over the launches
            with the recorded launch shape, those a tuned configuration is swapped into (over
            every launch when none had that shape); None when it was not timed
        all_launches_ms: the median over every launch of the kernel
        first_ms: the first launch's time (ms).
        launches: launches of the kernel.
        same_config: launches with the recorded grid, block and shared memory
        swapped: launches that ran the tuned code
        refused: tuned launches the driver refused (the original code ran)
        method: "cupti", "events (CUPTI unusable: ...)", or "-" (nothing timed)
        exit_status: the application's exit status (None: it did not run, or was killed)
        failure: why this configuration has no in-app time, one line (None: it has one)
        seconds: the run's wall time; None when it did not run.
    """

    settings: ReplaySettings | None
    median_ms: float | None = None
    all_launches_ms: float | None = None
    first_ms: float | None = None
    launches: int = 0
    same_config: int = 0
    swapped: int = 0
    refused: int = 0
    method: str = "-"
    exit_status: int | None = None
    failure: str | None = None
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The run as a row of summary.json holds it.

        Returns:
            Its times, counts, method and failure.
        """
        return {"in_app_ms": self.median_ms, "in_app_all_launches_ms": self.all_launches_ms,
                "in_app_first_ms": self.first_ms, "launches": self.launches,
                "same_config": self.same_config, "swapped": self.swapped, "refused": self.refused,
                "method": self.method, "exit_status": self.exit_status, "failure": self.failure,
                "seconds": self.seconds}


def _one_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def application_command(command: Sequence[str] | None) -> list[str]:
    """The application's command line, its executable found.

    Parameters:
        command: the argv given after ``--``.

    Returns:
        The argv, its executable resolved (on PATH).

    Raises:
        TuneError: no command, or an executable that is not there (one line).
    """
    if not command:
        raise TuneError("--confirm-in-app needs the application's command after --: "
                        "mneme tune ... --confirm-in-app -- ./app args")
    try:
        return resolve_command(list(command))
    except ApplyError as error:
        raise TuneError(f"--confirm-in-app: {error}") from None


def check_application(command: Sequence[str]) -> float:
    """Runs the application once plain (once per command in this process): no search is
    spent on a command that cannot confirm it.

    Parameters:
        command: the application's argv.

    Returns:
        Its wall time in seconds.

    Raises:
        TuneError: it fails or cannot be started, or the swapper library is missing
            (one line).
    """
    swapper_library()  # (missing: one line now, not after the search)
    key = tuple(command)
    if key not in _plain_seconds:
        try:
            run = run_once(list(command), None)
        except ApplicationFailedError as failure:
            raise TuneError(f"--confirm-in-app: the application fails run plain: {failure}") from None
        except OSError as error:
            raise TuneError(f"--confirm-in-app: {command[0]} cannot be started: "
                            f"{error.strerror or error}") from None
        _plain_seconds[key] = run.seconds
    return _plain_seconds[key]


def run_timeout(plain_seconds: float | None) -> float | None:
    """How long a run with the swap may take.

    Parameters:
        plain_seconds: the plain run's wall time; None when there was none.

    Returns:
        TIMEOUT_FACTOR times the plain run, at least TIMEOUT_MIN_S; None (no limit)
        without a plain run.
    """
    return None if plain_seconds is None else max(TIMEOUT_MIN_S, TIMEOUT_FACTOR * plain_seconds)


def run_in_app(database: str | Path, instance, candidates: Sequence[ReplaySettings | None],
               command: Sequence[str], work: Path, timeout: float | None = None,
               on_run: Callable[[int], None] | None = None) -> list[InAppRun]:
    """The kernel of ``instance`` (of ``database``) in the application ``command``, once
    per configuration of ``candidates`` (None: the recorded code, timed without
    swapping): its in-app median, launches, how many ran the tuned code, the timing
    method, and, for a configuration that did not give a time, why (the others go on).
    ``work`` holds each run's plan, code and report; ``on_run(index)`` is called before
    each run.

    Parameters:
        database: the database.
        instance: the instance tuned.
        candidates: the configurations (None: the recorded code).
        command: the application's argv.
        work: a folder for each run's plan, code and report.
        timeout: seconds a run may take; None for no limit.
        on_run: called with each run's index before it.

    Returns:
        One InAppRun per candidate, in order.
    """
    from mneme.replay.identity import make_identity

    identity = make_identity(database, [instance])
    runs = []
    for index, settings in enumerate(candidates):
        if on_run is not None:
            on_run(index)
        runs.append(_run(identity, instance, settings, command, work / f"candidate{index}", timeout))
    return runs


def _run(identity: dict, instance, settings: ReplaySettings | None, command: Sequence[str],
         folder: Path, timeout: float | None) -> InAppRun:
    folder.mkdir(parents=True, exist_ok=True)
    out = InAppRun(settings)
    best = folder / "best.json"  # as mneme tune --report writes it, for load_tuned
    best.write_text(json.dumps({**(settings or ReplaySettings()).to_dict(), "identity": identity}))
    try:
        plan = write_plan([load_tuned(best)], folder)
    except Exception as error:  # noqa: BLE001 - this configuration's failure; the others go on
        out.failure = f"could not be compiled for the application: {_one_line(error)}"
        return out
    report = folder / "report.txt"
    # timed; the original code (measure) when there is no configuration
    env = swap_env(plan, timing=True, measure=settings is None, report=report)
    start = time.perf_counter()
    try:
        run = run_once(list(command), env, report, timeout)
    except ApplicationFailedError as failure:
        out.exit_status = failure.code  # (negative: the signal that ended it)
        out.failure, out.seconds = str(failure), time.perf_counter() - start
        return out
    except OSError as error:
        out.failure = f"{command[0]} cannot be started: {error.strerror or error}"
        return out
    except ApplyError as error:  # (the swapper library went missing)
        out.failure = str(error)
        return out
    kernel = run.report.get(instance.kernel.name)
    out.exit_status, out.seconds = 0, run.seconds
    out.launches, out.same_config = kernel.launches, kernel.same_config
    out.swapped, out.refused = kernel.swapped, kernel.refused
    out.first_ms, out.all_launches_ms = kernel.first_ms, kernel.median_ms
    out.median_ms = (kernel.same_config_median_ms if kernel.same_config_median_ms is not None
                     else kernel.median_ms)
    out.method = timing_method_of(run.report) if kernel.timed else "-"
    if out.median_ms is None:
        out.failure = (f"the application ran, but launched {instance.kernel.demangled_name} "
                       f"{kernel.launches} times, none of them timed")
    return out


# -- a tuning outcome ----------------------------------------------------------------------


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Kendall's tau-b of two paired lists.

    Parameters:
        a: the first values.
        b: the values paired with them.

    Returns:
        Tau-b; None for fewer than 2 pairs or no order.
    """
    concordant = discordant = ties_a = ties_b = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    n0 = concordant + discordant
    denominator = math.sqrt((n0 + ties_a) * (n0 + ties_b))
    return (concordant - discordant) / denominator if denominator else None


def candidates_of(outcome, count: int) -> list:
    """The best trials with distinct configurations.

    Parameters:
        outcome: the run's outcome.
        count: how many.

    Returns:
        Up to ``count`` TrialRecords, in the order the search ranked them.
    """
    seen: set[str] = set()
    out = []
    for record in outcome.best:
        if record.settings is None:
            continue
        key = json.dumps(record.settings, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        out.append(record)
        if len(out) == count:
            break
    return out


def confirm_in_app(outcome, database: str | Path, instance, command: Sequence[str], count: int,
                   timeout: float | None = None,
                   on_run: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    """Runs the recorded configuration (first and last) and the best ``count`` distinct
    configurations of ``outcome`` in the application; the summary ``in_app_summary``
    makes.

    Parameters:
        outcome: the run's outcome.
        database: the database.
        instance: the instance tuned.
        command: the application's argv.
        count: how many configurations besides the recorded one.
        timeout: seconds a run may take; None for no limit.
        on_run: ``on_run(index, runs, label)``, called before each run.

    Returns:
        The summary, or ``{"skipped": why}``.
    """
    if "values" not in outcome.baseline:
        return {"skipped": "the recorded configuration failed in replay"}
    picked = candidates_of(outcome, count)
    if not picked:
        return {"skipped": "no configuration completed"}
    settings: list[ReplaySettings | None] = [
        None, *[ReplaySettings.from_dict(r.settings) for r in picked], None]
    labels = ["recorded configuration (first run)", *[f"trial {r.number}" for r in picked],
              "recorded configuration (last run)"]
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mneme-in-app-") as tmp:
        runs = run_in_app(database, instance, settings, command, Path(tmp), timeout,
                          on_run=None if on_run is None else
                          (lambda i: on_run(i, len(settings), labels[i])))
    candidates = [{"trial": r.number, "params": r.params, "replayed_ms": r.metrics.get("time")}
                  for r in picked]
    summary = in_app_summary(command, outcome.baseline.get("metrics", {}).get("time"), candidates,
                             [runs[0], runs[-1]], runs[1:-1])
    summary["seconds"] = time.monotonic() - start
    summary["timeout_s"] = timeout
    return summary


def in_app_summary(command: Sequence[str], baseline_ms: float | None, candidates: Sequence[dict],
                   recorded: Sequence[InAppRun], runs: Sequence[InAppRun]) -> dict[str, Any]:
    """The in-app confirmation as summary.json holds it: ``rows`` (the recorded
    configuration, then each candidate: replayed time and speedup, in-app median and
    speedup, launches and how many ran the tuned code, or why it failed), the run-to-run
    change of the recorded configuration (``noise``), the timing method, and Kendall's tau
    between the replay and the in-app ranking of the candidates with both times (None for
    fewer than MIN_TAU_CANDIDATES).

    Parameters:
        command: the application's argv.
        baseline_ms: the recorded configuration's replayed time.
        candidates: trial, params and replayed_ms each, in the order of ``runs``.
        recorded: the recorded configuration's runs (first and last).
        runs: the candidates' runs.

    Returns:
        The summary.
    """
    timed = [r.median_ms for r in recorded if r.median_ms is not None]
    reference = statistics.median(timed) if timed else None
    noise = abs(timed[0] - timed[1]) / min(timed) if len(timed) == 2 and min(timed) > 0 else None
    first_ok = next((r for r in recorded if r.failure is None), recorded[0])

    def speedup(base: float | None, value: float | None) -> float | None:
        return base / value if base and value else None

    rows = [{"configuration": "recorded", "trial": None, "params": {}, **first_ok.to_dict(),
             "in_app_ms": reference, "in_app_runs_ms": [r.median_ms for r in recorded],
             "replayed_ms": baseline_ms, "replayed_speedup": 1.0 if baseline_ms else None,
             "in_app_speedup": 1.0 if reference else None,
             "failure": None if timed else recorded[0].failure}]
    for candidate, run in zip(candidates, runs, strict=True):
        rows.append({"configuration": f"trial {candidate['trial']}", "trial": candidate["trial"],
                     "params": candidate.get("params", {}), **run.to_dict(),
                     "replayed_ms": candidate.get("replayed_ms"),
                     "replayed_speedup": speedup(baseline_ms, candidate.get("replayed_ms")),
                     "in_app_speedup": speedup(reference, run.median_ms)})
    both = [r for r in rows[1:] if r["replayed_ms"] and r["in_app_ms"]]
    tau = (kendall_tau([r["replayed_ms"] for r in both], [r["in_app_ms"] for r in both])
           if len(both) >= MIN_TAU_CANDIDATES else None)
    methods = sorted({r.method for r in [*recorded, *runs] if r.method != "-"})
    return {"command": list(command), "runs": len(recorded) + len(runs), "rows": rows,
            "noise": noise, "method": " / ".join(methods) or "-", "kendall_tau": tau,
            "tau_candidates": len(both)}


# -- the console -----------------------------------------------------------------------------

#: the in-app table; data columns are dropped from the right in a narrow terminal, so the
#: two speedups come first
IN_APP_COLUMNS = (
    Column("configuration", role="id"),
    Column("replayed ×", justify="right"),
    Column("in-app ×", justify="right"),
    Column("replayed ms", justify="right"),
    Column("in-app ms", justify="right"),
    Column("swapped", justify="right"),
    Column("parameters", role="name"),
)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def in_app_row(row: dict[str, Any]) -> list[str]:
    """One row of the summary's ``rows`` as a row of the table.

    Parameters:
        row: the row.

    Returns:
        Its cells.
    """
    if row["trial"] is None:
        swapped = "- (original)"
        params = "recorded configuration, the application's own code"
    else:
        swapped = (f"{row['swapped']}/{row['launches']}" if row["exit_status"] == 0 else "failed")
        if row.get("refused"):
            swapped += f" ({row['refused']} refused)"
        params = " ".join(f"{k}={v}" for k, v in sorted(row["params"].items()))
    return [row["configuration"], _x(row["replayed_speedup"]), _x(row["in_app_speedup"]),
            milliseconds(row["replayed_ms"]), milliseconds(row["in_app_ms"]), swapped, params]


def in_app_lines(in_app: dict[str, Any]) -> list[str]:
    """The lines under the table: how it was timed and the recorded configuration's
    run-to-run change, the rank correlation, each failure and each candidate no launch of
    which ran the tuned code.

    Parameters:
        in_app: the summary.

    Returns:
        The lines.
    """
    rows = in_app["rows"]
    recorded = rows[0]
    runs = " and ".join(milliseconds(v) for v in recorded["in_app_runs_ms"])
    noise = in_app.get("noise")
    lines = [f"in app: the kernel's median per launch of the recorded launch shape, first launch "
             f"apart, timed by {in_app['method']}; the recorded configuration {runs} ms in its "
             f"first and last run"
             + (f": run to run {100 * noise:.1f} %, in-app speedups within it are noise"
                if noise is not None else "")]
    tau = in_app.get("kendall_tau")
    if tau is not None:
        lines.append(f"Kendall tau between the replay and the in-app ranking of "
                     f"{in_app['tau_candidates']} configurations: {tau:.2f}")
    else:
        lines.append(f"Kendall tau: needs {MIN_TAU_CANDIDATES} configurations with both times, "
                     f"{in_app['tau_candidates']} have them")
    for row in rows:
        if row.get("failure"):
            lines.append(f"  {row['configuration']}: no in-app time: {row['failure']}")
        elif row["trial"] is not None and row["swapped"] == 0:
            lines.append(f"  {row['configuration']}: no launch ran the tuned code "
                         f"({row['launches']} launches): its in-app time is the original code's")
    return lines


def print_in_app(console: Console, in_app: dict[str, Any]) -> None:
    """The in-app confirmation on the console (one line when it was skipped).

    Parameters:
        console: the console.
        in_app: the summary.
    """
    if not in_app:
        return
    if "skipped" in in_app:
        console.print(f"in-app confirmation skipped: {in_app['skipped']}", soft_wrap=True, markup=False)
        return
    print_table(console, IN_APP_COLUMNS, [in_app_row(r) for r in in_app["rows"]],
                title=f"in the application: {escape(shlex.join(in_app['command']))} "
                      f"({in_app['runs']} runs, the recorded configuration first and last)")
    for line in in_app_lines(in_app):
        console.print(line, soft_wrap=True, markup=False)
