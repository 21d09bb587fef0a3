"""`mneme tune --app` across machines with Slurm as the engine, for real: a one-node Slurm
cluster (slurm_cluster.py: munged, slurmctld and slurmd started here) and a PostgreSQL
server (postgres_server.py). `--emit-slurm` writes the job array and the merge job,
submit.sh submits them, the tasks tune compile-only on the shared studies, the merge job
writes the one report; every kernel tuned, the budget exact, the report complete. Bad
input in one line each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import postgres_server
import pytest
import slurm_cluster
from app_profiles import profiled_copy
from mneme.tune.app.budget import Budget, one_round
from mneme.tune.tune_types import TRIAL_ATTR
from optuna.trial import TrialState
from tune_support import one_line_error, run_mneme

native = pytest.importorskip("mneme.runtime._native")

BUDGET = 45  # three tunable kernels: 18 + 14 + 13, each above its minimum of 12
#: seconds for the array and the merge job together (measured: ~30 s on 2 cores)
JOBS_TIMEOUT = 150


@pytest.fixture
def profiled(tmp_path) -> Path:
    return profiled_copy(tmp_path)


def counted(trials) -> int:
    """Finished trials that count against a budget (as the tuner counts them)."""
    return sum(1 for t in trials if t.state == TrialState.COMPLETE or (
        t.state == TrialState.FAIL
        and t.user_attrs.get(TRIAL_ATTR, {}).get("failure") != "interrupted"))


def logs_of(folder: Path) -> str:
    return "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                   for p in sorted((folder / "logs").glob("*.out")))


@pytest.mark.skipif(slurm_cluster.why_not() is not None, reason=str(slurm_cluster.why_not()))
@pytest.mark.skipif(postgres_server.why_not() is not None, reason=str(postgres_server.why_not()))
def test_app_tuning_on_a_one_node_slurm_cluster(profiled, tmp_path):
    scripts, report = tmp_path / "slurm", tmp_path / "report"
    with postgres_server.server() as url, slurm_cluster.cluster() as env:
        emitted = run_mneme("tune", "-rdb", profiled, "--app", "--compile-only", "--budget", BUDGET,
                            "--storage", url, "--seed", "1", "--cpu-workers", "1",
                            "--emit-slurm", scripts, "--report", report)
        assert emitted.returncode == 0, emitted.stdout + emitted.stderr
        tune_script = (scripts / "tune.sbatch").read_text()
        assert "#SBATCH --array=0-2" in tune_script and "--array-task" in tune_script
        assert "--merge-report" in (scripts / "merge.sbatch").read_text()
        assert not report.exists()  # written, not run
        submitted = subprocess.run(["bash", str(scripts / "submit.sh")], env=env, capture_output=True,
                                   text=True, timeout=60)
        assert submitted.returncode == 0, submitted.stderr
        array, merge = (scripts / "jobs").read_text().split()
        slurm_cluster.wait_for(env, [array, merge], JOBS_TIMEOUT)
        states = slurm_cluster.job_states(env, array) | slurm_cluster.job_states(env, merge)
        assert sorted(states) == sorted([f"{array}_0", f"{array}_1", f"{array}_2", merge]), states
        assert set(states.values()) == {"COMPLETED"}, (states, logs_of(scripts))
        summaries = optuna.get_all_study_summaries(url)
        studies = {s.study_name: optuna.load_study(study_name=s.study_name, storage=url).get_trials(
            deepcopy=False) for s in summaries}

    data = json.loads((report / "app.json").read_text())
    assert data["database"] == str(profiled.resolve())
    tuned = [r for r in data["kernels"] if not r["skipped"]]
    assert [r["kernel"].partition("(")[0] for r in tuned] == ["spmv_csr", "dot_partial", "cg_update_xr"]
    # every kernel tuned, a study each; the budget exact: each study at its part, none over
    assert len(studies) == len(tuned), sorted(studies)
    per_study = {name: counted(trials) for name, trials in studies.items()}
    assert sum(per_study.values()) == BUDGET, per_study
    parts = one_round(Budget(trials=BUDGET), [r["share"] for r in tuned])
    assert sorted(per_study.values()) == sorted(int(p) for p in parts), (per_study, parts)
    # the tasks spread over the kernels: more than one task ran trials
    owners = {t.user_attrs.get(TRIAL_ATTR, {}).get("owner") for trials in studies.values() for t in trials}
    assert len(owners - {None}) >= 2, owners
    # the merged report: every kernel with its trials and its own report folder
    assert sorted(r["trials"] for r in tuned) == sorted(per_study.values())
    for row in tuned:
        assert row["report"] and (report / row["report"] / "summary.json").is_file(), row
    assert any("not recorded" in r["skipped"] for r in data["kernels"])
    # each task started at its own kernel (the order rotated by its index)
    names = [r["kernel"] for r in tuned]
    for task in range(3):
        log = (scripts / "logs" / f"tune-{array}_{task}.out").read_text(errors="replace")
        assert f"task {task}: done with the shared studies" in log, log[-2000:]
        assert log.split("round 1: ", 1)[1].startswith(names[task][:30]), log[-2000:]


def test_one_round_spends_the_budget_exactly():
    for total in (5, 12, 36, 45, 100, 601):
        parts = one_round(Budget(trials=total), [0.5, 0.2, 0.12])
        assert sum(parts) == total and all(p == int(p) for p in parts), (total, parts)
    assert one_round(Budget(trials=5), [0.5, 0.2, 0.12]) == [5.0, 0.0, 0.0]


def test_bad_input_is_one_line(profiled, tmp_path):
    base = ("tune", "-rdb", profiled, "--app", "--compile-only")
    one_line_error(run_mneme(*base, "--storage", f"sqlite:///{tmp_path / 's.sqlite3'}",
                             "--emit-slurm", tmp_path / "d"), "a SQLite file", "postgresql://")
    one_line_error(run_mneme(*base, "--emit-slurm", tmp_path / "d"), "no --storage", "postgresql://")
    assert not (tmp_path / "d").exists()
    one_line_error(run_mneme("tune", "-rdb", profiled, "--compile-only", "--array-task", "1"), "add --app")
    one_line_error(run_mneme(*base, "--slurm-tasks", "4"), "--emit-slurm")
    one_line_error(run_mneme(*base, "--merge-report", "--array-task", "0"), "give one")
    # Slurm's commands missing: --slurm says so before anything is written
    run = subprocess.run([sys.executable, "-m", "mneme.cli", *map(str, base), "--storage",
                          "postgresql://u@h/db", "--slurm"], capture_output=True, text=True,
                         env={**os.environ, "PATH": str(tmp_path / "nothing")}, timeout=120)
    one_line_error(run, "sbatch is not on PATH")
    # a report folder of another database is not merged into
    other = tmp_path / "other-report"
    other.mkdir()
    (other / "app.json").write_text(json.dumps({"database": "/elsewhere/other.rdb", "kernels": [],
                                                "kernel_ms": 1.0}))
    one_line_error(run_mneme(*base, "--merge-report", "--report", other, "--storage",
                             f"sqlite:///{tmp_path / 's.sqlite3'}"), "/elsewhere/other.rdb",
                   "another --report")
