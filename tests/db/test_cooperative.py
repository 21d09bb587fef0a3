"""Cooperative launches (issue 35): whether a launch was cooperative is part of an instance
(format: the optional "cooperative" field and one more word in the dynamic hash), written
alike by the recorder's C++ writer and the Python writer, read back and checked; databases
written before the key read as non-cooperative."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from db_support import BASE, INFO, STATIC, kernel_record
from mneme.replay.db import Database, DatabaseWriter, InstanceRecord, Region, dynamic_hash
from mneme.replay.db.integrity import check_database
from mneme.replay.db.layout import ATTRS_KEY

native = pytest.importorskip("mneme.runtime._native")

ARGS = bytes(range(12))
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden.rdb"


def _record(cooperative: bool, cluster=None) -> InstanceRecord:
    data = np.arange(64, dtype=np.uint8)
    return InstanceRecord((8, 1, 1), (128, 1, 1), ARGS, (Region("heap", BASE, data),),
                          (Region("heap", BASE, data[::-1].copy()),), cluster=cluster,
                          cooperative=cooperative)


def test_non_cooperative_launches_keep_their_hashes_and_both_writers_agree():
    plain = dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS)
    assert dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, None, False) == plain
    cooperative = dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, None, True)
    assert cooperative != plain
    assert native.dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS) == plain
    assert native.dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, cooperative=True) == cooperative
    # after the cluster's words when both are set
    both = dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, (2, 1, 1), True)
    assert both not in (cooperative, dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, (2, 1, 1)))
    assert native.dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, cluster=(2, 1, 1),
                               cooperative=True) == both


def test_cpp_writer_records_the_flag(tmp_path):
    path = tmp_path / "cpp.rdb"
    writer = native.RecordingWriter(str(path), BASE, 1 << 30, "NVIDIA H100", "9.0", ["./app"], "diff",
                                    64 << 10, 1)
    writer.add_kernel(STATIC, "_Z1kPfi", "k(float*, int)", b"BC\xc0\xde" + bytes(60), [(8, 8, 0, True, False)], [])
    data = np.arange(4096, dtype=np.uint8)
    regions = [("heap", BASE, "", data, data[::-1].copy())]
    dyn, new = writer.add_instance(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, regions, cooperative=True)
    plain, _ = writer.add_instance(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, regions)
    assert new and dyn == dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, None, True) != plain
    del writer
    kernel = Database.open(path).kernel(STATIC)
    assert kernel.instance(dyn).cooperative is True
    assert kernel.instance(plain).cooperative is False
    assert kernel.instance(dyn).describe()["cooperative"] is True
    plain_doc = json.loads(next(path.rglob(f"{plain}/zarr.json")).read_text())
    assert "cooperative" not in plain_doc["attributes"][ATTRS_KEY]  # written only when set
    assert not [p for p in check_database(Database.open(path)) if p.fatal]


def test_python_writer_round_trip(tmp_path):
    path = tmp_path / "py.rdb"
    with DatabaseWriter.create(path, INFO) as writer:
        writer.add_kernel(kernel_record())
        dyn, new = writer.add_instance(STATIC, _record(True))
        plain, _ = writer.add_instance(STATIC, _record(False))
    db = Database.open(path)
    assert new and dyn != plain
    assert db.kernel(STATIC).instance(dyn).cooperative is True
    assert db.kernel(STATIC).instance(plain).cooperative is False
    assert not [p for p in check_database(db) if p.fatal]


def test_databases_before_the_key_read_as_not_cooperative():
    if not GOLDEN.is_dir():
        pytest.skip(f"{GOLDEN} not here")
    instances = list(Database.open(GOLDEN).instances())
    assert instances and not any(i.cooperative for i in instances)


@pytest.mark.parametrize("edit", [False, "yes"])
def test_check_names_an_edited_flag(tmp_path, edit):
    """The flag removed after recording no longer matches the dynamic hash; a value that
    is not true or false is damage, said in one line."""
    path = tmp_path / "py.rdb"
    with DatabaseWriter.create(path, INFO) as writer:
        writer.add_kernel(kernel_record())
        dyn, _ = writer.add_instance(STATIC, _record(True))
    meta = next(path.rglob(f"{dyn}/zarr.json"))
    doc = json.loads(meta.read_text())
    assert doc["attributes"][ATTRS_KEY]["cooperative"] is True
    doc["attributes"][ATTRS_KEY]["cooperative"] = edit
    meta.write_text(json.dumps(doc))
    problems = [p for p in check_database(Database.open(path)) if p.fatal]
    expected = "do not match the dynamic hash" if edit is False else "cooperative"
    assert any(expected in p.message for p in problems), [p.message for p in problems]
