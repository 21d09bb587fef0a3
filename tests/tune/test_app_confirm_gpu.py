"""`mneme tune --confirm-in-app` on the GPU: after the search, the recorded configuration
and the best configurations run in the application (fidelity_jacobi), each tuned one
swapped into its launches, and summary.json and the console set the in-app speedups beside
the replayed ones; an application that fails plain is refused before any trial."""

import json

import pytest
from mneme.replay.db import Database
from record.record_support import PROGRAMS
from tune_support import one_line_error, recorded_on_gpu, run_mneme

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def jacobi(tmp_path_factory):
    """fidelity_jacobi recorded, and the command that runs it as it was recorded."""
    db, exe, folder = recorded_on_gpu(tmp_path_factory, "fidelity_jacobi", "app-confirm")
    instance = Database.open(db).kernels()[0].instances()[0]
    return db, instance, [str(exe), *PROGRAMS["fidelity_jacobi"].args], folder


def test_the_best_configurations_run_in_the_application_beside_their_replayed_times(jacobi):
    db, instance, command, folder = jacobi
    report = folder / "report"
    run = run_mneme("tune", "-rdb", db, "-rid", instance.id, "--space", "launch", "--trials", "20",
                    "--seed", "1", "--confirm-runs", "1", "--storage", f"sqlite:///{folder / 't.sqlite3'}",
                    "--report", report, "--plots", "off", "--confirm-in-app", "3", "--", *command)
    print(run.stdout, run.stderr)
    assert run.returncode == 0, run.stderr
    in_app = json.loads((report / "summary.json").read_text())["in_app"]
    assert in_app["command"][1:] == command[1:] and in_app["runs"] == len(in_app["rows"]) + 1
    recorded, *candidates = in_app["rows"]
    # the application's own code, timed in its first and last run, never swapped
    assert recorded["trial"] is None and recorded["failure"] is None
    assert recorded["in_app_ms"] > 0 and all(t > 0 for t in recorded["in_app_runs_ms"])
    assert len(recorded["in_app_runs_ms"]) == 2 and recorded["swapped"] == 0 and recorded["launches"] > 0
    assert recorded["replayed_speedup"] == 1.0 and in_app["noise"] is not None
    assert in_app["method"] == "cupti" or in_app["method"].startswith("events")
    # 1 to 3 distinct configurations of the search, each swapped into the application
    assert 1 <= len(candidates) <= 3
    assert len({c["trial"] for c in candidates}) == len(candidates)
    timed = [c for c in candidates if c["in_app_ms"]]
    assert timed, candidates
    for c in timed:
        assert c["swapped"] > 0 and c["swapped"] <= c["launches"], c
        assert c["in_app_speedup"] == pytest.approx(recorded["in_app_ms"] / c["in_app_ms"])
        assert c["replayed_ms"] > 0 and c["replayed_speedup"] > 0
    if len(timed) >= 3:
        assert -1.0 <= in_app["kendall_tau"] <= 1.0
    assert "replayed ×" in run.stdout and "in-app ×" in run.stdout
    assert "in the application, run 1/" in run.stderr


def test_an_application_failing_plain_is_refused_before_any_trial(jacobi):
    db, instance, _, folder = jacobi
    run = run_mneme("tune", "-rdb", db, "-rid", instance.id, "--space", "launch", "--trials", "5",
                    "--storage", f"sqlite:///{folder / 'refused.sqlite3'}", "--confirm-in-app", "--",
                    "sh", "-c", "echo 'usage: app N' >&2; exit 3")
    one_line_error(run, "the application fails run plain", "exited with status 3", "usage: app N")
    assert run.stdout == ""  # no search, no table
