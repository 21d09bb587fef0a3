"""benchmarks/tune_start.py runs the whole `mneme tune` on a fresh study and reads its
phase line; without a GPU it runs compile-only and says that the goals (for a GPU run)
were skipped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "tune_start.py"


def test_the_benchmark_prints_wall_search_and_the_goals():
    run = subprocess.run([sys.executable, str(BENCHMARK), "--runs", "2", "--trials", "12"],
                         capture_output=True, text=True, timeout=600, env=os.environ.copy())
    assert run.returncode == 0, run.stderr
    out = run.stdout
    runs = re.findall(r"^run \d: wall ([\d.]+) s, tuner ([\d.]+) s, search ([\d.]+) s \((\d+) "
                      r"trials\), wall/search ([\d.]+)$", out, re.MULTILINE)
    assert len(runs) == 2, out
    for wall, tuner, search, trials, ratio in runs:
        assert float(wall) > float(tuner) >= float(search) > 0 and trials == "12"
        assert abs(float(ratio) - float(wall) / float(search)) < 0.2
    assert len(re.findall(r"^  time: start ", out, re.MULTILINE)) == 2  # each run's phases
    # the checkout's bytecode made first, as an installed package has it
    assert re.search(r"^bytecode: \d+ of this checkout's \d+ modules lacked current bytecode",
                     out, re.MULTILINE), out
    assert "median run: wall" in out and "outside the search: " in out
    goals = [line for line in out.splitlines() if "the whole command <=" in line]
    assert len(goals) == 2, out
    if "compile-only (no GPU here" in out:
        assert all(line.startswith("skipped ") and "for a GPU run" in line for line in goals)
    else:
        assert all(line.startswith(("met ", "MISSED ")) for line in goals)
