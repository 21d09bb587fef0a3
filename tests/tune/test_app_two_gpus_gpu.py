"""Whole-application tuning on two GPUs of one host (issue 38): app_halo_two_gpus (a plate
split across GPUs 0 and 1, each stencil step reading the neighbour's boundary row through
a peer pointer) recorded, `mneme tune --app --devices 0,1` (kernels side by side, one GPU
each; the stencil's instances read the other GPU's memory, so every worker sees both
GPUs), and `mneme run --apply` swapping the winner into the launches of both GPUs and
measuring each GPU's kernel time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mneme.replay.db import Database
from tune_support import run_mneme

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "record"))
from record_support import executable, mneme_record, require_two_gpus  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    require_two_gpus()
    work = tmp_path_factory.mktemp("halo")
    exe = executable("app_halo_two_gpus", work)
    db = work / "halo.rdb"
    done = mneme_record(db, exe, args=["60"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert "on GPUs 0 and 1" in done.stdout
    return exe, db, work


def test_the_profile_has_each_gpus_launches(recorded):
    _, db, _ = recorded
    profile = Database.open(db).app_profile
    stencil = [e for e in profile.entries if e.name.startswith("_Z11jacobi_halo")]
    assert {e.device for e in stencil} == {0, 1}
    assert all(e.launches == 60 for e in stencil) and all(e.instances for e in stencil)


def test_tune_app_on_two_gpus_then_apply_on_both(recorded):
    exe, db, work = recorded
    report = work / "report"
    run = run_mneme("tune", "-rdb", db, "--app", "--share", "0.9", "--budget", "80", "--devices", "0,1",
                    "--report", report, "--storage", f"sqlite:///{work / 's.sqlite3'}", "--plots", "off",
                    timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    app = json.loads((report / "app.json").read_text())
    assert {d["device"] for d in app["devices"]} == {0, 1}  # a worker pool on each GPU
    stencil = next(r for r in app["kernels"] if r["kernel"].startswith("jacobi_halo"))
    assert len(stencil["devices"]) >= 1  # its rounds ran on one GPU at a time
    # blocks of 8x8 hard-coded: a wider block coalesces the rows, verified
    assert stencil["significant"] and stencil["speedup"] > 1.1, stencil
    applied = work / "apply.json"
    run = run_mneme("run", "--apply", report, "--json", applied, "--", exe, "60", timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads(applied.read_text())
    assert data["output_equal"]
    row = next(r for r in data["kernels"] if r["kernel"].startswith("jacobi_halo"))
    assert set(row["swapped_on"]) == {"0", "1"} and min(row["swapped_on"].values()) >= 50, row
    per_gpu = data["kernel_time"]["devices"]
    assert set(per_gpu) == {"0", "1"}
    for gpu in per_gpu.values():  # each GPU's kernel time went down, beyond its noise
        assert gpu["significant"] and gpu["measured_saving_share"] > 0.05, per_gpu
