"""The body of ``mneme tune``: everything after its options are read and the workers' fork
server started (tune_command.py, which imports this module only then, so that the replay
engine, Optuna and rich are imported beside the server's own imports, not before them).

Exit status: 0 when a configuration completed, 1 when every trial failed, 2 user error.
"""

from __future__ import annotations

import time

import click
from mneme.replay.db import Database, Instance
from mneme.replay.engine import open_database, select_instance
from mneme.replay.files import writable_directory
from mneme.runtime.clock_control import held_clocks, parse_clock_policy
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ._option_values import device_ordinals
from .errors import DeviceSelectionError, TuneError
from .search._baseline import baseline_failure_line
from .search._objective import unit
from .search._run_phases import phase_line
from .search._timing_report import timing_line
from .search._tuner import Tuner
from .tune_types import TuneOptions, TuneOutcome
from .workers import _early_workers
from .workers._pool_use import describe as describe_pool_use
from .workers._process_exit import end_process

__all__ = ["NOTHING_COMPLETED_EXIT", "best_table", "instances_to_tune", "parse_devices", "run_command"]

NOTHING_COMPLETED_EXIT = 1


def parse_devices(text: str | None, compile_only: bool) -> list[int] | None:
    """``"0,1"`` → [0, 1]; None → [0] with a GPU driver, else compile-only (None)."""
    from mneme.runtime import driver_available

    if compile_only:
        return None
    gpu = _early_workers.started() or driver_available()  # (workers started: a driver)
    if text is None:
        return [0] if gpu else None
    try:
        devices = device_ordinals(text)
    except ValueError as error:
        raise DeviceSelectionError(str(error)) from None
    if not gpu:
        raise DeviceSelectionError(
            f"--devices {text}: there is no usable GPU driver on this machine "
            "(tune with --compile-only)"
        )
    return devices


def instances_to_tune(database: str, record_id: str | None,
                      per: str) -> tuple[Database, list[list[Instance]]]:
    """The database, opened once, and groups of its instances, one study each: the tuner
    and its workers take these objects and look nothing up again."""
    db, kernel = open_database(database)
    if record_id or (kernel is not None and per == "instance" and
                     len(db.kernel(kernel).instance_hashes()) == 1):
        instance = select_instance(db, kernel, record_id)
        if per == "kernel":
            return db, [instance.kernel.instances()]
        return db, [[instance]]
    kernels = [db.kernel(kernel)] if kernel is not None else db.kernels()
    groups = []
    for k in kernels:
        instances = k.instances()
        if not instances:
            continue
        groups += [instances] if per == "kernel" else [[i] for i in instances]
    if not groups:
        raise TuneError(f"{db.root} holds no recorded instance to tune")
    return db, groups


def _format_values(values, objectives) -> str:
    if values is None:
        return "-"
    return ", ".join(f"{v:.4g} {unit(n)}" for v, n in zip(values, objectives, strict=True))


def best_table(outcome: TuneOutcome, top: int) -> Table:
    # the study name (it holds the instance id) is printed whole above the table, by the
    # caller: a table title would wrap it in a narrow terminal
    table = Table()
    table.add_column("trial", justify="right")
    table.add_column("parameters")
    table.add_column(", ".join(outcome.objectives), justify="right")
    table.add_column("vs baseline", justify="right")
    table.add_column("verified")
    base = outcome.baseline
    if "values" in base:
        table.add_row("base", "recorded configuration (default<O3>, recorded launch)",
                      _format_values(base["values"], outcome.objectives), "1.00x",
                      "yes" if base.get("verified") else "not checked")
    elif "failure" in base:
        table.add_row("base", "recorded configuration", "-", "-",
                      f"failed: {base.get('reason')}")
    for record in outcome.best[:top]:
        params = " ".join(f"{k}={v}" for k, v in sorted(record.params.items()))
        verified = {True: "yes", False: "NO", None: "not checked"}[record.verified]
        speed = f"{record.speedup:.2f}x" if record.speedup else "-"
        table.add_row(str(record.number), params, _format_values(record.values, outcome.objectives),
                      speed, verified)
    return table


