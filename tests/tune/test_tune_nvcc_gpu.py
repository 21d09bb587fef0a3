"""Tuning a kernel of an application built with nvcc, not rebuilt (GPU).

The corpus program atomic_relaxed (`__nv_atomic_*` builtins: nvcc only) is built with
nvcc, recorded, and its grid-stride histogram kernel, which has no LLVM IR (PTX and cubin
from the fatbinary), is tuned with `mneme tune --space launch,bounds`: block sizes and the
ptxas options launch bounds, minimum blocks per SM and register caps. The run finishes with
verified trials, register caps hold, and the best configuration replays verified through
`mneme replay --config`.
"""

import csv
import json

import pytest
from mneme.runtime import driver_available
from script_modules import load_script
from tune_support import instance_of, run_mneme

pytestmark = pytest.mark.gpu

corpus_build = load_script("tests/corpus/build.py")

TRIALS = 40


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    if not driver_available():
        pytest.skip("no usable CUDA driver")
    try:
        corpus_build.find_nvcc()
    except corpus_build.CorpusError as exc:
        pytest.skip(str(exc))
    out = tmp_path_factory.mktemp("nvcc-tune")
    # the shared CUDA runtime: a preloaded recorder sees registrations and launches
    exe = corpus_build.build_nvcc_program(corpus_build.NVCC_DIR / "atomic_relaxed", out / "build",
                                          cudart="shared").executable
    db = out / "atomic_relaxed.rdb"
    run = run_mneme("record", "-rdb", db, "--", exe)
    assert run.returncode == 0, run.stderr
    return db, exe


@pytest.fixture(scope="module")
def recording(recorded):
    return recorded[0]


def test_tuning_over_launch_and_ptxas_options_finishes_with_verified_trials(recording, tmp_path):
    instance = instance_of(recording, "histogram_relaxed")
    report = tmp_path / "report"
    run = run_mneme("tune", "-rdb", recording, "-rid", instance, "--space", "launch,bounds",
                    "--trials", TRIALS, "--sampler", "random", "--seed", "7", "--iterations", "3",
                    "--storage", f"sqlite:///{tmp_path / 'tune.sqlite3'}", "--report", report)
    assert run.returncode == 0, run.stderr
    summary = json.loads((report / "summary.json").read_text())
    assert summary["trials"] == TRIALS
    assert summary["baseline"]["verified"] is True
    assert summary["identity"]["code"]["kind"] == "cuda-fatbin", summary["identity"]
    with open(report / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    complete = [r for r in rows if r["state"] == "complete"]
    # a grid-stride kernel with integer atomics computes the same at every block size
    assert len(complete) >= TRIALS // 2, summary["failed"]
    assert all(r["verified"] == "True" for r in complete)
    capped = [r for r in complete if int(r["max_registers"]) > 0]
    bounded = [r for r in complete if r["launch_bounds"] == "True"]
    assert capped and bounded and {r["block_x"] for r in complete} - {"256"}
    # ptxas honoured the cap (the PTX assembled in process with -maxrregcount)
    assert all(int(r["registers"]) <= int(r["max_registers"]) for r in capped)
    # the best configuration, replayed on its own: best.json names the instance
    replay = run_mneme("replay", "--config", report / "best.json", "--json")
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["verified"] is True
    print(f"\n{instance}: {summary['verdict']}; {len(complete)} of {TRIALS} trials verified, "
          f"{summary['failed']} failed")


def test_spaces_that_need_ir_are_refused_in_one_line(recording, tmp_path):
    run = run_mneme("tune", "-rdb", recording, "-rid", instance_of(recording, "histogram_relaxed"),
                    "--space", "launch,pipeline", "--trials", "2",
                    "--storage", f"sqlite:///{tmp_path / 'refused.sqlite3'}")
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert lines[0].startswith("mneme: error: ") and "nvcc build" in lines[0] and "IR" in lines[0]


def test_the_tuned_nvcc_kernel_runs_in_the_unmodified_application(recorded, tmp_path):
    """mneme run --apply on the nvcc executable itself: the tuned cubin (from the recorded
    PTX) replaces the kernel at its nvcc 13 launch stub, and the output is unchanged."""
    db, exe = recorded
    report = tmp_path / "report"
    run = run_mneme("tune", "-rdb", db, "-rid", instance_of(db, "histogram_relaxed"), "--space", "launch",
                    "--trials", "8", "--seed", "3", "--storage", f"sqlite:///{tmp_path / 't.sqlite3'}",
                    "--report", report)
    assert run.returncode == 0, run.stderr
    out = tmp_path / "run.json"
    run = run_mneme("run", "--apply", report, "--repeat", "2", "--output-filter", "MNEME-CHECK|MNEME-RESULT",
                    "--json", out, "--", exe)
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(out.read_text())
    assert data["output_equal"], data["difference"]
    assert data["output_lines_compared"] > 2  # the launches' checksums and the program's checks
    [row] = data["kernels"]
    assert row["launches"] >= 1 and row["swapped"] == row["launches"]
