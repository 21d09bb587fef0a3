"""Every bad input gives one clear line through the CLI, a non-zero exit, no traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from db_support import STATIC
from mneme.replay.db import (
    CorruptDataError,
    Database,
    FormatVersionError,
    InvalidNameError,
    NotADatabaseError,
)
from mneme.replay.db.integrity import check_database

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden.rdb"


def mneme(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mneme.cli", *args],
                          capture_output=True, text=True, timeout=120)


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def golden(tmp_path):
    target = tmp_path / "g.rdb"
    shutil.copytree(GOLDEN, target)
    return target


def a_region_chunk(db_path: Path) -> Path:
    inst = next(Database.open(db_path).instances())
    return inst.path / "prologue" / inst.regions[0].name / "c" / "0"


def test_nonexistent_path(tmp_path):
    assert_one_line_error(mneme("ls", str(tmp_path / "nope")), "does not exist")


def test_directory_that_is_not_a_database(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "data.txt").write_text("hello")
    assert_one_line_error(mneme("ls", str(tmp_path / "x")), "not a mneme recording database")


def test_newer_format_version(golden):
    meta = golden / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["mneme"]["format_version"] = 99
    meta.write_text(json.dumps(doc))
    with pytest.raises(FormatVersionError, match="upgrade"):
        Database.open(golden)
    assert_one_line_error(mneme("ls", str(golden)), "format 99", "upgrade")


def test_malformed_metadata(golden):
    meta = golden / "zarr.json"
    meta.write_text(meta.read_text()[:-20])
    assert_one_line_error(mneme("ls", str(golden)), "malformed JSON")
    with pytest.raises(CorruptDataError):
        Database.open(golden)


def test_wrong_types_in_instance_metadata(golden):
    inst = next(Database.open(golden).instances())
    meta = inst.path / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["mneme"]["grid"] = "big"
    meta.write_text(json.dumps(doc))
    result = mneme("show", str(golden), inst.id)
    assert_one_line_error(result, "grid")


def test_corrupted_chunk_fails_checksum(golden):
    chunk = a_region_chunk(golden)
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chunk.write_bytes(bytes(data))
    problems = check_database(Database.open(golden))
    assert any("checksum" in str(p) for p in problems)
    result = mneme("check", str(golden))
    assert result.returncode == 1 and "checksum mismatch" in result.stdout


def test_truncated_and_missing_chunks(golden):
    chunk = a_region_chunk(golden)
    chunk.write_bytes(chunk.read_bytes()[:3])
    assert "truncated" in mneme("check", str(golden)).stdout
    chunk.unlink()
    result = mneme("check", str(golden))
    assert result.returncode == 1 and "missing" in result.stdout
    inst = next(Database.open(golden).instances())
    with pytest.raises(CorruptDataError, match="missing"):
        inst.prologue(inst.regions[0].name)


def test_declared_size_far_larger_than_data(golden):
    inst = next(Database.open(golden).instances())
    name = inst.regions[0].name
    meta = inst.path / "prologue" / name / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["shape"] = [1 << 40]  # a terabyte
    meta.write_text(json.dumps(doc))
    with pytest.raises(CorruptDataError, match="declared size"):
        inst.prologue(name)
    assert "declared size" in mneme("check", str(golden)).stdout


def test_path_traversal_names_are_refused(golden):
    db = Database.open(golden)
    inst = next(db.instances())
    meta = inst.path / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["mneme"]["regions"][0]["name"] = "../../../../etc"
    meta.write_text(json.dumps(doc))
    fresh = Database.open(golden).kernel(inst.kernel.static_hash).instance(inst.dynamic_hash)
    with pytest.raises(InvalidNameError):
        _ = fresh.regions
    with pytest.raises(InvalidNameError):
        fresh.prologue("../../zarr.json")
    assert_one_line_error(mneme("show", str(golden), "../../etc"), "no kernel")
    assert_one_line_error(mneme("show", str(golden), f"{inst.kernel.static_hash}/../x"), "no single instance")


def test_unknown_kernel_lists_known_ones(golden):
    assert_one_line_error(mneme("show", str(golden), "nonesuch"), "no kernel", "saxpy")


def test_writer_refuses_a_foreign_directory_and_a_different_range(tmp_path):
    from db_support import INFO
    from mneme.replay.db import DatabaseWriter, IncompatibleDatabaseError, RecordingInfo

    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes").write_text("x")
    with pytest.raises(NotADatabaseError, match="not empty"):
        DatabaseWriter.create(tmp_path / "other", INFO)
    DatabaseWriter.create(tmp_path / "db", INFO)
    with pytest.raises(IncompatibleDatabaseError, match="address range"):
        DatabaseWriter.create(tmp_path / "db", RecordingInfo(vas_base=0x200000000000, vas_size=1 << 30))
    if os.geteuid() != 0:  # root may write anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        with pytest.raises(Exception, match="not writable"):
            DatabaseWriter.create(ro, INFO)


def test_nothing_outside_the_database_is_touched_by_clean(golden, tmp_path):
    sentinel = tmp_path / "sentinel"
    sentinel.write_text("keep")
    assert_one_line_error(mneme("clean", str(golden), "../sentinel"), "no kernel")
    assert sentinel.read_text() == "keep"
    assert STATIC not in os.listdir(golden / "kernels")
