"""Repeatability of tuning verdicts (issue 37): the same `mneme tune` twice, fresh processes.

    python benchmarks/repeatability.py [--apps app_particles app_blur_pipeline fidelity_jacobi]
                                       [--kernels 10] [--trials 60] [--modes base,none]
                                       [--prebuilt DIR] [--work DIR] [--json out.json]

Each application of the corpus is recorded once. Then, per clock mode (``--clock-control
base``: SM clocks locked; ``none``: as the driver sets them), ``mneme tune --app --kernels
N --budget N*TRIALS --seed 1`` runs twice, each a new process with a new study, on the same
GPU. For every kernel both runs tuned, the two verdicts **agree** when both found no
significant speedup, or both found one and their confirmed speedups differ by less than the
larger of the two runs' noise floors (and 2 %). Printed: a row per kernel (both speedups,
noise floors, agreement) and per mode the share of kernels that agree; the goal is
>= 90 % with locked clocks (the figure without them is printed beside it).

Needs a GPU; executables come from DIR/<program>/<program> (--prebuilt or
MNEME_RECORD_PREBUILT) or are built with mneme-clang++ (benchmarks/app_tuning.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from app_tuning import command_of, mneme  # noqa: E402

GOAL = 0.90
MIN_TOLERANCE = 0.02


def agree(a: dict, b: dict) -> bool:
    """Two runs' rows of one kernel reach the same verdict (see the module's text)."""
    if not a.get("significant") and not b.get("significant"):
        return True
    if bool(a.get("significant")) != bool(b.get("significant")):
        return False
    tolerance = max(a.get("noise") or 0.0, b.get("noise") or 0.0, MIN_TOLERANCE)
    return abs(a["speedup"] - b["speedup"]) / max(a["speedup"], b["speedup"]) <= tolerance


def tune_twice(db: Path, work: Path, tag: str, mode: str, kernels: int, trials: int) -> list[dict]:
    runs = []
    for n in (1, 2):
        report = work / f"{tag}.{mode}.{n}"
        started = time.monotonic()
        print(f"{tag}: tuning, clock-control {mode}, run {n} of 2 ...", flush=True)
        run = mneme("tune", "-rdb", db, "--app", "--kernels", kernels, "--budget", kernels * trials,
                    "--seed", "1", "--clock-control", mode, "--report", report, "--plots", "off",
                    "--storage", f"sqlite:///{work / f'{tag}.{mode}.{n}.sqlite3'}", timeout=1800)
        app = report / "app.json"
        if run.returncode != 0 or not app.is_file():
            raise RuntimeError(f"{tag} ({mode}, run {n}) failed: {(run.stderr or run.stdout).strip()[-300:]}")
        data = json.loads(app.read_text())
        data["wall_s"] = time.monotonic() - started
        print(f"{tag}: run {n} took {data['wall_s']:.1f} s", flush=True)
        runs.append(data)
    return runs


def compare(runs: list[dict]) -> list[dict]:
    first = {r["kernel"]: r for r in runs[0]["kernels"] if r.get("speedup") is not None or r.get("trials")}
    rows = []
    for row in runs[1]["kernels"]:
        other = first.get(row["kernel"])
        if other is None or not row.get("trials") or not other.get("trials"):
            continue
        rows.append({"kernel": row["kernel"], "speedups": [other.get("speedup"), row.get("speedup")],
                     "noise": [other.get("noise"), row.get("noise")],
                     "significant": [bool(other.get("significant")), bool(row.get("significant"))],
                     "agree": agree(other, row)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apps", nargs="*", default=["app_particles", "app_blur_pipeline", "fidelity_jacobi"])
    parser.add_argument("--kernels", type=int, default=10)
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--modes", default="base,none")
    parser.add_argument("--prebuilt", type=Path, default=os.environ.get("MNEME_RECORD_PREBUILT"))
    parser.add_argument("--work", type=Path)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    work = options.work or Path(tempfile.mkdtemp(prefix="mneme-repeat-"))
    work.mkdir(parents=True, exist_ok=True)
    modes = [m.strip() for m in options.modes.split(",") if m.strip()]
    results: dict[str, list[dict]] = {m: [] for m in modes}
    for name in options.apps:
        db = work / f"{name}.rdb"
        command, cwd = command_of(name, options.prebuilt, work)
        if not db.is_dir():
            print(f"{name}: recording ...", flush=True)
            started = time.monotonic()
            if mneme("record", "-rdb", db, "--", *command, cwd=cwd).returncode != 0:
                print(f"{name}: record failed, skipped")
                continue
            print(f"{name}: recorded in {time.monotonic() - started:.1f} s", flush=True)
        for mode in modes:
            try:
                runs = tune_twice(db, work, name, mode, options.kernels, options.trials)
            except RuntimeError as error:
                print(f"{name}: {error}")
                continue
            clocks = runs[0].get("clock_control") or {}
            for row in compare(runs):
                row["app"], row["clock"] = name, clocks.get("locked_sm_mhz") or clocks.get("unlocked") or mode
                results[mode].append(row)
                s, z = row["speedups"], row["noise"]
                print(f"{mode:5} {name[:18]:18} {row['kernel'][:34]:34} "
                      f"{s[0] or 0:6.3f}x / {s[1] or 0:6.3f}x  noise {z[0] or 0:5.3f} / {z[1] or 0:5.3f}  "
                      f"{'agree' if row['agree'] else 'DIFFER'}", flush=True)
    print()
    summary = {}
    for mode, rows in results.items():
        share = sum(r["agree"] for r in rows) / len(rows) if rows else 0.0
        summary[mode] = {"kernels": len(rows), "agree": share}
        print(f"clock-control {mode:5}: {sum(r['agree'] for r in rows)}/{len(rows)} kernels reach the same "
              f"verdict twice ({100 * share:.0f} %)")
    if "base" in summary:
        met = summary["base"]["agree"] >= GOAL and summary["base"]["kernels"] > 0
        print(f"goal: >= {100 * GOAL:.0f} % with locked clocks: {'met' if met else 'NOT met'}")
    if options.json:
        options.json.write_text(json.dumps({"summary": summary, "rows": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
