"""Format revision "app_time": the recorder's C++ writer adds an instance's in-app time in
place (atomically), the reader returns it, zarr-python reads it, older databases (the
golden recording) give None, and malformed values are one CorruptDataError line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from db_support import BASE, random_regions
from mneme.replay.db import (
    CorruptDataError,
    Database,
    DatabaseWriter,
    InstanceRecord,
    KernelRecord,
    RecordingInfo,
    Region,
)
from mneme.replay.db.app_time import AppTime
from mneme.replay.db.integrity import check_database

native = pytest.importorskip("mneme.runtime._native")

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden.rdb"
STATIC = "feedc0de00000042"
IR = b"BC\xc0\xde" + bytes(64)
APP = {"method": "cupti", "median_ms": 0.0507, "p25_ms": 0.05, "p75_ms": 0.052,
       "min_ms": 0.049, "max_ms": 0.07, "launches": 31, "first_ms": None, "snapshotted": 1}


def _cpp_database(path: Path):
    rng = np.random.default_rng(5)
    writer = native.RecordingWriter(str(path), BASE, 1 << 30)
    writer.add_kernel(STATIC, "_Z3fooPfi", "foo(float*, int)", IR, [(8, 8, 0, True, False)], [])
    regions = random_regions(rng, 2, base=BASE, size_of=lambda _i: 4096, gap_of=lambda: 1 << 20)
    dyn, _ = writer.add_instance(STATIC, (4, 1, 1), (128, 1, 1), 0, b"\0" * 8, regions)
    return writer, dyn


def test_cpp_writer_adds_and_replaces_app_time(tmp_path):
    writer, dyn = _cpp_database(tmp_path / "a.rdb")
    db = Database.open(tmp_path / "a.rdb")
    assert db.kernel(STATIC).instance(dyn).app_time is None  # before the revision's write
    writer.set_instance_attribute(STATIC, dyn, "app_time", json.dumps(APP))
    instance = Database.open(tmp_path / "a.rdb").kernel(STATIC).instance(dyn)
    assert instance.app_time == AppTime(**APP)
    assert instance.occurrences == 1 and instance.grid == (4, 1, 1)  # the rest unchanged
    # replaced, not appended twice; the file stays one valid document
    writer.set_instance_attribute(STATIC, dyn, "app_time", json.dumps({**APP, "launches": 5}))
    path = tmp_path / "a.rdb" / "kernels" / STATIC / "instances" / dyn / "zarr.json"
    text = path.read_text()
    assert text.count('"app_time"') == 1
    assert json.loads(text)["attributes"]["mneme"]["app_time"]["launches"] == 5
    assert not list(path.parent.glob(".zarr.json.*.tmp"))
    node = zarr.open_group(str(tmp_path / "a.rdb"), mode="r")[f"kernels/{STATIC}/instances/{dyn}"]
    assert node.attrs["mneme"]["app_time"]["median_ms"] == 0.0507
    db = Database.open(tmp_path / "a.rdb")
    assert [p for p in check_database(db) if p.fatal] == []
    assert "median 0.0507 ms (IQR 0.0500-0.0520) over 5 launches" in (
        db.kernel(STATIC).instance(dyn).app_time.describe())


def test_python_written_instance_takes_app_time_too(tmp_path):
    """An instance written by the Python writer (json.dumps layout) is edited as well."""
    path = tmp_path / "py.rdb"
    with DatabaseWriter.create(path, RecordingInfo(vas_base=BASE, vas_size=1 << 30)) as py:
        py.add_kernel(KernelRecord(STATIC, "_Z3fooPfi", IR, "foo(float*, int)"))
        data = np.arange(64, dtype=np.uint8)
        dyn = py.add_instance(STATIC, InstanceRecord(
            grid=(1, 1, 1), block=(64, 1, 1), args=b"\0" * 8,
            prologue=(Region("heap", BASE, data),), epilogue=(Region("heap", BASE, data),)))
    dyn = dyn if isinstance(dyn, str) else dyn[0]
    writer = native.RecordingWriter(str(path), BASE, 1 << 30)
    writer.set_instance_attribute(STATIC, dyn, "app_time", json.dumps(APP))
    assert Database.open(path).kernel(STATIC).instance(dyn).app_time.launches == 31


def test_databases_before_the_revision_have_none():
    db = Database.open(GOLDEN)
    assert all(instance.app_time is None for instance in db.instances())


def test_malformed_app_time_is_one_line(tmp_path):
    writer, dyn = _cpp_database(tmp_path / "b.rdb")
    writer.set_instance_attribute(STATIC, dyn, "app_time", json.dumps({**APP, "median_ms": -1}))
    instance = Database.open(tmp_path / "b.rdb").kernel(STATIC).instance(dyn)
    with pytest.raises(CorruptDataError, match=r"app_time\.median_ms: -1 is outside"):
        _ = instance.app_time


def test_missing_instance_is_an_error(tmp_path):
    writer, _ = _cpp_database(tmp_path / "c.rdb")
    with pytest.raises(RuntimeError, match="cannot read"):
        writer.set_instance_attribute(STATIC, "0123456789abcdef", "app_time", "{}")


def test_ls_and_show_print_the_app_time(tmp_path):
    from click.testing import CliRunner
    from mneme.cli.main import cli

    writer, dyn = _cpp_database(tmp_path / "d.rdb")
    writer.set_instance_attribute(STATIC, dyn, "app_time", json.dumps(APP))
    runner = CliRunner()
    listed = runner.invoke(cli, ["ls", str(tmp_path / "d.rdb")], terminal_width=250)
    assert listed.exit_code == 0, listed.output
    assert "app ms" in listed.output and "0.0507" in listed.output
    rows = json.loads(runner.invoke(cli, ["ls", str(tmp_path / "d.rdb"), "--json"]).output)
    assert rows[0]["app_ms"] == 0.0507
    shown = runner.invoke(cli, ["show", str(tmp_path / "d.rdb"), f"{STATIC}/{dyn}"],
                          terminal_width=250)
    assert "median 0.0507 ms (IQR 0.0500-0.0520) over 31 launches, 1 snapshotted (cupti)" in (
        shown.output)
    doc = json.loads(runner.invoke(cli, ["show", str(tmp_path / "d.rdb"), f"{STATIC}/{dyn}",
                                         "--json"]).output)
    assert doc["app_time"]["launches"] == 31
    golden = json.loads(runner.invoke(cli, ["ls", str(GOLDEN), "--json"]).output)
    assert all(row["app_ms"] is None for row in golden if "app_ms" in row)
