"""`mneme run --apply` on the GPU: tuned kernels swapped into the unmodified application.

many_launches runs saxpy six times with six launch configurations and six values of `a`:
the tuned code replaces every launch it is valid for (all of them for a pipeline or block
change; those within a compiled-in launch bound; only the launch with the recorded `a`
when the scalars are specialised), and the application's checksums stay those of the
plain run. device_globals' kernels read and write __device__/__constant__ globals: the
swapped kernels see and update the application's copies.
"""

import json

import pytest
from mneme.replay.db import Database
from record.record_support import executable, mneme_record
from tune_support import run_mneme

pytestmark = pytest.mark.gpu

#: many_launches' saxpy launches (grid, block) in program order
SAXPY_LAUNCHES = [(1, 32), (2, 64), (16, 256), (7, 96), (32, 128), (1, 1024)]


@pytest.fixture(scope="module")
def gpu():
    from mneme.runtime import driver_available

    if not driver_available():
        pytest.skip("no GPU driver")


def _recorded(name, folder):
    exe = executable(name, folder)
    db = folder / f"{name}.rdb"
    run = mneme_record(db, exe)
    assert run.returncode == 0, run.stderr
    return exe, db


def _tune(db, record_id, folder, space="launch", trials=8):
    report = folder / f"report-{record_id.replace('/', '-')}"
    run = run_mneme("tune", "-rdb", db, "-rid", record_id, "--space", space, "--trials", str(trials),
                    "--seed", "3", "--storage", f"sqlite:///{folder / 'studies.sqlite3'}",
                    "--report", report)
    assert run.returncode == 0, run.stderr
    return report / "best.json"


def _apply(apply, exe, folder, *options):
    out = folder / "run.json"
    run = run_mneme("run", "--apply", apply, "--repeat", "2", "--output-filter", "MNEME-CHECK|MNEME-RESULT",
                    "--json", out, *options, "--", exe)
    assert run.returncode == 0, run.stdout + run.stderr
    print(run.stderr)
    data = json.loads(out.read_text())
    # every launch's buffer checksums before and after it, and the program's own checks
    assert data["output_lines_compared"] > 2
    return data


@pytest.fixture(scope="module")
def saxpy(gpu, tmp_path_factory):
    folder = tmp_path_factory.mktemp("apply-many")
    exe, db = _recorded("many_launches", folder)
    kernel = next(k for k in Database.open(db).kernels() if k.demangled_name.startswith("saxpy"))
    instance = next(i for i in kernel.instances() if tuple(i.block) == (256, 1, 1))
    return exe, db, instance, _tune(db, instance.id, folder), folder


def test_the_tuned_kernel_replaces_every_launch_and_the_output_is_unchanged(saxpy):
    exe, _, instance, best, folder = saxpy
    data = _apply(best, exe, folder)
    assert data["output_checked"] and data["output_equal"], data["difference"]
    [row] = data["kernels"]
    assert row["instance"] == instance.id
    assert row["launches"] == len(SAXPY_LAUNCHES) and row["swapped"] == len(SAXPY_LAUNCHES)
    assert row["in_app_original_ms"] > 0 and row["in_app_tuned_ms"] > 0
    assert row["replay_recorded_ms"] > 0 and row["replay_tuned_ms"] > 0
    assert row["fidelity"] > 0
    assert len(data["plain_s"]) == len(data["tuned_s"]) == 2


def _variant(best, folder, name, **replay):
    config = json.loads(best.read_text())
    config["replay"].update(replay)
    path = folder / name
    path.write_text(json.dumps(config))
    return path


def test_a_launch_bound_keeps_larger_blocks_on_the_original_code(saxpy):
    exe, _, instance, best, folder = saxpy
    # block 128 for the recorded (16, 256) launch, covering grid, bound 128 compiled in
    path = _variant(best, folder, "bounded.json", block=[128, 1, 1], grid=[32, 1, 1], set_launch_bounds=True)
    data = _apply(path, exe, folder)
    assert data["output_equal"], data["difference"]
    expected = sum(1 for _, block in SAXPY_LAUNCHES if block <= 128 or block == 256)
    assert data["kernels"][0]["swapped"] == expected == 5


def test_specialised_scalars_swap_only_the_launch_with_the_recorded_values(saxpy):
    exe, _, _, best, folder = saxpy
    path = _variant(best, folder, "specialised.json", specialize=True)
    data = _apply(path, exe, folder)
    assert data["output_equal"], data["difference"]
    assert data["kernels"][0]["launches"] == 6 and data["kernels"][0]["swapped"] == 1


def test_device_globals_are_the_applications(gpu, tmp_path):
    exe, db = _recorded("device_globals", tmp_path)
    tuned = []
    for kernel in Database.open(db).kernels():
        if kernel.demangled_name.split("(")[0] in ("apply_coeffs", "count_and_bin"):
            instance = kernel.instances()[0]
            tuned.append(_tune(db, instance.id, tmp_path, space="pipeline", trials=4))
    assert len(tuned) == 2
    data = _apply(tmp_path, exe, tmp_path)  # the folder holding both reports
    assert data["output_equal"], data["difference"]
    assert len(data["kernels"]) == 2 and all(row["swapped"] >= 1 for row in data["kernels"])


def test_a_refused_tuned_launch_runs_the_original_code(saxpy):
    """A plan without its launch bound (as if the bound were unknown): the block-1024 launch
    of code compiled for at most 128 threads is refused by the driver, enqueues nothing, and
    runs the application's own code; the output is unchanged and the refusal counted."""
    import os
    import subprocess

    from mneme.tune.apply import load_tuned, read_report, swapper_library, write_plan

    exe, _, _, best, folder = saxpy
    bounded = _variant(best, folder, "refused.json", block=[128, 1, 1], grid=[32, 1, 1], set_launch_bounds=True)
    work = folder / "refused"
    work.mkdir()
    plan = write_plan([load_tuned(bounded)], work)
    text = plan.read_text()
    assert "bound 128" in text
    plan.write_text(text.replace("bound 128", "bound 0"))
    report = work / "report.txt"
    env = {**os.environ, "LD_PRELOAD": str(swapper_library()), "MNEME_APPLY_PLAN": str(plan),
           "MNEME_APPLY_REPORT": str(report)}
    tuned = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=120)
    plain = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert tuned.returncode == plain.returncode == 0, tuned.stderr
    # every launch's buffer checksums (MNEME-CHECK lines) and the program's own checks
    assert "MNEME-RESULT ok" in tuned.stdout and tuned.stdout == plain.stdout
    assert "was refused" in tuned.stderr and tuned.stderr.count("was refused") == 1, tuned.stderr
    [counts] = read_report(report).kernels.values()
    assert (counts.launches, counts.swapped, counts.refused) == (6, 5, 1)
