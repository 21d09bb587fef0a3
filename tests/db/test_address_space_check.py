"""`mneme check` catches a change to the recorded address range in the root metadata
(issue 21: it passed a changed size). Each instance records the range it was written in
(both writers), so a root that says otherwise is reported; a range that no recorder
reserves (not whole pages) and heap regions outside it are reported too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from db_support import BASE, INFO, STATIC, kernel_record, simple_instance
from mneme.cli.main import cli
from mneme.replay.db import Database, DatabaseWriter

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden.rdb"


def python_db(path: Path) -> str:
    with DatabaseWriter.create(path, INFO) as writer:
        writer.add_kernel(kernel_record())
        dyn, _ = writer.add_instance(STATIC, simple_instance(1))
    return f"{STATIC}/{dyn}"


def cpp_db(path: Path) -> str:
    native = pytest.importorskip("mneme.runtime._native")
    from db_support import BITCODE

    w = native.RecordingWriter(str(path), BASE, INFO.vas_size)
    w.add_kernel(STATIC, "_Z1kPfi", "k(float*, int)", BITCODE, [(8, 8, 0, True, False)], [])
    record = simple_instance(1)
    regions = [(p.kind, p.address, p.symbol or "", p.data, e.data)
               for p, e in zip(record.prologue, record.epilogue, strict=True)]
    dyn, _ = w.add_instance(STATIC, record.grid, record.block, 0, record.args, regions)
    return f"{STATIC}/{dyn}"


def set_address_space(db: Path, **changes) -> None:
    meta = db / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["mneme"]["address_space"].update(changes)
    meta.write_text(json.dumps(doc))


def check(db: Path) -> str:
    result = CliRunner().invoke(cli, ["check", str(db)])
    assert result.exit_code == 1, result.output
    return result.output


@pytest.mark.parametrize("write", [python_db, cpp_db], ids=["python-writer", "cpp-writer"])
@pytest.mark.parametrize("factor", [2, 4096])
def test_check_reports_a_larger_address_space_size(tmp_path, write, factor):
    db = tmp_path / "db"
    instance = write(db)
    assert "every chunk verified" in CliRunner().invoke(cli, ["check", str(db)]).output
    set_address_space(db, size=INFO.vas_size * factor)
    out = check(db)
    assert f"broken: {instance}: instance {instance} was recorded in address range " \
           f"{BASE:#x}+{INFO.vas_size:#x}, but the database's root metadata says " \
           f"{BASE:#x}+{INFO.vas_size * factor:#x}" in out


def test_check_reports_a_size_that_is_not_whole_pages(tmp_path):
    db = tmp_path / "db"
    python_db(db)
    set_address_space(db, size=INFO.vas_size + 1)
    assert "is not a whole number of 4096-byte pages" in check(db)


def test_check_reports_a_smaller_size_that_leaves_regions_outside(tmp_path):
    """Format 1 instances (the golden database) record no range: a size that cuts off
    their heap regions is still caught."""
    db = tmp_path / "golden.rdb"
    shutil.copytree(GOLDEN, db)
    set_address_space(db, size=1 << 20)
    assert "lies outside the recorded address range" in check(db)


def test_the_recorded_range_is_in_every_instance(tmp_path):
    db = tmp_path / "db"
    python_db(db)
    inst = next(iter(Database.open(db).instances()))
    assert inst._attrs["address_space"] == {"base": BASE, "size": INFO.vas_size}
