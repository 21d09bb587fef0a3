"""Launches in thread-block clusters (issue 21): the cluster shape is part of an instance
(format: the optional "cluster" field and three more words in the dynamic hash), written
alike by the recorder's C++ writer and the Python writer, read back, and checked."""

from __future__ import annotations

import json

import numpy as np
import pytest
from db_support import BASE, INFO, STATIC, kernel_record
from mneme.replay.db import (
    Database,
    DatabaseError,
    DatabaseWriter,
    InstanceRecord,
    Region,
    dynamic_hash,
)
from mneme.replay.db.integrity import check_database
from mneme.replay.db.layout import ATTRS_KEY

native = pytest.importorskip("mneme.runtime._native")

ARGS = bytes(range(12))


def _record(grid, cluster):
    data = np.arange(64, dtype=np.uint8)
    return InstanceRecord(grid, (128, 1, 1), ARGS, (Region("heap", BASE, data),),
                          (Region("heap", BASE, data[::-1].copy()),), cluster=cluster)


def test_launches_without_clusters_keep_their_hashes():
    plain = dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS)
    assert dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, (1, 1, 1)) == plain
    assert native.dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS) == plain
    clustered = dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, (2, 1, 1))
    assert clustered != plain
    assert clustered != dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, (4, 1, 1))
    assert native.dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, cluster=(2, 1, 1)) == clustered


def test_cpp_writer_records_the_cluster_shape(tmp_path):
    path = tmp_path / "cpp.rdb"
    writer = native.RecordingWriter(str(path), BASE, 1 << 30, "NVIDIA H100", "9.0", ["./app"], "diff",
                                    64 << 10, 1)
    writer.add_kernel(STATIC, "_Z1kPfi", "k(float*, int)", b"BC\xc0\xde" + bytes(60), [(8, 8, 0, True, False)], [])
    data = np.arange(4096, dtype=np.uint8)
    regions = [("heap", BASE, "", data, data[::-1].copy())]
    dyn, new = writer.add_instance(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, regions, cluster=(4, 1, 1))
    plain, _ = writer.add_instance(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, regions)
    assert new and dyn == dynamic_hash(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, (4, 1, 1)) != plain
    del writer
    kernel = Database.open(path).kernel(STATIC)
    assert kernel.instance(dyn).cluster == (4, 1, 1)
    assert kernel.instance(plain).cluster is None
    assert kernel.instance(dyn).describe()["cluster"] == [4, 1, 1]
    assert not [p for p in check_database(Database.open(path)) if p.fatal]


def test_python_writer_records_and_refuses_partial_clusters(tmp_path):
    path = tmp_path / "py.rdb"
    with DatabaseWriter.create(path, INFO) as writer:
        writer.add_kernel(kernel_record())
        dyn, new = writer.add_instance(STATIC, _record((8, 2, 1), (2, 2, 1)))
        with pytest.raises(DatabaseError, match=r"grid \[6, 1, 1\] is not a whole number of clusters"):
            writer.add_instance(STATIC, _record((6, 1, 1), (4, 1, 1)))
    db = Database.open(path)
    assert new and db.kernel(STATIC).instance(dyn).cluster == (2, 2, 1)
    assert not [p for p in check_database(db) if p.fatal]


def test_check_names_an_edited_cluster_shape(tmp_path):
    """A cluster shape changed after recording no longer matches the dynamic hash."""
    path = tmp_path / "py.rdb"
    with DatabaseWriter.create(path, INFO) as writer:
        writer.add_kernel(kernel_record())
        dyn, _ = writer.add_instance(STATIC, _record((8, 1, 1), (2, 1, 1)))
    meta = next(path.rglob(f"{dyn}/zarr.json"))
    doc = json.loads(meta.read_text())
    assert doc["attributes"][ATTRS_KEY]["cluster"] == [2, 1, 1]
    doc["attributes"][ATTRS_KEY]["cluster"] = [4, 1, 1]
    meta.write_text(json.dumps(doc))
    problems = [p for p in check_database(Database.open(path)) if p.fatal]
    assert any("do not match the dynamic hash" in p.message for p in problems)
