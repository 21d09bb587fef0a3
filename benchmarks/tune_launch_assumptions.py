"""Tuning kernels that assume their launch shape (GPU, issue 23).

    python benchmarks/tune_launch_assumptions.py --exe PATH/launch_assumptions [--trials 60]
    python benchmarks/tune_launch_assumptions.py --db launch_assumptions.rdb [--probe-workers 4]

The corpus program tests/corpus/cuda/launch_assumptions (built with mneme-clang++; the GPU
host has no clang, so build it here and carry it) holds four kernels that break outside
their launch shape: a shared array sized by a #define'd block size, __launch_bounds__ with
a fixed warp count, a reduction assuming a power-of-two block, a TILE x TILE tile. It is
recorded (unless --db names a recording), and each kernel is tuned over launch and
pipeline. Printed per kernel: trials/s of the search, worker restarts (and how many were
handed to a prepared spare worker: context made, instance restored, code loaded), the
median hand-over (the dispatcher's swap of the failed worker for the spare), where a
fault's time goes (medians over the restarts: the failed trial in its worker until its
answer, the faulted process's exit, reaped off the dispatcher, and the failure to the
slot's next task), the trials
spent on invalid launch shapes (all of them, those the guarded probe caught before they
could fault, and those after the shape was shown invalid), the shapes the probe found invalid, and start-up time (the tuner's whole run
less its search) against search time. Each kernel is tuned ``--runs`` times (2): the first
run probes the launch shapes, later ones know them from the first (kept with the
recording, shape_cache.py).

Goals: >= 50 trials/s on every kernel, <= 10 % of the trials on shapes already shown
invalid.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

KERNELS = ["tile_stencil", "warp_partials", "pow2_block_sum", "tile_transpose"]


def _instance(db: Path, name: str) -> str:
    from mneme.replay.db import Database

    try:
        database = Database.open(db)
    except Exception as error:  # noqa: BLE001 - a bad --db is one line
        raise SystemExit(f"tune_launch_assumptions: {error}") from None
    for kernel in database.kernels():
        if (kernel.demangled_name or kernel.name).startswith(name):
            return max(kernel.instances(), key=lambda i: i.occurrences).id
    raise SystemExit(f"tune_launch_assumptions: {db} has no kernel {name}")


def _median_ms(restart_log, field: str) -> str:
    values = [getattr(r, field) for r in restart_log if getattr(r, field) is not None]
    return f"{statistics.median(values) * 1000:.1f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--exe", type=Path, help="a mneme-clang++ build of launch_assumptions")
    source.add_argument("--db", type=Path, help="a recording of it")
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--runs", type=int, default=2,
                        help="tuning runs per kernel: the first probes the launch shapes, later "
                             "ones start from what it kept with the recording (shape_cache.py)")
    from mneme.tune import TuneOptions, Tuner
    from mneme.tune.search import INVALIDATING, PROBE_WORKERS

    parser.add_argument("--probe-workers", type=int, default=PROBE_WORKERS,
                        help="spares per GPU that try the probe's shapes beside each other "
                             "(default 0: one at a time)")
    args = parser.parse_args()
    from rich.console import Console
    from rich.table import Table

    work = Path(tempfile.mkdtemp(prefix="mneme-launch-assumptions-"))
    db = args.db
    if db is None:
        db = work / "launch_assumptions.rdb"
        run = subprocess.run([sys.executable, "-m", "mneme.cli", "record", "-rdb", str(db),
                              "-mr", "2", "--", str(args.exe)], capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"tune_launch_assumptions: recording failed: {run.stderr.strip()[-400:]}")
    table = Table(title=f"kernels that assume their launch shape: {args.trials} trials each, "
                        f"{args.probe_workers} probe workers")
    for column in ("kernel", "run", "shapes known", "trials/s", "restarts", "by prepared spare", "of probe workers",
                   "hand-over ms",
                   "fault ms", "exit ms", "next task ms", "on invalid shapes", "caught by guard", "after shown invalid", "invalid shapes", "start-up s",
                   "search s"):
        table.add_column(column, justify="left" if column == "kernel" else "right")
    goals, limits = [], []
    for name, run in ((n, r) for n in KERNELS for r in range(1, args.runs + 1)):
        options = TuneOptions(trials=args.trials, devices=[0], study=f"{name}-{run}", seed=5, iterations=3,
                              storage=f"sqlite:///{work / 'tune.sqlite3'}",
                              probe_workers=args.probe_workers)
        tuner = Tuner(db, [_instance(db, name)], "launch,pipeline", options)
        outcome = tuner.run()
        ordered = sorted(outcome.trials, key=lambda t: t.number)
        shown: set = set()
        on_invalid = after = caught = 0
        for trial in ordered:
            shape = tuner.region.shape_of(trial.params)
            if shape in shown:
                after += 1
            if trial.state == "failed" and trial.failure in INVALIDATING:
                on_invalid += 1
                caught += trial.failure == "out-of-bounds"
                if tuner.region.runs_recorded_code(trial.params):
                    shown.add(shape)
        startup = outcome.elapsed - outcome.search_seconds
        swaps = [r.seconds for r in outcome.restart_log if r.by_spare and r.seconds is not None]

        prepared = sum(r.spare_prepared for r in outcome.restart_log)
        table.add_row(name, str(run), str(outcome.shapes_known), f"{outcome.trials_per_second:.1f}",
                      str(outcome.restarts),
                      str(prepared), str(sum(r.beside for r in outcome.restart_log)),
                      f"{statistics.median(swaps) * 1000:.2f}" if swaps else "-",
                      *(_median_ms(outcome.restart_log, f) for f in ("ran", "exited", "next_task")),
                      str(on_invalid), str(caught), str(after), str(len(tuner.region.invalid)),
                      f"{startup:.2f}", f"{outcome.search_seconds:.2f}")
        if outcome.pool_use:
            from mneme.tune.workers import describe

            limits.append(f"{name} run {run}: {describe(outcome.pool_use)}")
        goals.append((f"{name} run {run}: >= 50 trials/s", outcome.trials_per_second >= 50))
        goals.append((f"{name} run {run}: <= 10 % of trials on shapes already shown invalid",
                      after <= 0.1 * len(ordered)))
    Console(width=180).print(table)
    for line in limits:
        print(f"  {line}")
    for goal, met in goals:
        print(f"  goal {goal}: {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
