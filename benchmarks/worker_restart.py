"""What a worker restart costs the tuner: a fresh process, a spare worker, a burst of them.

    python benchmarks/worker_restart.py [--db DB --rid KERNEL/INSTANCE] [--rounds 5] [--burst 24]

A candidate that takes its worker down (a kernel fault poisons the CUDA context; here a
worker hook aborts on a marked candidate, as a fault would end the process) costs a
restart. Measured in one run, on GPU 0 when there is one (else compile-only on the CPU):

  (a) no spare: a fresh process (imports, CUDA context, the instance restored from the
      database at its first replay), as every restart cost before spares;
  (b) a prepared spare (started ahead: context made, the instance restored with its
      pristine copy, the code compiled and loaded, stream and clock made) takes the slot:
      the hand-over (the dispatcher's swap) and the time from the failure's answer to the
      next candidate's result (a candidate alone printed beside it);
  (c) a burst of --burst failures in a row, as the probe of a kernel that assumes its
      block size gives: with the pool kept for it (``expect_failures``: grows with each
      hand-over, refilled in the background) against one spare; the seconds until the
      candidate after the burst answered, restarts, and how many hand-overs found a
      prepared spare.

Goal (issue 23): restarts that cost milliseconds. Default instance: saxpy of
tests/data/golden.rdb (use --db/--rid for a larger one: the restore grows with it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden.rdb"
SAXPY = "5acf7c2e2f6ed113/1b783248d1ae4a7d"
POISON_REGISTERS = 40


def abort_on_poison(settings) -> None:
    """Worker hook: the marked candidate ends its worker, as a kernel fault does."""
    if settings.compile.max_registers == POISON_REGISTERS:
        os.abort()


def _settings(compile_only: bool, poison: bool = False):
    from mneme.replay.engine import ReplayConfig, ReplaySettings
    from mneme.replay.jit import CompileConfig

    return ReplaySettings(CompileConfig(max_registers=POISON_REGISTERS if poison else None),
                          ReplayConfig(compile_only=compile_only, iterations=1, warmup=0))


def _wait_for_spare(pool, device, timeout: float = 120.0, count: int = 1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pool.spare_ready(device, count):
            return
        time.sleep(0.05)


def restart_costs(db, rid, devices, spares: bool, rounds: int) -> tuple[list[float], list[float], float]:
    """(next result after each failure, each hand-over's swap, a candidate alone), seconds."""
    from mneme.tune import ReplayExecutor, TrialFailedError

    compile_only = devices is None
    device = devices[0] if devices else None
    costs = []
    with ReplayExecutor(db, instance=rid, devices=devices, cpu_workers=1, compile_workers=0,
                        before_run=abort_on_poison, spares=spares) as pool:
        from mneme.tune.workers._dispatcher import SPARE_AFTER_TASKS

        plain = []
        for _ in range(SPARE_AFTER_TASKS + 1):  # (spares start after the first tasks)
            start = time.perf_counter()
            pool.submit(_settings(compile_only)).result(timeout=300)
            plain.append(time.perf_counter() - start)
        task = statistics.median(plain[1:])
        for _ in range(rounds):
            if spares:
                _wait_for_spare(pool, device)
            try:
                pool.submit(_settings(compile_only, poison=True)).result(timeout=300)
            except TrialFailedError:
                pass
            start = time.perf_counter()
            pool.submit(_settings(compile_only)).result(timeout=300)
            costs.append(time.perf_counter() - start)
        swaps = [r.seconds for r in pool.restart_log if r.by_spare and r.seconds is not None]
    return costs, swaps, task


def burst_cost(db, rid, devices, burst: int, pool_kept: bool) -> tuple[float, int, int, int]:
    """A burst of ``burst`` failing candidates in flight together, then one that runs:
    (seconds from the burst's submission to that candidate's result, restarts, hand-overs
    by a spare, of them by a prepared spare, the median seconds a failed process took to
    exit: reaped off the dispatcher, which no longer waits for it)."""
    from mneme.tune import ReplayExecutor, TrialFailedError

    compile_only = devices is None
    device = devices[0] if devices else None
    expected = burst if pool_kept else 0
    with ReplayExecutor(db, instance=rid, devices=devices, cpu_workers=1, compile_workers=0,
                        before_run=abort_on_poison, expect_failures=expected) as pool:
        pool.submit(_settings(compile_only)).result(timeout=300)  # the baseline's replay
        pool.expect_failures(expected)  # (as the tuner does when its probe begins)
        _wait_for_spare(pool, device, count=min(burst, pool.spares.target(device)))
        start = time.perf_counter()
        failing = [pool.submit(_settings(compile_only, poison=True)) for _ in range(burst)]
        after = pool.submit(_settings(compile_only))
        for future in failing:
            try:
                future.result(timeout=600)
            except TrialFailedError:
                pass
        after.result(timeout=600)
        seconds = time.perf_counter() - start
        log = list(pool.restart_log)
    exits = [r.exited for r in log if r.exited is not None]
    return (seconds, len(log), sum(r.by_spare for r in log),
            sum(r.spare_prepared for r in log), statistics.median(exits) if exits else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=GOLDEN)
    parser.add_argument("--rid", default=SAXPY)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--burst", type=int, default=24,
                        help="failures in a row for (c) (tile_stencil's probe: 24)")
    args = parser.parse_args()
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    except OSError:  # no driver tools: compile-only
        listed = ""
    devices = [0] if any(line.startswith("GPU ") for line in listed.splitlines()) else None
    where = "GPU 0" if devices else "the CPU (compile-only: no context, no restore)"
    print(f"worker restarts on {where}, instance {args.rid}, {args.rounds} rounds")
    results = {}
    for spares in (False, True):
        costs, swaps, task = restart_costs(args.db, args.rid, devices, spares, args.rounds)
        results[spares] = statistics.median(costs)
        swap = f"; hand-over {statistics.median(swaps) * 1000:.2f} ms median" if swaps else ""
        print(f"  {'prepared spare     ' if spares else 'fresh process      '}: next result "
              f"after a failure {results[spares] * 1000:8.1f} ms median (min "
              f"{min(costs) * 1000:.1f}, max {max(costs) * 1000:.1f}){swap}; a candidate "
              f"alone {task * 1000:.1f} ms")
    print(f"restart with a spare: {results[False] / results[True]:.0f}x faster than a fresh "
          "process (candidate included)")
    print(f"a burst of {args.burst} failures in a row (the probe of a kernel that assumes its "
          "block size), then one candidate:")
    for kept in (False, True):
        seconds, restarts, by_spare, prepared, exited = burst_cost(args.db, args.rid, devices,
                                                                   args.burst, kept)
        label = "pool kept for the burst" if kept else "one spare              "
        exit_line = f"; a failed process exited in {exited * 1000:.1f} ms" if exited else ""
        print(f"  {label}: {seconds:6.2f} s, {seconds / max(1, restarts) * 1000:6.1f} ms per "
              f"restart; {restarts} restarts, {by_spare} by a spare, {prepared} of them "
              f"prepared{exit_line}")


if __name__ == "__main__":
    main()
