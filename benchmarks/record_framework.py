"""Recording a framework process: plain and recorded wall time of a Python script, in one run.

The script is tests/corpus/python/torch_large_activations.py by default: about twenty
launches (a cuBLAS GEMM, PyTorch's elementwise, reduction and softmax kernels) over a 2 GiB
working set in PyTorch's caching allocator, many instances of a few hundred MiB each.
``--script jax_transformer_block.py`` (or any corpus script, its arguments after ``--``)
measures another: the JAX scripts run with JAX's defaults, a pool of 75 % of the GPU (issue
35). It runs
plain and under ``mneme record --stats`` (each recording into an empty database), the
two alternating so that drift hits both, and the benchmark prints

- the median wall time of each and their ratio (goal, issue 22: recorded <= 3x plain);
- the script's own timing of its launches (its ``TIME forward`` line) plain and recorded;
- the recorder's statistics line (snapshot bytes, bytes stored, the application's time
  blocked in snapshots, the background writes' thread-seconds, the drain at exit);
- whether the recorded run printed the plain run's CHECKSUM lines: the same, or within
  ``--rel-tol`` (floats a framework computes in another order when its autotuner, timing
  under the recorder, picks another GEMM: XLA does), and each line that differs.

    python benchmarks/record_framework.py [--gib 2] [--repeat 3] [--keep DIR]
    python benchmarks/record_framework.py --script jax_transformer_block.py [--repeat 3] [-- ARGS]

Needs a GPU and PyTorch with CUDA.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "record"))
from app_recording import result_differences  # noqa: E402 (the framework GPU test's comparison)

SCRIPT = ROOT / "tests" / "corpus" / "python" / "torch_large_activations.py"
GOAL = 3.0
STATS = re.compile(r"^mneme record: stats (.*)$", re.M)
FORWARD = re.compile(r"^TIME forward ([0-9.]+) s$", re.M)


def run_once(command: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              filter(None, [str(SCRIPT.parent), os.environ.get("PYTHONPATH")]))})
    wall = time.perf_counter() - start
    if done.returncode == 77:
        raise SystemExit(f"skipped: {done.stdout.strip().splitlines()[-1]}")
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:6])} ... failed ({done.returncode}): {done.stderr.strip()[-600:]}")
    return wall, done


def forward_seconds(done: subprocess.CompletedProcess) -> float | None:
    found = FORWARD.search(done.stdout)
    return float(found.group(1)) if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, default=2.0, help="working set in GiB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="keep the last recording here")
    parser.add_argument("--rel-tol", type=float, default=1e-4,
                        help="CHECKSUM floats within this relative difference count as the same")
    parser.add_argument("--script", help="a script of tests/corpus/python instead (its arguments after --)")
    parser.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    options = parser.parse_args()
    console = Console()
    script = SCRIPT.parent / options.script if options.script else SCRIPT
    if not script.is_file():
        raise SystemExit(f"--script {options.script}: no such script in {SCRIPT.parent}")
    plain = [sys.executable, str(script), *(options.args if options.script else [str(options.gib)])]
    walls: dict[str, list[float]] = {"plain": [], "recorded": []}
    forwards: dict[str, list[float]] = {"plain": [], "recorded": []}
    stats_line, differences = "", []
    with tempfile.TemporaryDirectory(prefix="mneme-record-framework-") as tmp:
        db = Path(tmp) / "framework.rdb"
        recorded = [sys.executable, "-m", "mneme.cli", "record", "-rdb", str(db), "--stats", "--", *plain]
        for _ in range(options.repeat):
            wall, plain_run = run_once(plain)
            walls["plain"].append(wall)
            forwards["plain"].append(forward_seconds(plain_run) or 0.0)
            shutil.rmtree(db, ignore_errors=True)
            wall, recorded_run = run_once(recorded)
            walls["recorded"].append(wall)
            forwards["recorded"].append(forward_seconds(recorded_run) or 0.0)
            found = STATS.search(recorded_run.stderr)
            stats_line = found.group(1) if found else "(no stats line)"
            differences += result_differences(plain_run.stdout, recorded_run.stdout, options.rel_tol)
        if options.keep is not None:
            shutil.rmtree(options.keep, ignore_errors=True)
            shutil.copytree(db, options.keep)
    what = " ".join([script.name, *options.args]) if options.script else f"{script.name} {options.gib:g} GiB"
    table = Table(title=f"{what}: plain vs recorded (medians of {options.repeat})")
    for column in ("run", "wall s", "ratio", "its own forward s"):
        table.add_column(column, justify="left" if column == "run" else "right")
    base = statistics.median(walls["plain"])
    for run in ("plain", "recorded"):
        wall = statistics.median(walls[run])
        table.add_row(run, f"{wall:.2f}", f"{wall / base:.2f}x", f"{statistics.median(forwards[run]):.3f}")
    console.print(table)
    console.print(f"recorder: {stats_line}")
    if differences:
        console.print(f"CHECKSUM lines DIFFER plain and recorded (beyond a relative {options.rel_tol:g}):")
        for line in dict.fromkeys(differences):
            console.print(f"  {line}")
    else:
        console.print(f"CHECKSUM lines: the same plain and recorded (floats within {options.rel_tol:g})")
    ratio = statistics.median(walls["recorded"]) / base
    console.print(f"goal: recorded <= {GOAL:g}x plain wall time: {ratio:.2f}x, "
                  f"{'met' if ratio <= GOAL else 'NOT met'}")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