def run_command(began: float, database, record_id, spaces, trials, timeout, devices,
                workers_per_device, cpu_workers, storage, study_name, objectives, sampler, seed,
                grid_mode, per, iterations, warmup, cache, screen, confirm_runs, probe,
                probe_workers, trial_timeout, compile_only, report_dir, plots, top, confirm_in_app,
                whole_app, share, kernel_count, budget, emit_slurm, slurm_submit, slurm_tasks,
                sbatch_options, array_task, clock_control, merge_report, app_command) -> None:
    """The ``mneme tune`` command once its options are read and the workers' fork server
    started (tune_command.py): ``began`` is when its imports were done (the phase line's
    ``start.imports`` ends there); the other parameters are the command's options."""
    process = click.get_current_context().obj or {}
    started = process.get("started") or began
    console = Console(stderr=True)
    out = Console()
    gpu_began = time.monotonic()
    device_list = parse_devices(devices, compile_only)
    # Held until the command ends (click closes it), given back by a guard if it is killed.
    clocks = click.get_current_context().with_resource(held_clocks(
        parse_clock_policy(clock_control), device_list or [], lambda line: console.print(line, markup=False)))
    clock_state = clocks.describe() if device_list else None
    gpu_seconds = time.monotonic() - gpu_began  # (the driver's start, the clocks locked)
    if device_list is None and not compile_only:
        console.print("no GPU driver on this machine: tuning compile-only on static objectives")
    if cpu_workers is not None and device_list is not None:
        raise TuneError("--cpu-workers sets compile-only workers; on GPUs use --workers-per-device")
    if spaces is None:
        spaces = "launch,pipeline" if device_list is not None else "pipeline,bounds"
    if not whole_app and (share is not None or kernel_count is not None or budget is not None):
        raise TuneError("--share, --kernels and --budget choose and share out the kernels of --app: "
                        "add --app (or tune one instance with -rid)")
    from .app.slurm import Cluster

    cluster = Cluster.from_context(click.get_current_context(), whole_app)  # (--emit-slurm, ...)
    if whole_app:
        if record_id or study_name or confirm_in_app:
            raise TuneError("--app tunes every kernel that carries the time: -rid, --study and "
                            "--confirm-in-app choose one (leave them out, or leave out --app)")
        from .app.app_command import run_app

        options = TuneOptions(
            trials=trials, devices=device_list, workers_per_device=workers_per_device,
            cpu_workers=cpu_workers, objectives=objectives, sampler=sampler, seed=seed,
            storage=storage, grid_mode=grid_mode, iterations=iterations, warmup=warmup, cache=cache,
            trial_timeout=trial_timeout, screen=screen, confirm_runs=confirm_runs, probe=probe,
            probe_workers=probe_workers, clock_control=clock_state)
        status = run_app(database, spaces, options, share, kernel_count, budget, report_dir, plots,
                         cluster)
        if process.get("own_process"):
            end_process(status)
        if status:
            raise SystemExit(status)
        return
    db, groups = instances_to_tune(database, record_id, per)
    if study_name and len(groups) > 1:
        raise TuneError("--study names one study, but this tunes several instances: add -rid")
    options = TuneOptions(
        trials=trials, timeout=timeout, devices=device_list, workers_per_device=workers_per_device,
        cpu_workers=cpu_workers,
        objectives=objectives, sampler=sampler, seed=seed, storage=storage, study=study_name,
        grid_mode=grid_mode, iterations=iterations, warmup=warmup, cache=cache, trial_timeout=trial_timeout,
        screen=screen, confirm_runs=confirm_runs, probe=probe, probe_workers=probe_workers,
        confirm_in_app=confirm_in_app or 0, app_command=list(app_command) or None,
        clock_control=clock_state,
    )
    building = time.monotonic()
    tuners: list[Tuner] = []
    try:
        for group in groups:  # validate all first
            # The first tuner's workers start while its study opens (worker_start.py).
            # (and its study opens on a thread, beside the workers and the baseline)
            tuners.append(Tuner(db, group, spaces, options, start_workers=not tuners,
                                defer_study=not tuners))
        if report_dir is not None:  # before the search, not after it
            writable_directory(report_dir, "write the report to", TuneError)
        for tuner in tuners:  # --confirm-in-app: an application that fails plain, before any search
            tuner.check_application()
    except BaseException:
        for tuner in tuners:
            tuner.close()  # (workers started for a run that does not come)
        raise
    completed_any = False
    for index, tuner in enumerate(tuners):
        suffix = f" [{index + 1}/{len(tuners)}]" if len(tuners) > 1 else ""
        outcome = _run_one(tuner, console, suffix)
        ran = time.monotonic()
        if index == 0:  # (the interpreter, imports, the database: before the first tuner)
            # Its parts: the interpreter and the imports, the GPU driver and its clocks
            # (the rest: the database opened, its instances read).
            outcome.phases = {"start": building - started, "start.imports": began - started,
                              "start.gpu": gpu_seconds, **outcome.phases}
        out.print(f"best configurations: {outcome.study.study_name}", soft_wrap=True, markup=False)
        out.print(best_table(outcome, top))
        out.print(
            f"{outcome.ran} trials this run: {outcome.trials_per_second:.1f} trials/s over "
            f"{outcome.search_seconds:.1f} s of search ({outcome.elapsed:.1f} s in all), "
            f"{outcome.failed} failed; "
            f"study {outcome.study.study_name!r} holds {len(outcome.trials)} finished trials",
            soft_wrap=True, markup=False,
        )
        if outcome.best:
            from .report._report import verdict

            out.print(verdict(outcome))
        if "failure" not in outcome.baseline:
            out.print(timing_line(outcome.baseline.get("timing")), soft_wrap=True, markup=False)
        if outcome.in_app:  # (--confirm-in-app; ids whole)
            from mneme.replay.tables import console as table_console

            from .apply._app_confirm import print_in_app

            print_in_app(table_console(), outcome.in_app)
        completed_any |= bool(outcome.best)
        if not outcome.best:
            _explain_failures(outcome, out)
        if report_dir is not None:
            from .report._report import write_report

            folder = report_dir if len(tuners) == 1 else report_dir / f"{index + 1:02d}"
            data = write_report(outcome, folder, plots={"wait": True, "off": False}.get(plots, plots))
            pngs = sorted(p for p in data.get("plots", []) if p.endswith(".png"))
            out.print(f"report: {folder}" + (f" ({', '.join(pngs)})" if pngs else ""), soft_wrap=True,
                      markup=False)
            if "plots_pid" in data:
                out.print(f"  plots: drawn in the background (process {data['plots_pid']}); "
                          f"summary.json lists them when done, {folder / 'plots.log'} says why "
                          "if one is missing", soft_wrap=True, markup=False)
            for kind, why in data.get("plots_skipped", {}).items():
                out.print(f"  plot {kind} skipped: {why}")
        if outcome.pool_use:
            out.print(f"search: {describe_pool_use(outcome.pool_use)}", soft_wrap=True, markup=False)
        out.print(phase_line({**outcome.phases, "report": time.monotonic() - ran}), soft_wrap=True,
                  markup=False)
    if not completed_any:
        console.print("no configuration completed: every trial failed (reasons above)")
    status = 0 if completed_any else NOTHING_COMPLETED_EXIT
    if process.get("own_process"):  # (no interpreter teardown: process_exit.py)
        end_process(status, [tuner.storage for tuner in tuners])
    if status:
        raise SystemExit(status)


