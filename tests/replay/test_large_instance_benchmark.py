"""benchmarks/large_instance.py on the CPU: one line and exit 2 without a GPU, and its
report (phases, rates, one verdict per goal) from the numbers of a run, made up here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from mneme.runtime import driver_available

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "large_instance.py"
GB = 8 * 2**30


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("large_instance_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def replay(bench, wall, **phases):
    return bench.observation(wall, {"timings": phases, "verified": True, "device": "NVIDIA H100",
                                    "determinism": {"heap0": "nondeterministic-order"}})


def test_without_a_gpu_it_says_so_in_one_line(bench, capsys):
    if driver_available():
        pytest.skip("a GPU driver is present here")
    assert bench.main(["--mib", "64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["large_instance.py: needs an NVIDIA GPU and driver; none is usable on this machine"]


def test_bad_arguments_are_a_usage_error(bench):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--mib", "0"])
    assert exit_.value.code == 2


def test_report_splits_the_first_replay_and_judges_each_goal(bench, capsys):
    first = replay(bench, 12.0, restore=2.0, determinism=8.0, run=0.1, verify=0.05)
    later = [replay(bench, 1.5, restore=0.9, run=0.1, verify=0.05)]
    session = [replay(bench, 1.0, restore=1.0, run=0.1, verify=0.05),
               replay(bench, 0.2, run=0.1, verify=0.2)]  # 43 GB/s: the slowest
    copy = {"d2d_GBps": 1500.0, "reset_GBps": 1400.0, "ratio": 0.93, "d2h_GBps": 50.0}
    summary = bench.summarize(GB, first, later, session, copy)
    assert summary["goals"] == {
        "first replay <= 15 s": True,
        "each later replay (fresh process) <= 1 s": False,
        "each later replay (same session) <= 1 s": True,
        "verification >= 100 GB/s": False,
    }
    assert summary["verify_GBps_slowest"] == pytest.approx(GB / 0.2 / 1e9)
    assert summary["restore_GBps"] == pytest.approx(GB / 1.0 / 1e9)  # median of 2, 0.9, 1
    assert summary["verify_vs_d2d"] == pytest.approx(GB / 0.2 / 1e9 / 1500.0)
    doc = {"mib": 8192, "device": "NVIDIA H100", "instance": "abc/def", "kernel": "insert_keys(...)",
           "record_s": 30.0, "first": first, "later_process": later, "session": session, "copy": copy,
           "summary": summary}
    bench.print_report(doc)
    out = capsys.readouterr().out
    assert "goal first replay <= 15 s: met" in out
    assert "goal verification >= 100 GB/s: NOT met" in out
    assert "determinism profile: heap0 nondeterministic-order" in out


def test_an_engine_without_the_split_leaves_the_phases_empty(bench):
    o = bench.observation(3.0, {"timings": {"run": 0.1}, "verified": True})
    assert o["phases"] == {"restore": None, "determinism": None, "run": 0.1, "verify": None}
    summary = bench.summarize(GB, o, [], [o], {})
    assert summary["goals"]["verification >= 100 GB/s"] is None
    assert summary["goals"]["each later replay (fresh process) <= 1 s"] is None


def test_a_failing_step_is_one_line_with_the_end_of_its_stderr(bench):
    text = "Traceback (most recent call last):\n  File x\n\nRuntimeError: out of memory\n"
    assert bench.tail(text, 2) == "File x | RuntimeError: out of memory"
    assert bench.tail("") == "(no output)"


def test_report_says_which_restore_path_ran_and_its_rate(bench, capsys):
    def one(wall, path, restore):
        return bench.observation(wall, {"timings": {"restore": restore, "run": 0.1, "verify": 0.05},
                                        "verified": True, "restore_path": path, "notes": []})

    first, later = one(3.0, "nvcomp", 0.5), [one(0.9, "nvcomp", 0.4)]
    session = [one(0.8, "nvcomp", 0.6)]
    host_later = [one(6.0, "host", 4.0)]
    summary = bench.summarize(GB, first, later, session, {"d2h_GBps": 50.0}, host_later)
    assert summary["restore_GBps_by_path"]["nvcomp"] == pytest.approx(GB / 0.5 / 1e9)
    assert summary["restore_GBps_by_path"]["host"] == pytest.approx(GB / 4.0 / 1e9)
    doc = {"mib": 8192, "device": "NVIDIA H100", "instance": "abc/def", "kernel": "insert_keys(...)",
           "record_s": None, "first": first, "later_process": later, "session": session,
           "copy": {"d2h_GBps": 50.0}, "host_later": host_later, "summary": summary}
    bench.print_report(doc)
    out = capsys.readouterr().out
    assert "restore path: nvCOMP device" in out
    assert f"restore host: {GB / 4.0 / 1e9:.1f} GB/s" in out
    assert "later replays with MNEME_RESTORE=host: 6.00 s" in out
