"""Where a tuning run's time goes (run_phases.py): the tuner's phases, the line `mneme tune`
prints, and summary.json's copy (CPU, compile-only)."""

import json
import re

import pytest
from mneme.tune import TuneOptions, Tuner
from mneme.tune.search import PhaseClock, phase_line, total_seconds
from tune_support import GOLDEN, SAXPY, run_mneme

#: the line's phases: "name 0.12 s" or "name 1.2 s (part 0.1 s, ...)"
PHASE = re.compile(r"([a-z][a-z -]*?) (\d+\.\d+) s(?: \(([^)]*)\))?(?:, |$)")


def parse_line(line: str) -> tuple[dict[str, float], float]:
    """The phases of a printed line and its total."""
    body, total = re.fullmatch(r"time: (.*) \((\d+\.\d+) s in all\)", line).groups()
    return {name: float(seconds) for name, seconds, _ in PHASE.findall(body)}, float(total)


def test_the_clock_adds_each_phase_once_and_parts_stay_out_of_the_total(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("mneme.tune.search._run_phases.time.monotonic", lambda: now[0])
    clock = PhaseClock()
    clock.begin()
    now[0] += 0.5
    assert clock.mark("study") == pytest.approx(0.5)
    now[0] += 2.0
    clock.mark("search")
    clock.add("search.compile", 0.3)
    now[0] += 0.001
    clock.mark("teardown")
    clock.begin(now[0] - 0.2)  # a second stretch of the same phase adds to it
    clock.mark("study")
    assert clock.phases == pytest.approx({"study": 0.7, "search": 2.0, "search.compile": 0.3,
                                          "teardown": 0.001})
    assert total_seconds(clock.phases) == pytest.approx(2.701)
    line = phase_line(clock.phases)
    # In the order they ran, parts in brackets, a phase too short to matter left out of the
    # line but not of the total.
    assert line == "time: study 0.7 s, search 2.0 s (compile 0.3 s) (2.7 s in all)"


def test_the_tuner_times_each_phase_of_its_run(tmp_path):
    options = TuneOptions(trials=6, devices=None, cpu_workers=1, sampler="random", seed=2,
                          storage=f"sqlite:///{tmp_path / 'p.sqlite3'}")
    outcome = Tuner(GOLDEN, [SAXPY], "pipeline", options).run()
    phases = outcome.phases
    assert list(phases)[:2] == ["setup", "study"]  # building the tuner comes first
    for name in ("workers", "prepare", "baseline", "search", "confirmation", "teardown", "results"):
        assert name in phases, phases
    assert phases["search"] == pytest.approx(outcome.search_seconds)
    # The run's phases cover run() whole: their sum is the tuner's own count.
    run_phases = total_seconds(phases) - phases["setup"] - phases["study"]
    assert run_phases == pytest.approx(outcome.elapsed, abs=0.05)
    assert phases["baseline.compile"] > 0  # the baseline replay's own parts, inside it
    assert phases["baseline.compile"] <= phases["baseline"]
    # the executor's start, by part (spent, waited for or not): its workers' hellos; no
    # compile pool for compile-only workers, which compile themselves
    assert phases["workers.hellos"] > 0 and "workers.compile pool" not in phases
    # which pool bounded the search (pool_use.py): compile-only workers compile themselves
    use = outcome.pool_use
    assert use["compile_pool"] is None and 0 < use["replay_workers"] <= 1.0
    assert use["limit"] in ("replay workers", "tuner loop")


def test_mneme_tune_prints_where_its_time_went(tmp_path):
    report = tmp_path / "report"
    run = run_mneme("tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", "8",
                    "--space", "launch,pipeline", "--storage", f"sqlite:///{tmp_path / 't.sqlite3'}",
                    "--report", report, "--plots", "off")
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stdout.splitlines() if line.startswith("time: ")]
    assert len(lines) == 1, run.stdout
    shown, total = parse_line(lines[0])
    # The time before the tuner (interpreter, imports) and the report's are in it too
    # (the workers' wait only when it was 5 ms or more: they start while the study opens).
    for name in ("start", "study", "search", "report"):
        assert name in shown, lines[0]
    assert shown["start"] > 0.1  # counted from the process's start: imports take longer
    search = float(re.search(r"over (\d+\.\d+) s of search", run.stdout).group(1))
    assert shown["search"] == pytest.approx(search, abs=0.051)
    assert total == pytest.approx(sum(shown.values()), abs=0.05 * len(shown) + 0.05)
    summary = json.loads((report / "summary.json").read_text())
    phases = summary["this_run"]["phases"]
    assert phases["start"] > 0 and "search" in phases and "workers" in phases
    assert phases["search"] == pytest.approx(summary["this_run"]["search_seconds"])
    assert "search: replay workers" in run.stdout and "is the limit" in run.stdout
    assert summary["this_run"]["pool_use"]["limit"]


def test_a_phase_under_the_threshold_is_shown_with_a_part_that_is_not():
    """A fresh study opens on its thread beside the workers and the baseline: the wait for it
    may be nothing, its time there is said in brackets (and not added to the total)."""
    line = phase_line({"study": 0.001, "study.in background": 0.45, "search": 1.0,
                       "teardown": 0.001})
    assert line == "time: study 0.00 s (in background 0.5 s), search 1.0 s (1.0 s in all)"
