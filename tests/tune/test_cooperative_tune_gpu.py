"""Cooperative launches tuned and applied on the GPU (issue 35).

cooperative_solver's two kernels synchronise their whole grid (cooperative_groups'
this_grid().sync()) and spread their work over gridDim, so another block size (with the
covering grid) computes the same, provided every block is resident at once. A short tune
over launch shapes: the recorded configuration and every completed candidate verify, and a
candidate beyond co-residency fails alone as launch-refused with its one line (never a
fault or a worker restart). `mneme run --apply` with blocks of 512 (grid covering the
recorded threads) runs the tuned code in the application's cooperative launches, both
cudaLaunchCooperativeKernel and cudaLaunchKernelEx's cooperative attribute, and every
buffer checksum the program prints is unchanged.

On the GPU host (corpus prebuilt with mneme-clang++ under MNEME_RECORD_PREBUILT):

    python3 -m pytest tests/tune/test_cooperative_tune_gpu.py -m gpu -q -s
"""

from __future__ import annotations

import json
import math

import pytest
from mneme.replay.db import Database
from mneme.tune import TuneOptions, Tuner
from record.record_support import executable, mneme_record
from tune_support import run_mneme

pytestmark = pytest.mark.gpu

NAME = "cooperative_solver"
KERNELS = ("jacobi_solve", "power_iteration")


@pytest.fixture(scope="module")
def solver(tmp_path_factory):
    """The program recorded: (executable, database, {kernel: instance}, folder)."""
    from mneme.runtime import driver_available

    if not driver_available():
        pytest.skip("no usable CUDA driver")
    folder = tmp_path_factory.mktemp("cooperative-tune")
    exe = executable(NAME, folder)
    db = folder / "rec.rdb"
    run = mneme_record(db, exe)
    assert run.returncode == 0, run.stderr
    instances = {i.kernel.demangled_name.split("(")[0]: i for i in Database.open(db).instances()}
    assert set(instances) == set(KERNELS) and all(i.cooperative for i in instances.values())
    return exe, db, instances, folder


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_short_tune_keeps_candidates_co_resident_and_verified(solver, kernel, tmp_path):
    _, db, instances, _ = solver
    options = TuneOptions(trials=10, devices=[0], storage=f"sqlite:///{tmp_path / 'tune.sqlite3'}", seed=3,
                          iterations=3)
    outcome = Tuner(db, [instances[kernel].id], "launch", options).run()
    assert outcome.baseline["verified"] is True
    complete = [t for t in outcome.trials if t.state == "complete"]
    assert complete and all(t.verified is True for t in complete), [t.reason for t in outcome.trials]
    failed = [t for t in outcome.trials if t.state == "failed"]
    assert all(t.failure == "launch-refused" and "not co-resident" in (t.reason or "") for t in failed), \
        [(t.params, t.failure, t.reason) for t in failed]
    assert outcome.best[0].verified is True
    print(f"\n{kernel}: {len(complete)} verified, {len(failed)} not co-resident, best "
          f"{outcome.best[0].params} ({outcome.best[0].speedup:.2f}x)")


def test_run_apply_launches_the_tuned_code_cooperatively(solver, tmp_path):
    exe, db, instances, _ = solver
    reports = tmp_path / "reports"
    for kernel, instance in instances.items():
        report = reports / kernel
        run = run_mneme("tune", "-rdb", db, "-rid", instance.id, "--space", "launch", "--trials", "4",
                        "--seed", "3", "--storage", f"sqlite:///{tmp_path / 'studies.sqlite3'}",
                        "--report", report)
        assert run.returncode == 0, run.stderr
        # blocks of 512 with the grid covering the recorded threads: co-resident (half the
        # blocks of twice the threads), and a launch the tuned code changes
        best = report / "best.json"
        config = json.loads(best.read_text())
        config["replay"]["block"] = [512, 1, 1]
        config["replay"]["grid"] = [math.ceil(instance.grid[0] * instance.block[0] / 512), 1, 1]
        best.write_text(json.dumps(config))
    out = tmp_path / "run.json"
    run = run_mneme("run", "--apply", reports, "--repeat", "2", "--output-filter",
                    "MNEME-CHECK|MNEME-RESULT|corpus-output", "--json", out, "--", exe)
    print(run.stderr)
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(out.read_text())
    assert data["output_checked"] and data["output_equal"], data["difference"]
    assert data["output_lines_compared"] > 2
    rows = {row["kernel"].split("(")[0]: row for row in data["kernels"]}
    assert set(rows) == set(KERNELS)
    for kernel, row in rows.items():
        assert row["launches"] == 1 and row["swapped"] == 1 and not row["refused"], (kernel, row)
