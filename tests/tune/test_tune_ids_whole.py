"""`mneme tune` prints the study name, which holds the instance id, whole when piped into
a narrow width (issue 21: ids that cannot be pasted), in its start line, above the best
configurations and in its closing line."""

import os
import subprocess
import sys

from tune_support import GOLDEN, SAXPY


def test_tune_prints_the_study_name_whole_piped_at_40_columns(tmp_path):
    env = {**os.environ, "COLUMNS": "40"}
    run = subprocess.run(
        [sys.executable, "-m", "mneme.cli", "tune", "-rdb", str(GOLDEN), "-rid", SAXPY, "--compile-only",
         "--trials", "3", "--space", "pipeline", "--seed", "1",
         "--storage", f"sqlite:///{tmp_path / 't.sqlite3'}"],
        capture_output=True, text=True, env=env, timeout=600, check=False)
    assert run.returncode == 0, run.stderr
    study = f"_Z5saxpyfPKfPfi@{SAXPY}:"
    assert f"best configurations: {study}" in run.stdout
    assert f"study '{study}" in run.stdout
    assert f"study {study}" in run.stderr
