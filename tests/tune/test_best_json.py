"""best.json carries what it was tuned on: `mneme replay --config best.json` needs no -rid
(nor -rdb while the database is where it was), refuses another kernel in one line, and
older files without identity are read as before."""

import json

import pytest
from tune_support import GOLDEN, ROW_SUM, SAXPY, compile_only_report, one_line_error, run_mneme

GOLDEN_V2 = GOLDEN.parent / "golden-v2.rdb"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    report, run = compile_only_report(tmp_path_factory.mktemp("best"), trials=6, seed=2)
    # Registers cannot change for saxpy: the search honestly finds nothing.
    assert "no improvement of registers over the recorded configuration" in run.stdout
    return report


def _replay(*args):
    run = run_mneme("replay", *args, "--compile-only", "--json")
    return run, (json.loads(run.stdout) if run.returncode == 0 else None)



def test_best_json_names_database_kernel_instance_and_code(report):
    data = json.loads((report / "best.json").read_text())
    identity = data["identity"]
    assert identity["database"] == str(GOLDEN.resolve())
    assert identity["kernel"] == {"static_hash": SAXPY.split("/")[0], "name": "_Z5saxpyfPKfPfi",
                                  "demangled_name": "saxpy(float, float const*, float*, int)"}
    assert identity["instance"] == SAXPY and identity["instances"] == [SAXPY]
    assert identity["code"]["kind"] == "llvm-bitcode"
    assert identity["significant"] is False and identity["study"].endswith(":pipeline:registers")
    summary = json.loads((report / "summary.json").read_text())
    assert summary["identity"]["instance"] == SAXPY
    assert summary["confirmation"]["significant"] is False
    assert summary["verdict"].startswith("no improvement")


def test_replay_takes_database_and_instance_from_the_file(report):
    # golden.rdb holds several instances: without the identity this would ask for -rid.
    run, result = _replay("--config", report / "best.json")
    assert run.returncode == 0, run.stderr
    assert result["instance"] == SAXPY
    run, result = _replay("-rdb", GOLDEN, "--config", report / "best.json")
    assert run.returncode == 0 and result["instance"] == SAXPY
    # Another recording holding the same kernel and instance (the format-2 golden).
    run, result = _replay("-rdb", GOLDEN_V2, "--config", report / "best.json")
    assert run.returncode == 0 and result["instance"] == SAXPY


def test_another_kernel_is_refused_in_one_line(report):
    run, _ = _replay("-rdb", GOLDEN, "-rid", ROW_SUM, "--config", report / "best.json")
    one_line_error(run, "was tuned for kernel saxpy", "not row_sum")
    run, _ = _replay("-rdb", f"{GOLDEN}/row_sum", "--config", report / "best.json")
    one_line_error(run, "was tuned for kernel saxpy")


def test_other_code_of_the_kernel_is_refused(report, tmp_path):
    data = json.loads((report / "best.json").read_text())
    data["identity"]["code"]["crc32c"] = 12345
    path = tmp_path / "best.json"
    path.write_text(json.dumps(data))
    run, _ = _replay("-rdb", GOLDEN_V2, "--config", path)
    one_line_error(run, "tuned on other code of kernel saxpy")


def test_a_database_that_moved_or_a_broken_identity(report, tmp_path):
    data = json.loads((report / "best.json").read_text())
    data["identity"]["database"] = str(tmp_path / "gone.rdb")
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(data))
    run, _ = _replay("--config", moved)
    one_line_error(run, "which is not there any more", "-rdb")
    run, result = _replay("-rdb", GOLDEN, "--config", moved)
    assert run.returncode == 0 and result["instance"] == SAXPY
    data["identity"]["kernel"] = "saxpy"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    run, _ = _replay("-rdb", GOLDEN, "--config", broken)
    one_line_error(run, "identity section is malformed")


def test_older_files_without_identity_are_read_as_before(report, tmp_path):
    data = json.loads((report / "best.json").read_text())
    del data["identity"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    run, _ = _replay("-rdb", GOLDEN, "--config", old)
    one_line_error(run, "choose one with -rid")
    run, result = _replay("-rdb", GOLDEN, "-rid", ROW_SUM, "--config", old)
    assert run.returncode == 0 and result["instance"] == ROW_SUM
    run = run_mneme("replay", "--config", old, "--compile-only")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert "does not name the database it was tuned on" in run.stderr
