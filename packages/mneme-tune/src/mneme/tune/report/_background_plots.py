"""A tuning report's plots, drawn by a process of their own after ``mneme tune`` returns.

Drawing the four plots (matplotlib and plotly, their imports included) takes seconds:
about a third of a short tuning command's wall time, after a search that is over. The
command writes the report's data (best.json, trials.csv, summary.json) itself, hands what
the plots need to a detached process, and returns. That process rebuilds the study in
memory from the trials it was given (no access to the study's storage, which may be a
server), draws each plot to a temporary file and renames it into place (a plot is there
whole or not at all), adds what it drew to summary.json, and writes what went wrong, if
anything, to ``plots.log`` in the report folder.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import optuna
from mneme.replay.files import write_atomic

#: the hand-over file in the report folder (deleted by the drawing process)
HANDOVER = ".plots.pickle"
LOG = "plots.log"


def draw_in_background(outcome, directory: Path) -> int:
    """Start the process that draws a run's plots, after the command has returned.

    Parameters:
        outcome: the run's outcome.
        directory: the report folder.

    Returns:
        The drawing process's pid.
    """
    study = outcome.study
    handover = {
        "outcome": replace(outcome, study=None),
        "study_name": study.study_name,
        "directions": [d.name.lower() for d in study.directions],
        "trials": study.get_trials(deepcopy=False),
    }
    fd, path = tempfile.mkstemp(prefix=HANDOVER, dir=directory)
    with os.fdopen(fd, "wb") as f:
        pickle.dump(handover, f)
    os.replace(path, directory / HANDOVER)
    with open(directory / LOG, "wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "mneme.tune.report._background_plots", str(directory)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    return child.pid


def _draw(directory: Path) -> None:
    from ._plots import write_plots

    with open(directory / HANDOVER, "rb") as f:
        handover = pickle.load(f)
    study = optuna.create_study(study_name=handover["study_name"],
                                directions=handover["directions"])
    study.add_trials(handover["trials"])
    outcome = replace(handover["outcome"], study=study)
    plots, skipped = write_plots(outcome, directory)
    summary_path = directory / "summary.json"
    summary = json.loads(summary_path.read_text())
    summary["plots"], summary["plots_skipped"] = plots, skipped
    summary.pop("plots_pending", None)
    write_atomic(summary_path, json.dumps(summary, indent=2, sort_keys=True, default=str).encode())
    for kind, why in skipped.items():
        print(f"plot {kind} skipped: {why}")
    (directory / HANDOVER).unlink()


if __name__ == "__main__":
    _draw(Path(sys.argv[1]))
