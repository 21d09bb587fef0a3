"""A report's plots are drawn by a process of their own after `mneme tune` returns
(background_plots.py): the command does not wait for them, and they arrive whole."""

import json
import time

from tune_support import GOLDEN, SAXPY, run_mneme

KINDS = ("history", "importance", "parallel", "times")


def test_the_command_returns_before_its_plots_are_drawn(tmp_path):
    report = tmp_path / "report"
    args = ["tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", "8",
            "--space", "pipeline", "--seed", "2", "--storage", f"sqlite:///{tmp_path / 't.db'}",
            "--report", report]
    run = run_mneme(*args)
    assert run.returncode == 0, run.stderr
    assert "drawn in the background" in run.stdout
    summary = json.loads((report / "summary.json").read_text())
    # The data is there at once; the plots are still to come.
    assert summary["plots_pending"] is True and "plots" not in summary
    assert (report / "best.json").is_file() and (report / "trials.csv").is_file()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and json.loads((report / "summary.json").read_text()).get(
            "plots_pending"):
        time.sleep(0.2)
    summary = json.loads((report / "summary.json").read_text())
    assert "plots_pending" not in summary, (report / "plots.log").read_text()
    assert sorted(summary["plots"]) == sorted(f"{k}.{e}" for k in KINDS for e in ("png", "html"))
    for kind in KINDS:
        assert (report / f"{kind}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Nothing left behind: no hand-over file, no half-drawn temporary.
    assert not [p.name for p in report.iterdir() if p.name.startswith(".")]
    # The same run, waiting for its plots, lists them in its report line.
    waited = run_mneme(*args[:-1], tmp_path / "waited", "--plots", "wait")
    assert waited.returncode == 0 and "history.png" in waited.stdout
    assert not (tmp_path / "waited" / "plots.log").exists()
    off = run_mneme(*args[:-1], tmp_path / "off", "--plots", "off")
    assert off.returncode == 0 and not list((tmp_path / "off").glob("*.png"))
