"""`mneme tune`: an Optuna study per recorded instance (or per kernel), replayed on
worker processes (one per GPU), with live progress, a table of the best configurations
and an optional report folder.

This module defines the command's options and imports nothing heavy (the values they name
come from _option_values.py): the command starts the workers' fork server first of all,
and only then imports the replay engine, Optuna and rich (_tune_run.py, the command's
body), so that the server's imports run beside its own instead of after them.

Exit status: 0 when a configuration completed, 1 when every trial failed, 2 user error.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import click

from ._gpu_start import start_gpu_driver, worker_slots
from ._option_values import CACHE_MODES, DEFAULT_CANDIDATES, PROBE_WORKERS, SAMPLERS
from .errors import TuneError
from .search._objective import OBJECTIVES
from .workers._worker_server import fork_every_worker, start_worker_server

__all__ = ["tune"]


@click.command("tune")
@click.option("-rdb", "--record-db", "database", required=True, metavar="DB",
              help="Recording database (or DB/KERNEL).")
@click.option("-rid", "--record-id", "record_id", metavar="INSTANCE",
              help="Instance to tune (default: every instance, a study each).")
@click.option("--space", "spaces", default=None, metavar="NAMES",
              help="Comma-separated spaces: launch, pipeline, transforms, specialize, bounds, "
                   "codegen, a preset (quick, all), or a user space module:name / file.py:name "
                   "(default: launch,pipeline; compile-only: pipeline,bounds).")
@click.option("--trials", type=click.IntRange(min=1), default=100, show_default=True,
              help="Trials of the study in all (a resumed study runs the missing ones).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Time budget, seconds.")
@click.option("--devices", metavar="0,1", help="GPUs to use, a worker each (default: GPU 0).")
@click.option("--workers-per-device", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--cpu-workers", type=click.IntRange(min=1), metavar="N",
              help="Compile-only: worker processes (default: one per CPU core).")
@click.option("--storage", metavar="URL",
              help="Optuna storage: sqlite:///FILE, postgresql://..., mysql://..., or a journal "
                   "file (journal:PATH, *.log, *.journal). Default: the journal file "
                   "./mneme-tune.journal (./mneme-tune.sqlite3 where only that exists).")
@click.option("--study", "study_name", metavar="NAME", help="Study name (default: from the instance, "
              "space and objectives); processes sharing storage and name cooperate.")
@click.option("--objective", "objectives", metavar="time|time,registers",
              help=f"Objectives to minimize, comma-separated: {', '.join(OBJECTIVES)} (default: "
                   "time; compile-only: registers; energy measures each trial ~0.3 s longer).")
@click.option("--sampler", type=click.Choice(SAMPLERS),
              help="Default: tpe (nsga2 for several objectives).")
@click.option("--seed", type=int, help="Sampler seed.")
@click.option("--grid-mode", type=click.Choice(["cover", "keep", "free"]), default="cover",
              show_default=True, help="Launch space: derive the grid to cover the recorded "
              "work, keep the recorded grid, or tune it.")
@click.option("--per", type=click.Choice(["instance", "kernel"]), default="instance",
              show_default=True, help="A study per instance, or per kernel across its instances.")
@click.option("--iterations", type=click.IntRange(min=1), default=5, show_default=True,
              help="Timed iterations per trial.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--cache", type=click.Choice(CACHE_MODES), default="auto", show_default=True,
              help="Cache state of each timed iteration (as mneme replay --cache); auto picks, per "
                   "instance, the mode whose replayed baseline is nearest the recorded in-app time, "
                   "and every trial is measured in it.")
@click.option("--screen", type=click.IntRange(min=0), default=0, show_default=True,
              help="Multi-fidelity (GPU): timed iterations of a first replay of each point; only "
                   "points within 1.25x of the best so far get --iterations (0: off).")
@click.option("--confirm-runs", type=click.IntRange(min=0), default=5, show_default=True,
              help="Replays of the recorded configuration and of the best after the search "
                   "(GPU), to tell a speedup from noise.")
@click.option("--probe/--no-probe", default=True, show_default=True,
              help="Before the search, run the recorded code with each launch shape of the space "
                   "(up to half the trials): shapes that break the kernel are never proposed.")
@click.option("--probe-workers", type=click.IntRange(min=0), default=PROBE_WORKERS,
              show_default=True,
              help="Spare workers per GPU that try the probe's shapes beside each other (a shape "
                   "that runs is replayed again alone): 0, one at a time (measured no faster "
                   "on an H200).")
@click.option("--trial-timeout", type=click.FloatRange(min=0, min_open=True), default=60.0,
              show_default=True, help="Watchdog: seconds before a trial's worker is killed.")
@click.option("--compile-only", is_flag=True,
              help="Tune static objectives (registers, spills, binary_size) without a GPU.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write best.json, summary.json, trials.csv and plots here.")
@click.option("--plots", type=click.Choice(["background", "wait", "off"]), default="background",
              show_default=True,
              help="The report's plots: drawn by a process of their own after the command "
                   "returns (background), before it returns (wait), or not at all (off).")
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True,
              help="Rows of the best-configurations table.")
@click.option("--confirm-in-app", "confirm_in_app", type=click.IntRange(min=1), is_flag=False,
              flag_value=DEFAULT_CANDIDATES, default=None, metavar="[N]",
              help="After the search (GPU), run the recorded configuration and the best N "
                   f"(default {DEFAULT_CANDIDATES}) distinct configurations in the application "
                   "given after --, a run each, swapped in as mneme run --apply does: replayed "
                   "and in-app speedups side by side.")
@click.option("--app", "whole_app", is_flag=True,
              help="Tune the whole application: the kernels that carry its recorded GPU time "
                   "(mneme profile), each over the instances that carry its time, under one "
                   "--budget; one report folder for mneme run --apply.")
@click.option("--share", type=float, metavar="S",
              help="--app: the fewest kernels covering this share of the kernel time (default 0.9).")
@click.option("--kernels", "kernel_count", type=click.IntRange(min=1), metavar="N",
              help="--app: the N kernels with the largest shares instead.")
@click.option("--budget", metavar="TRIALS|SECONDS",
              help="--app: trials (600) or time (90s, 5m) for every kernel together "
                   "(default: 60 trials per kernel).")
@click.option("--emit-slurm", "emit_slurm", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="--app across machines: write a Slurm job array (tune.sbatch), its report job "
                   "(merge.sbatch) and submit.sh to DIR instead of tuning; needs --storage "
                   "postgresql://...")
@click.option("--slurm", "slurm_submit", is_flag=True,
              help="--app: as --emit-slurm (default DIR ./mneme-slurm), then submit with sbatch.")
@click.option("--slurm-tasks", type=click.IntRange(min=1), metavar="N",
              help="--emit-slurm: tasks of the array (default: one per kernel to tune).")
@click.option("--sbatch", "sbatch_options", multiple=True, metavar="OPTION",
              help="--emit-slurm: an #SBATCH line of both jobs (--partition=gpu, --gres=gpu:1, "
                   "--time=1:00:00); repeatable.")
@click.option("--array-task", type=click.IntRange(min=0), metavar="I",
              help="--app: task I of a job array on shared --storage: starts at kernel I, spends "
                   "the budget in one round and writes no report (tune.sbatch passes it).")
@click.option("--clock-control", default="base", show_default=True, metavar="base|none|MHZ",
              help="Lock the SM clock of the GPUs tuned on for the run (base: their default "
              "applications clock, as Nsight Compute does; a number: that clock in MHz; none: as "
              "the driver sets it). Needs root; otherwise one line and the run measures unlocked.")
@click.option("--merge-report", is_flag=True,
              help="--app: write the report folder from the studies in --storage, no new trial "
                   "(merge.sbatch passes it).")
@click.argument("app_command", nargs=-1, type=click.UNPROCESSED, metavar="[-- APP ARGS...]")
def tune(app_command, confirm_in_app, whole_app, **options):
    """Tune recorded kernel instances: search a space of configurations, each replayed
    and verified, with an Optuna study."""
    if app_command and not confirm_in_app:
        raise TuneError(f"{shlex.join(app_command)}: an application command is only taken with "
                        "--confirm-in-app (mneme tune ... --confirm-in-app -- ./app args)")
    if not whole_app:  # first of all: its imports beside the command's, the driver's, ...
        if not (options["compile_only"] and fork_every_worker()):  # (served: forked instead)
            start_worker_server()
        if not options["compile_only"]:  # then cuInit, NVML's init and the GPU workers, beside
            # the imports below
            start_gpu_driver(nvml=options["clock_control"].strip().lower() != "none",
                             workers=worker_slots(options["devices"], options["workers_per_device"]))
    from ._tune_run import run_command  # (the engine, Optuna, rich: beside the server's imports)

    # When the mneme process started (mneme.cli.main): the phase line counts the imports.
    began = time.monotonic()  # (before: the interpreter and the imports)
    run_command(began, app_command=app_command, confirm_in_app=confirm_in_app, whole_app=whole_app,
                **options)
