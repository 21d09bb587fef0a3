"""One instance with broken metadata never hides the others (issue 21): ls lists the
others and names the broken one with the reason, check reports it and fails, show and
replay of the others work, and show/replay of the broken one say why in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from mneme.cli.main import cli
from mneme.replay.db import Database

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden.rdb"
SAXPY = "5acf7c2e2f6ed113"
BROKEN = f"{SAXPY}/1b783248d1ae4a7d"
SAME_KERNEL = f"{SAXPY}/2e50fb607d2d302d"
OTHER_KERNEL = "e7f17c4ea52f6596/124f544219bb53cf"


def run(*args, code=0):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == code, result.output
    return result.output


def instance_meta(db: Path, instance_id: str) -> Path:
    static, dyn = instance_id.split("/")
    return db / "kernels" / static / "instances" / dyn / "zarr.json"


def repeat_a_region(meta: Path) -> None:
    """What the PyTorch recording held: one region listed twice."""
    doc = json.loads(meta.read_text())
    regions = doc["attributes"]["mneme"]["regions"]
    regions.insert(1, dict(regions[0]))
    meta.write_text(json.dumps(doc))


def truncate_json(meta: Path) -> None:
    meta.write_text(meta.read_text()[:40])


@pytest.fixture(params=[(repeat_a_region, "is recorded twice"), (truncate_json, "JSON")],
                ids=["repeated-region", "corrupt-zarr-json"])
def broken_db(tmp_path, request):
    damage, reason = request.param
    db = tmp_path / "broken.rdb"
    shutil.copytree(GOLDEN, db)
    damage(instance_meta(db, BROKEN))
    return db, reason


def test_ls_lists_the_others_and_names_the_broken_one(broken_db):
    db, reason = broken_db
    out = run("ls", db)
    assert SAME_KERNEL in out and OTHER_KERNEL in out
    line = next(line for line in out.splitlines() if line.startswith("broken: "))
    assert line.startswith(f"broken: {BROKEN} (saxpy(float, float const*, float*, int)): ")
    assert reason in line
    assert "2 instances, 1 broken" in out
    rows = {r["instance"]: r for r in json.loads(run("ls", db, "--json"))}
    assert reason in rows[BROKEN]["broken"]
    assert "broken" not in rows[SAME_KERNEL] and rows[SAME_KERNEL]["stored_bytes"] > 0


def test_check_reports_the_broken_one_and_fails(broken_db):
    db, reason = broken_db
    out = run("check", db, code=1)
    broken = [line for line in out.splitlines() if line.startswith("broken: ")]
    assert broken and all(BROKEN in line for line in broken)
    assert any(reason in line for line in broken)


def test_show_and_compile_only_replay_of_the_others_work(broken_db):
    db, _ = broken_db
    assert json.loads(run("show", db, SAME_KERNEL, "--json"))["id"] == SAME_KERNEL
    assert json.loads(run("show", db, "saxpy", "--json"))["static_hash"] == SAXPY  # by name
    for good in (SAME_KERNEL, OTHER_KERNEL):
        out = run("replay", "-rdb", db, "-rid", good, "--compile-only", "--json")
        assert json.loads(out)["compile_only"] is True


def test_show_and_replay_of_the_broken_one_say_why_in_one_line(broken_db):
    db, reason = broken_db
    for args in (("show", db, BROKEN), ("replay", "-rdb", db, "-rid", BROKEN, "--compile-only")):
        result = CliRunner().invoke(cli, [str(a) for a in args])
        assert result.exit_code == 2, result.output
        assert result.output.count("\n") == 1 and result.output.startswith("mneme: error: ")
        assert BROKEN in result.output or "1b783248d1ae4a7d" in result.output
        assert reason in result.output
        assert "Traceback" not in result.output


def test_a_kernel_with_broken_metadata_hides_no_other_kernel(tmp_path):
    db = tmp_path / "broken.rdb"
    shutil.copytree(GOLDEN, db)
    truncate_json(db / "kernels" / SAXPY / "zarr.json")
    out = run("ls", db)
    assert OTHER_KERNEL in out and f"broken: {SAXPY} (damaged metadata): " in out
    assert [k.static_hash for k in Database.open(db).kernels()][-1] == SAXPY  # broken: last
    assert json.loads(run("show", db, "row_sum", "--json"))["static_hash"] == OTHER_KERNEL.split("/")[0]
    assert SAXPY in run("check", db, code=1)
