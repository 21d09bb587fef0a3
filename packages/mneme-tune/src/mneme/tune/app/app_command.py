"""`mneme tune --app`: the kernels that carry the application's GPU time, every one tuned
under one budget, and one report folder for `mneme run --apply`.

tune_command.py hands over here when ``--app`` is given; this module prints the
selection, the progress of each kernel and the result table with the predicted
application kernel time.
"""

from __future__ import annotations

from pathlib import Path

from mneme.replay.db import Database
from mneme.replay.tables import Column, console, print_table
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from ..errors import TuneError
from ..tune_types import TuneOptions
from .app_report import check_report_folder, write_app_report
from .app_tuning import AppTuneResult, Events, KernelRun, tune_application
from .budget import Budget
from .profile import rank
from .selection import Selection, select
from .slurm import Cluster, emit

__all__ = ["DEFAULT_REPORT", "run_app"]

#: where the report goes when --report is not given
DEFAULT_REPORT = Path("mneme-app-report")

SELECTION_COLUMNS = (
    Column("#", justify="right"), Column("kernel", role="name"), Column("share", justify="right"),
    Column("cumul.", justify="right"), Column("tuned on"), Column("instances", role="id"),
)
RESULT_COLUMNS = (
    Column("kernel", role="name"), Column("share", justify="right"), Column("trials", justify="right"),
    Column("speedup", justify="right"), Column("verdict"), Column("saves", justify="right"),
)


def print_selection(out: Console, selection: Selection) -> None:
    rows, cumulative = [], 0.0
    for index, choice in enumerate(selection.kernels):
        cumulative += choice.share
        ids = ", ".join(i.id for i in choice.instances) or "-"
        what = choice.skipped or f"{len(choice.instances)} instance(s), {100 * choice.studied_share:.1f}% of the time"
        rows.append([str(index + 1), choice.display_name, f"{100 * choice.share:.1f}%",
                     f"{100 * cumulative:.1f}%", what, ids])
    ranking = selection.ranking
    print_table(out, SELECTION_COLUMNS, rows,
                title=f"kernels to tune ({selection.asked} of {ranking.kernel_ms:.3f} ms of kernel time): "
                      f"{len(selection.kernels)} of {len({r.entry.name for r in ranking.rows})} kernels, "
                      f"{100 * selection.covered:.1f}% of the time, {100 * selection.tuned_share:.1f}% tunable")


def print_result(out: Console, result: AppTuneResult, data: dict) -> None:
    rows = []
    for row in data["kernels"]:
        speed = "-"
        if row["speedup"]:
            speed = f"{row['speedup']:.2f}x"
            if row["noise"] is not None:
                speed += f" ±{100 * row['noise']:.0f}%"
        verdict = row["skipped"] or ("applied" if row["significant"] else "not applied: " + (
            row["stopped"] or "no significant speedup"))
        rows.append([row["kernel"], f"{100 * row['share']:.1f}%", str(row["trials"]), speed, verdict,
                     f"{100 * row['predicted_saving_share']:.1f}%"])
    print_table(out, RESULT_COLUMNS, rows, title="whole-application tuning")
    for row in data["kernels"]:
        if row["note"]:
            out.print(f"  {row['kernel']}: {row['note']}", soft_wrap=True, markup=False)
    got = sum(1 for r in result.runs if r.outcome is not None)
    tunable = sum(1 for r in result.runs if r.choice.tunable or r.tuner is not None)
    if got < tunable:
        out.print(f"the budget ({result.budget.describe(result.budget.total)}) gave trials to {got} of "
                  f"{tunable} tunable kernels; a larger --budget reaches the others", soft_wrap=True)
    out.print(f"predicted application kernel time: {data['kernel_ms']:.3f} ms recorded -> "
              f"{data['predicted_kernel_ms']:.3f} ms ({100 * data['predicted_saving_share']:.1f}% saved, "
              f"{data['kernel_ms'] / max(data['predicted_kernel_ms'], 1e-12):.3f}x), "
              f"{result.seconds:.1f} s of tuning", soft_wrap=True, markup=False)


