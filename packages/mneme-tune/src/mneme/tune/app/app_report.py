"""The report of a whole-application tuning run: one folder that ``mneme run --apply``
swaps in.

    REPORT/app.json                   the run: the database, its kernel time, per kernel the
                                      verdict, speedup and noise, in-app share and the
                                      predicted saving; on top the predicted kernel time
    REPORT/profile.png                the profile's Pareto plot, tuned kernels marked
    REPORT/kernels/NN-<name>/         each tuned kernel's own report (mneme tune --report);
                                      best.json only where the speedup is significant

Predictions: a kernel's saving is its in-app time times (1 - 1/speedup) over the launch
shapes the tuned configuration is known to apply to: every shape it was tuned on when the
configuration changes code only, the recorded shape alone when it changes the launch
(other shapes then run the tuned code with their own launch, unmeasured: counted as
unchanged). A speedup inside the noise saves nothing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from mneme.replay.files import write_atomic

from ..errors import AppReportError
from .app_tuning import AppTuneResult, KernelRun

__all__ = ["APP_REPORT", "AppReportError", "check_report_folder", "kernel_rows", "read_app_report",
           "write_app_report"]

APP_REPORT = "app.json"
VERSION = 1
#: what a configuration that was not significantly faster is kept as (never applied)
NOT_APPLIED = "best-not-applied.json"


def _slug(text: str) -> str:
    base = text.partition("(")[0].removeprefix("void ").strip()
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", base)[:40].strip("_") or "kernel"


def _launch_changed(run: KernelRun) -> bool:
    best = run.outcome.best[0] if run.outcome and run.outcome.best else None
    if best is None:
        return False
    replay = (best.settings or {}).get("replay", {})
    return bool(replay.get("block") or replay.get("grid") or replay.get("shared_mem") is not None)


def kernel_row(run: KernelRun, kernel_ms: float) -> dict[str, Any]:
    """A kernel's line of app.json."""
    choice = run.choice
    c = run.outcome.confirmation if run.outcome else {}
    speedup = c.get("speedup") if c.get("objective", "time") == "time" else None
    significant = bool(c.get("significant")) and bool(speedup) and speedup > 1  # type: ignore[operator]
    studied = {i.id for i in choice.instances}
    shapes = [r for r in choice.rows if studied & set(r.instances)]
    launch_changed = _launch_changed(run)
    if launch_changed:
        first = choice.instances[0].id if choice.instances else None
        shapes = [r for r in shapes if first in r.instances]
    applies_ms = sum(r.entry.total_ms for r in shapes)
    saving = applies_ms * (1 - 1 / speedup) if significant else 0.0  # type: ignore[operator]
    from ..report._report import verdict

    return {
        "kernel": choice.display_name, "name": choice.name,
        "static_hash": choice.kernel.static_hash if choice.kernel else None,
        "share": choice.share, "in_app_ms": choice.total_ms,
        "instances": [i.id for i in choice.instances],
        "spaces": run.spaces, "note": run.note, "skipped": choice.skipped,
        "trials": run.trials, "seconds": run.seconds, "devices": run.devices, "stopped": run.stopped,
        # its last round's phases (run_phases.py): baseline, search, confirmation, ...
        "phases": dict(run.outcome.phases) if run.outcome else {},
        "rounds": run.rounds,  # each round's phases, restarts and trials (on its own lane)
        "verdict": verdict(run.outcome) if run.outcome else (choice.skipped or run.stopped or "not tuned"),
        "speedup": speedup, "noise": c.get("noise"), "significant": significant,
        "launch_changed": launch_changed,
        "applies_to_ms": applies_ms, "predicted_saving_ms": saving,
        "predicted_saving_share": saving / kernel_ms if kernel_ms else 0.0,
        "report": None,
    }


def kernel_rows(result: AppTuneResult) -> list[dict[str, Any]]:
    kernel_ms = result.selection.ranking.kernel_ms
    return [kernel_row(run, kernel_ms) for run in result.runs]


def write_app_report(result: AppTuneResult, directory: Path, plots: bool | str = "background") -> dict[str, Any]:
    """Writes the folder (see the module's text); returns app.json's content."""
    from ..report._report import write_report
    from .pareto import write_pareto

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise AppReportError(f"cannot create report folder {directory}: {error.strerror}") from None
    ranking = result.selection.ranking
    rows = kernel_rows(result)
    for index, (run, row) in enumerate(zip(result.runs, rows, strict=True)):
        if run.outcome is None:
            continue
        folder = directory / "kernels" / f"{index + 1:02d}-{_slug(run.choice.display_name)}"
        write_report(run.outcome, folder, plots=plots)
        row["report"] = str(folder.relative_to(directory))
        if not row["significant"] and (folder / "best.json").is_file():
            os.replace(folder / "best.json", folder / NOT_APPLIED)
    saving = sum(r["predicted_saving_ms"] for r in rows)
    kernel_ms = ranking.kernel_ms
    data = {
        "version": VERSION, "database": str(ranking.database.resolve()),
        "selection": result.selection.asked, "budget": result.budget.describe(result.budget.total),
        "seconds": result.seconds, "devices": result.devices,
        "phases": result.phases, "cpu_seconds": result.cpu_seconds, "lane_busy_seconds": result.lane_busy,
        "clock_control": next((r.outcome.clock_control for r in result.runs if r.outcome), None),
        "kernel_ms": kernel_ms, "covered_share": result.selection.covered,
        "tuned_share": result.selection.tuned_share,
        "predicted_saving_ms": saving, "predicted_kernel_ms": kernel_ms - saving,
        "predicted_saving_share": saving / kernel_ms if kernel_ms else 0.0,
        "kernels": rows,
    }
    try:
        marked = {i for i, r in enumerate(ranking.rows)
                  if any(r.entry.name == k.choice.name for k in result.runs if k.tuned)}
        write_pareto(ranking, directory / "profile.png", marked)
        data["plot"] = "profile.png"
    except (ImportError, ValueError, RuntimeError) as error:
        data["plot_skipped"] = str(error).splitlines()[0] if str(error) else type(error).__name__
    write_atomic(directory / APP_REPORT, json.dumps(data, indent=2, sort_keys=True).encode())
    return data


def read_app_report(path: Path) -> dict[str, Any] | None:
    """app.json of a report folder (None: not a whole-application report); a damaged one
    is one line."""
    from mneme.replay.db.metadata import read_json_file

    file = path / APP_REPORT if path.is_dir() else None
    if file is None or not file.is_file():
        return None
    data = read_json_file(file, error=AppReportError)
    if not isinstance(data, dict) or not isinstance(data.get("kernels"), list) \
            or not isinstance(data.get("kernel_ms"), (int, float)):
        raise AppReportError(f"{file} is not a whole-application report of this version "
                             "(write it with mneme tune --app --report DIR)")
    return data


def check_report_folder(report_dir: Path, database: Path) -> None:
    """A report folder already written for another database is refused (its kernels are
    not this database's)."""
    data = read_app_report(report_dir)
    if data is None:
        return
    theirs, ours = data.get("database"), str(Path(database).resolve())
    if theirs != ours:
        raise AppReportError(f"{report_dir} holds the report of {theirs}, not of {ours}: "
                             "give another --report folder")
