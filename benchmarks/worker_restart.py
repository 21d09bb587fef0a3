"""What a worker restart costs the tuner, with and without a spare worker started ahead.

    python benchmarks/worker_restart.py [--db DB --rid KERNEL/INSTANCE] [--rounds 5]

A candidate that takes its worker down (a kernel fault poisons the CUDA context; here a
worker hook aborts on a marked candidate, as a fault would end the process) costs a
restart. Measured in one run, on GPU 0 when there is one (else compile-only on the CPU):
the time from the failed candidate's answer to the next candidate's result (printed
beside that candidate's own time when no restart precedes it), for

  (a) no spare: a fresh process (imports, CUDA context, the instance restored from the
      database at its first replay), as every restart cost before spares;
  (b) a spare: the process started ahead, its context made and the instance restored
      while it waited, takes the slot at once.

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


def _wait_for_spare(pool, device, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pool.spare_ready(device):
            return
        time.sleep(0.05)


def restart_costs(db, rid, devices, spares: bool, rounds: int) -> tuple[list[float], float]:
    from mneme.tune import ReplayExecutor, TrialFailed

    compile_only = devices is None
    device = devices[0] if devices else None
    costs = []
    with ReplayExecutor(db, instance=rid, devices=devices, cpu_workers=1, compile_workers=0,
                        before_run=abort_on_poison, spares=spares) as pool:
        from mneme.tune.executor import SPARE_AFTER_TASKS

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
            except TrialFailed:
                pass
            start = time.perf_counter()
            pool.submit(_settings(compile_only)).result(timeout=300)
            costs.append(time.perf_counter() - start)
    return costs, task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=GOLDEN)
    parser.add_argument("--rid", default=SAXPY)
    parser.add_argument("--rounds", type=int, default=5)
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
        costs, task = restart_costs(args.db, args.rid, devices, spares, args.rounds)
        results[spares] = statistics.median(costs)
        print(f"  {'spare started ahead' if spares else 'fresh process     '}: next result "
              f"after a failure {results[spares] * 1000:8.1f} ms median (min "
              f"{min(costs) * 1000:.1f}, max {max(costs) * 1000:.1f}); a candidate alone "
              f"{task * 1000:.1f} ms")
    print(f"restart with a spare: {results[False] / results[True]:.0f}x faster than a fresh "
          "process (candidate included)")


if __name__ == "__main__":
    main()
