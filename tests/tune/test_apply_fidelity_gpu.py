"""The fidelity corpus on the GPU: every program records and replays verified, and `mneme
run --apply` passes an application that prints its own timings, dates, pid and addresses
with no output filter, and fails it when a tuned kernel really changes its results."""

import json

import pytest
from mneme.replay.db import Database
from record.record_support import executable, mneme_record
from tune_support import run_mneme

pytestmark = pytest.mark.gpu

FIDELITY_PROGRAMS = ["fidelity_jacobi", "fidelity_producer_consumer", "fidelity_short_kernel",
                     "fidelity_copy_overlap", "fidelity_app_timings"]


@pytest.fixture(scope="module")
def gpu():
    from mneme.runtime import driver_available

    if not driver_available():
        pytest.skip("no GPU driver")


def _recorded(name, folder):
    exe = executable(name, folder)
    db = folder / f"{name}.rdb"
    run = mneme_record(db, exe, "-mr", "2")
    assert run.returncode == 0, run.stderr
    return exe, db


@pytest.mark.parametrize("name", FIDELITY_PROGRAMS)
def test_each_fidelity_program_records_and_replays_verified(gpu, tmp_path, name):
    from mneme.replay.engine import ReplaySession
    from mneme.replay.engine.config import ReplaySettings

    _, db = _recorded(name, tmp_path)
    kernels = Database.open(db).kernels()
    assert kernels
    for kernel in kernels:
        instances = kernel.instances()
        assert instances, kernel.demangled_name
        for instance in instances:
            settings = ReplaySettings()
            with ReplaySession(instance) as session:
                result = session.run(settings.compile, settings.replay.with_(iterations=3))
            assert result.verified, (kernel.demangled_name, instance.id, result.mismatches[:3])


@pytest.fixture(scope="module")
def app_timings(gpu, tmp_path_factory):
    """fidelity_app_timings recorded, and advect tuned over pipelines (its output unchanged)."""
    folder = tmp_path_factory.mktemp("apply-timings")
    exe, db = _recorded("fidelity_app_timings", folder)
    kernel = next(k for k in Database.open(db).kernels() if k.demangled_name.startswith("advect"))
    instance = kernel.instances()[0]
    report = folder / "report"
    run = run_mneme("tune", "-rdb", db, "-rid", instance.id, "--space", "pipeline", "--trials", "4",
                    "--seed", "3", "--storage", f"sqlite:///{folder / 'studies.sqlite3'}", "--report", report)
    assert run.returncode == 0, run.stderr
    return exe, report / "best.json", instance, folder


def _apply(best, exe, folder, name):
    out = folder / f"{name}.json"
    run = run_mneme("run", "--apply", best, "--repeat", "2", "--json", out, "--", exe)
    return run, json.loads(out.read_text()) if out.is_file() else None


def test_run_apply_passes_an_application_printing_its_own_timings_without_a_filter(app_timings):
    exe, best, _, folder = app_timings
    run, data = _apply(best, exe, folder, "plain")
    print(run.stderr)
    assert run.returncode == 0, run.stdout + run.stderr
    assert data["output_equal"] and data["output_lines_compared"] >= 8, data
    # the start date, host time, event total, GB/s and progress timings are not compared;
    # the pid and the host address vary between the plain runs
    assert data["output_timings_not_compared"] >= 4
    assert any("pid <varies>" in line for line in data["output_varying_fields"]), data["output_varying_fields"]
    [row] = data["kernels"]
    assert row["launches"] == 20 and row["swapped"] == 20
    assert row["in_app_original_ms"] > 0 and row["in_app_tuned_ms"] > 0
    assert row["in_app_method"] == "cupti" or row["in_app_method"].startswith("events (CUPTI unusable")


def test_run_apply_fails_when_a_tuned_kernel_changes_the_results(app_timings):
    """A grid of half the recorded one (rule 'fixed'): advect, which has no grid-stride loop,
    leaves half the cells unadvected, so the mass checksums change."""
    exe, best, instance, folder = app_timings
    config = json.loads(best.read_text())
    grid = list(instance.grid)
    config["replay"]["grid"] = [max(1, grid[0] // 2), grid[1], grid[2]]
    broken = folder / "half_grid.json"
    broken.write_text(json.dumps(config))
    run, data = _apply(broken, exe, folder, "broken")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "DIFFERS from the plain runs" in run.stderr and "tuned:" in run.stderr
    assert not data["output_equal"]
    assert any("mass" in (d["plain"] or "") for d in data["output_differences"]), data["output_differences"]
