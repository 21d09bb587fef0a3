"""benchmarks/tune_start.py runs the whole `mneme tune` on a fresh study and reads its
phase line; without a GPU it runs compile-only and says that the goals (for a GPU run)
were skipped."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "tune_start.py"


def test_the_benchmark_prints_wall_search_and_the_goals(tmp_path):
    """Through a command server (--server; its own runtime folder, a short path for the
    socket), which it starts and stops."""
    runtime = tempfile.mkdtemp(prefix="ms-", dir="/tmp")
    env = {**{k: v for k, v in os.environ.items() if k != "MNEME_SERVER"}, "XDG_RUNTIME_DIR": runtime}
    try:
        run = subprocess.run([sys.executable, str(BENCHMARK), "--runs", "2", "--trials", "12",
                              "--server"], capture_output=True, text=True, timeout=600, env=env)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    runs = re.findall(r"^run \d: wall ([\d.]+) s, tuner ([\d.]+) s, search ([\d.]+) s \((\d+) "
                      r"trials\), wall/search ([\d.]+), outside the search ([\d.]+) s, start-up to "
                      r"the search ([\d.]+) s$", out, re.MULTILINE)
    assert len(runs) == 2, out
    for wall, tuner, search, trials, ratio, fixed, to_search in runs:
        assert float(wall) > float(tuner) >= float(search) > 0 and trials == "12"
        assert abs(float(ratio) - float(wall) / float(search)) < 0.2
        assert abs(float(fixed) - (float(wall) - float(search))) < 0.02
        # timed from outside, to the line that the search begins: before its end
        assert 0 < float(to_search) < float(wall) - float(search) + 0.02, out
    assert "mneme server: started" in out and "2 command(s) served" in out, out
    assert "mneme server: stopping" in out, out
    assert len(re.findall(r"^  time: start ", out, re.MULTILINE)) == 2  # each run's phases
    # the checkout's bytecode made first, as an installed package has it
    assert re.search(r"^bytecode: \d+ of this checkout's \d+ modules lacked current bytecode",
                     out, re.MULTILINE), out
    assert "median run: wall" in out and "outside the search: " in out
    goals = [line for line in out.splitlines()
             if "the whole command <=" in line or "fixed start-up (from the command's start to "
             "its search" in line]
    assert len(goals) == 3, out
    if "compile-only (no GPU here" in out:
        assert all(line.startswith("skipped ") and "for a GPU run" in line for line in goals)
    else:
        assert all(line.startswith(("met ", "MISSED ")) for line in goals)
