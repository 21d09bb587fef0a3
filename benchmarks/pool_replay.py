"""Replaying a framework pool's instances (GPU): every instance of a recording, in one process.

A framework that preallocates its memory (JAX takes one pool of 75 % of the GPU; the corpus
script cupy_pool_arena.py does the same with CuPy) gives instances whose main region is
the whole pool. Replay maps such a region whole but restores, resets and verifies only its
live ranges, the chunks the recording stores on either side (docs/replay.md, sparse
regions). This replays every instance of ``--db`` in one process, as scripts and tuner
workers do, one ``ReplaySession`` after another, and prints

- how many instances verified, the wall time of each (median and slowest) and the engine's
  own split (``ReplayResult.timings``: restore, determinism profile, run, verification);
- replayed against in-app time (``ReplayResult.fidelity``: the replay's median over the
  instance's recorded in-application median, both by the same timer) for the instances
  with an in-app time: the median ratio and how many lie within 0.9-1.1;
- per instance, the device memory its image held (free memory before the session less free
  memory after its replay) against its recorded bytes, and the largest of those ratios:
  a pool costs itself once plus its live ranges twice (goal: at most 1.1x the recorded
  bytes; a region handled whole needs 3x, which no GPU has for a pool of 75 %).

Make the recording first, e.g.:

    python benchmarks/record_framework.py --script jax_jit_mlp.py --repeat 1 --keep /tmp/jax.rdb -- 2
    python benchmarks/pool_replay.py --db /tmp/jax.rdb [--limit N]

Needs a GPU. Every failure of a replay is one row (its reason), never a traceback.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

PHASES = ("restore", "determinism", "run", "verify")
GOAL_MEMORY = 1.1


def replay_all(db: Path, limit: int | None) -> list[dict]:
    """One row per instance: id, verified, reason, wall s, the engine's phases, device bytes
    held, recorded bytes, bytes of regions split into live ranges."""
    from mneme.replay.db import Database
    from mneme.replay.engine import ReplayConfig, ReplaySession
    from mneme.replay.jit import CompileConfig
    from mneme.runtime import Device

    device = Device(0)
    instances = list(Database.open(db).instances())[:limit]
    rows = []
    for number, instance in enumerate(instances, 1):
        recorded = sum(int(r.size) for r in instance.regions)
        row = {"id": instance.id, "verified": False, "reason": "", "recorded": recorded, "held": 0,
               "split": 0, "timings": {}, "fidelity": None,
               # launched only while its snapshot was taken: no unperturbed in-app time
               "only_snapshotted": instance.app_time is not None and instance.app_time.median_ms is None}
        free_before = int(device.memory_info()[0])
        start = time.perf_counter()
        try:
            with ReplaySession(instance) as session:
                result = session.run(CompileConfig(), ReplayConfig(iterations=5))
                row["held"] = free_before - int(device.memory_info()[0])
                row["split"] = sum(int(r.size) for r in instance.regions if r.name in session.image().parts)
            row["verified"] = result.verified is True
            row["timings"] = dict(result.timings)
            row["fidelity"] = result.fidelity
            if not row["verified"]:
                row["reason"] = "; ".join(m.describe() for m in result.mismatches[:1]) or "not verified"
        except Exception as exc:  # noqa: BLE001 - one row per instance, the others go on
            row["reason"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        row["wall"] = time.perf_counter() - start
        rows.append(row)
        print(f"\r{number}/{len(instances)} replayed", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, required=True, help="the recording")
    parser.add_argument("--limit", type=int, help="replay only the first N instances")
    options = parser.parse_args()
    if not options.db.is_dir():
        raise SystemExit(f"--db {options.db}: no such recording")
    from mneme.runtime import driver_available

    if not driver_available():
        print("no usable CUDA driver: nothing to replay", file=sys.stderr)
        return 2
    rows = replay_all(options.db, options.limit)
    console = Console()
    gib = float(1 << 30)
    failed = [r for r in rows if not r["verified"]]
    table = Table(title=f"{options.db.name}: {len(rows) - len(failed)} of {len(rows)} instances verified, in one process")
    for column in ("", "wall s", *(f"{p} s" for p in PHASES)):
        table.add_column(column, justify="left" if not column else "right")
    for label, pick in (("median", statistics.median), ("slowest", max)):
        cells = [f"{pick(r['wall'] for r in rows):.3f}"]
        cells += [f"{pick(r['timings'].get(p, 0.0) for r in rows):.3f}" for p in PHASES]
        table.add_row(label, *cells)
    console.print(table)
    split = [r for r in rows if r["split"]]
    worst = max(rows, key=lambda r: r["held"] / max(r["recorded"], 1))
    console.print(f"{len(split)} of {len(rows)} instances replayed a region by its live ranges "
                  f"({sum(r['split'] for r in split) / gib:.1f} GiB of regions in all)")
    ratio = worst["held"] / max(worst["recorded"], 1)
    console.print(f"device memory held against recorded bytes, largest: {ratio:.2f}x "
                  f"({worst['held'] / gib:.2f} of {worst['recorded'] / gib:.2f} GiB, instance {worst['id']}); "
                  f"goal <= {GOAL_MEMORY:g}x: {'met' if ratio <= GOAL_MEMORY else 'NOT met'}")
    ratios = [r["fidelity"] for r in rows if r["verified"] and r["fidelity"]]
    if ratios:
        within = sum(0.9 <= f <= 1.1 for f in ratios)
        console.print(f"replayed / in-app time: median {statistics.median(ratios):.2f} over {len(ratios)} "
                      f"instances with an in-app time, {within} within 0.9-1.1 "
                      f"(range {min(ratios):.2f}-{max(ratios):.2f})")
    else:
        unperturbed = sum(r["only_snapshotted"] for r in rows)
        why = (f" ({unperturbed} of {len(rows)} were launched only while their snapshots were taken, "
               "whose times the recorder leaves out: a launch repeated unrecorded has one)"
               if unperturbed else "")
        console.print(f"replayed / in-app time: no verified instance has an in-app time{why}")
    for row in failed[:10]:
        console.print(f"not verified: {row['id']}: {row['reason']}", soft_wrap=True)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