def _explain_failures(outcome: TuneOutcome, out: Console) -> None:
    """Why the trials failed: each kind once, with its count and first reason."""
    kinds: dict[str, list] = {}
    for record in outcome.trials:
        if record.state == "failed":
            kinds.setdefault(record.failure or "error", []).append(record)
    for kind, records in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        out.print(f"  {len(records)} trial(s) {kind}: {records[0].reason}")


def _run_one(tuner: Tuner, console: Console, suffix: str) -> TuneOutcome:
    with Progress(
        TextColumn("[bold]tuning{task.fields[suffix]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("failed {task.fields[failed]}  best {task.fields[best]}  "
                   "{task.fields[rate]:.1f} trials/s"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("tune", total=tuner.options.trials, suffix=suffix, failed=0,
                                 best="-", rate=0.0)
        objective = tuner.objectives[0]

        def started(info: dict) -> None:
            devices = ", ".join(sorted({d.get("name", "?") for d in info["devices"]}))
            progress.console.print(
                f"study {info['study']}: sampler {info['sampler']}, {info['workers']} worker(s) "
                f"on {devices}, {info['space_size']} points in the space"
                + (f"; {info['shapes_known']} launch shapes known from earlier runs"
                   if info.get("shapes_known") else "")
                + (f"; probing {info['probes']} launch shapes with the recorded code first"
                   if info.get("probes") else ""), soft_wrap=True, markup=False)
            base = info["baseline"]
            if "failure" in base:
                progress.console.print(baseline_failure_line(base), soft_wrap=True, markup=False)
            else:
                progress.console.print(f"baseline {timing_line(base.get('timing'))}", soft_wrap=True,
                                       markup=False)

        def update(p) -> None:
            best = f"{p.best:.4g} {unit(objective)}" if p.best is not None else "-"
            progress.update(task, completed=p.done, total=p.total, failed=p.failed, best=best,
                            rate=p.rate)

        def in_app(index: int, runs: int, label: str) -> None:
            progress.console.print(f"in the application, run {index + 1}/{runs}: {label}",
                                   soft_wrap=True, markup=False)

        return tuner.run(on_progress=update, on_start=started, on_in_app=in_app)
