"""Managed memory under the recorder: the application's own kernel times, plain and recorded.

The corpus's managed-memory programs (tests/corpus/cuda: managed_mlp, managed_solver,
managed_memory) run plain and under ``mneme record`` with each way of serving managed
memory (``--managed placed|host|driver``, docs/record.md "Managed memory"). managed_mlp
times its own GEMMs with CUDA events and prints the median ("GEMM time: median X ms");
for every program the wall time is measured too. Runs alternate (plain, placed, host,
driver, plain, ...) so that drift hits all alike; each cell is the median over repeats.

Goal (issue 22, on the H100): managed-memory kernels under record within 1.5x of their
plain speed (the default, ``placed``).

    python benchmarks/managed_record.py [--prebuilt DIR] [--repeat 3] [--modes placed,host,driver]

Needs a GPU; executables come from DIR/<program>/<program> (MNEME_RECORD_PREBUILT) or are
built with mneme-clang++.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
PROGRAMS = {"managed_mlp": ["12"], "managed_solver": [], "managed_memory": []}
KERNEL_TIME = re.compile(r"GEMM time: median ([0-9.]+) ms")
GOAL = 1.5


def executable(name: str, prebuilt: Path | None, out: Path) -> Path:
    if prebuilt is not None:
        return prebuilt / name / name
    spec = importlib.util.spec_from_file_location("corpus_build", CORPUS / "build.py")
    build = importlib.util.module_from_spec(spec)
    sys.modules["corpus_build"] = build
    spec.loader.exec_module(build)
    return build.build_program(CORPUS / "cuda" / name, out / name, compiler="mneme-clang++").executable


def run_once(command: list[str]) -> tuple[float, float | None]:
    """Wall seconds and the kernel time the program printed (None where it prints none)."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])} ... failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    found = KERNEL_TIME.search(done.stdout)
    return wall, float(found.group(1)) if found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prebuilt", type=Path, default=os.environ.get("MNEME_RECORD_PREBUILT"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", default="placed,host,driver")
    parser.add_argument("--programs", nargs="*", default=list(PROGRAMS))
    options = parser.parse_args()
    modes = [m for m in options.modes.split(",") if m]
    console = Console()
    table = Table(title="managed memory: plain vs recorded (medians over repeats)")
    for column in ("program", "run", "kernel ms", "kernel ratio", "wall s", "wall ratio"):
        table.add_column(column, justify="left" if column in ("program", "run") else "right")
    worst = 0.0
    with tempfile.TemporaryDirectory(prefix="mneme-managed-") as tmp:
        work = Path(tmp)
        for name in options.programs:
            exe = executable(name, options.prebuilt, work / "build")
            args = PROGRAMS.get(name, [])
            runs = {"plain": [str(exe), *args]}
            for mode in modes:
                db = work / f"{name}-{mode}.rdb"
                runs[mode] = [sys.executable, "-m", "mneme.cli", "record", "-rdb", str(db), "--managed", mode,
                              "--", str(exe), *args]
            samples: dict[str, list[tuple[float, float | None]]] = {run: [] for run in runs}
            for _ in range(options.repeat):
                for run, command in runs.items():
                    for leftover in work.glob(f"{name}-*.rdb"):  # every recording starts empty
                        subprocess.run(["rm", "-rf", str(leftover)], check=True)
                    samples[run].append(run_once(command))
            walls = {run: statistics.median(s[0] for s in got) for run, got in samples.items()}
            kernels = {run: statistics.median(s[1] for s in got) if got[0][1] is not None else None
                       for run, got in samples.items()}
            for run in runs:
                kernel_ratio = kernels[run] / kernels["plain"] if kernels[run] is not None else None
                if run == "placed" and kernel_ratio is not None:
                    worst = max(worst, kernel_ratio)
                table.add_row(name, run if run == "plain" else f"record --managed {run}",
                              f"{kernels[run]:.4f}" if kernels[run] is not None else "-",
                              f"{kernel_ratio:.2f}x" if kernel_ratio is not None else "-",
                              f"{walls[run]:.2f}", f"{walls[run] / walls['plain']:.2f}x")
    console.print(table)
    if "placed" in modes and worst:
        verdict = "met" if worst <= GOAL else "NOT met"
        console.print(f"goal: kernels under record (--managed placed) within {GOAL}x of plain: "
                      f"worst {worst:.2f}x, {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