def run_app(database: str, spaces: str, options: TuneOptions, share: float | None, kernels: int | None,
            budget_text: str | None, report_dir: Path | None, plots: str, cluster: Cluster | None = None) -> int:
    """The whole-application run; returns the exit status (0: a kernel completed).
    ``cluster``: the Slurm steps (slurm.py): write the scripts, run as a task, merge."""
    cluster = cluster or Cluster()
    from mneme.replay.engine import open_database

    if share is not None and kernels is not None:
        raise TuneError("--share and --kernels both choose the kernels: give one")
    db, kernel = open_database(database)
    if kernel is not None:
        raise TuneError(f"{database}: --app tunes the whole application: give the database, not a kernel")
    ranking = rank(db)
    selection = select(db, ranking, share=share, top=kernels)
    budget = Budget.parse(budget_text, sum(1 for k in selection.kernels if k.tunable))
    report_dir = report_dir or DEFAULT_REPORT
    if cluster.task is None:  # (a task writes no report)
        check_report_folder(report_dir, ranking.database)
    from mneme.replay.files import writable_directory

    if cluster.task is None and not cluster.emits:  # (neither writes the report here)
        writable_directory(report_dir, "write the report to", TuneError)
    out, err = console(), Console(stderr=True)
    print_selection(out, selection)
    if not any(k.tunable for k in selection.kernels):
        raise TuneError("none of the kernels that carry the time can be tuned (reasons above): "
                        "record the application built with mneme-clang++ or nvcc")
    if cluster.emits:
        return emit(cluster, sum(1 for k in selection.kernels if k.tunable), report_dir, out)
    result = _tune(db, selection, spaces, cluster.task_options(options), budget, err, cluster)
    if cluster.task is not None:  # the merge job writes the report, from every task's trials
        out.print(f"task {cluster.task}: done with the shared studies; the merge job writes the report",
                  soft_wrap=True, markup=False)
        return 0 if any(r.tuned for r in result.runs) else 1
    data = write_app_report(result, report_dir, plots={"wait": True, "off": False}.get(plots, plots))
    print_result(out, result, data)
    out.print(f"report: {report_dir} (apply it: mneme run --apply {report_dir} -- APP ARGS)", soft_wrap=True,
              markup=False)
    return 0 if any(r.tuned for r in result.runs) else 1


def _tune(db: Database, selection: Selection, spaces: str, options: TuneOptions, budget: Budget,
          err: Console, cluster: Cluster) -> AppTuneResult:
    with Progress(TextColumn("[bold]{task.fields[label]}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("failed {task.fields[failed]}  {task.fields[rate]:.1f} trials/s"),
                  TimeElapsedColumn(), console=err, transient=False) as progress:
        tasks: dict[int, TaskID] = {}  # each kernel's bar (kernels run side by side on several GPUs)

        def starts(run: KernelRun, round_index: int, amount: float) -> None:
            where = f"GPU {','.join(map(str, run.running_on))} " if len(options.devices or []) > 1 else ""
            label = f"{where}round {round_index}: {run.choice.display_name[:40]} ({budget.describe(amount)})"
            total = int(amount) if budget.trials is not None else None
            tasks[id(run)] = progress.add_task("kernel", total=total, label=label, failed=0, rate=0.0)

        def update(run: KernelRun, p) -> None:
            task = tasks.get(id(run))
            if task is not None:
                progress.update(task, completed=p.done, total=p.total if budget.trials is not None else None,
                                failed=p.failed, rate=p.rate)

        def done(run: KernelRun, round_index: int) -> None:
            if run.outcome is not None:
                from ..report._report import verdict

                progress.console.print(f"  {run.choice.display_name[:60]}: {verdict(run.outcome)}",
                                       soft_wrap=True, markup=False)

        return tune_application(db, selection, spaces, options, budget, Events(starts, update, done),
                                rotate=cluster.task or 0, rounds=1 if cluster.task is not None else 2,
                                report_only=cluster.merge)
