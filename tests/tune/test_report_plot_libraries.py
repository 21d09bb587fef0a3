"""A plotting library missing at report time costs its plots, said in one line, never the
report of a finished search (nor a traceback)."""

import json
import subprocess
import sys

import pytest
from tune_support import GOLDEN, SAXPY

# `mneme tune` in a Python where the named modules cannot be imported (None in
# sys.modules makes `import` raise ImportError, as for a module that is not installed)
RUNNER = (
    "import sys; blocked = sys.argv[1].split(','); sys.modules.update(dict.fromkeys(blocked)); "
    "from mneme.cli.main import main; main(sys.argv[2:])"
)


def tune_without(blocked: list[str], tmp_path):
    report = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, ",".join(blocked), "tune", "-rdb", str(GOLDEN),
         "-rid", SAXPY, "--compile-only", "--trials", "4", "--space", "pipeline",
         "--seed", "1",
         "--storage", f"sqlite:///{tmp_path / 'tune.sqlite3'}", "--report", str(report), "--plots", "wait"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    summary = json.loads((report / "summary.json").read_text())
    assert (report / "best.json").is_file() and (report / "trials.csv").is_file()
    return proc, report, summary


@pytest.mark.parametrize(
    "blocked, key, present, absent",
    [
        (["matplotlib"], "png", ".html", ".png"),
        (["plotly"], "html", ".png", ".html"),
        (["matplotlib", "plotly"], "all", None, None),
    ],
    ids=["no-matplotlib", "no-plotly", "neither"],
)
def test_missing_plot_library_skips_its_plots_in_one_line(tmp_path, blocked, key, present, absent):
    proc, report, summary = tune_without(blocked, tmp_path)
    said = [line for line in proc.stdout.splitlines() if "not installed" in line]
    assert len(said) == 1 and all(name in said[0] for name in blocked), proc.stdout
    assert all(name in summary["plots_skipped"][key] for name in blocked)
    files = {p.suffix for p in report.iterdir()}
    if present:
        assert present in files and f"history{present}" in summary["plots"]
        assert absent not in files and not any(p.endswith(absent) for p in summary["plots"])
    else:
        assert summary["plots"] == [] and not files & {".png", ".html"}
