"""Both writers check an instance's region list against the reader's layout rules before
they commit it (issue 21: one instance with a region listed twice made `mneme ls` and
`mneme check` refuse a whole PyTorch recording). Exact repeats of a region are stored
once; any other break of the rules refuses that instance alone."""

from __future__ import annotations

import re

import numpy as np
import pytest
from db_support import BASE, INFO, STATIC, kernel_record, simple_instance
from mneme.replay.db import Database, DatabaseError, DatabaseWriter, InstanceRecord, Region
from mneme.replay.db.integrity import check_database

native = pytest.importorskip("mneme.runtime._native")

CHUNK = 64 << 10
NAME = "foo(float*, int)"


def cpp_writer(path, cls):
    w = cls(str(path), BASE, 1 << 30, "NVIDIA H100", "9.0", ["./app"], "diff", CHUNK, 1)
    w.add_kernel(STATIC, "_Z3fooPfi", NAME, b"BC\xc0\xde" + bytes(64), [(8, 8, 0, True, False)], [])
    return w


def region(address, size, kind="heap", symbol="", seed=0):
    before = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
    return (kind, address, symbol, before, before ^ 0x5A)


def heap(offset, size, seed=0):
    return region(BASE + offset, size, seed=seed)


GOOD = [heap(0, 4096), heap(1 << 20, 4096, seed=1)]
# (region list, what the refusal says)
BROKEN = [
    ([heap(0, 8192), heap(4096, 4096)], "regions r-00007f0000000000 and r-00007f0000001000 overlap"),
    ([heap(0, 4096), heap(0, 8192)], "region r-00007f0000000000 is recorded twice"),
    ([heap(0, 4096), region(BASE, 4096, "global", "g")], "region r-00007f0000000000 is recorded twice"),
    ([heap(1 << 30, 4096)], "heap region r-00007f0040000000 lies outside the recorded address range"),
    ([region(BASE, 64, "host")], "region r-00007f0000000000 has an unknown kind 'host'"),
]


def committed(path):
    return [i.id for i in Database.open(path).instances()]


def test_cpp_writer_stores_an_exact_repeat_once(tmp_path):
    path = tmp_path / "db"
    w = cpp_writer(path, native.RecordingWriter)
    x, y = GOOD
    dyn, new = w.add_instance(STATIC, (1, 1, 1), (64, 1, 1), 0, b"\x01" * 8, [y, x, y, x])
    assert new
    inst = Database.open(path).kernel(STATIC).instance(dyn)
    assert [r.address for r in inst.regions] == [BASE, BASE + (1 << 20)]
    assert inst.epilogue(inst.regions[1].name).tobytes() == y[4].tobytes()
    assert [p for p in check_database(Database.open(path)) if p.fatal] == []


@pytest.mark.parametrize("regions, message", BROKEN)
def test_cpp_writer_refuses_an_instance_the_reader_would_refuse(tmp_path, regions, message):
    path = tmp_path / "db"
    w = cpp_writer(path, native.RecordingWriter)
    good, _ = w.add_instance(STATIC, (1, 1, 1), (64, 1, 1), 0, b"\x01" * 8, GOOD)
    with pytest.raises(Exception, match=re.escape(f"of kernel {NAME} ({STATIC}) not written: {message}")):
        w.add_instance(STATIC, (2, 1, 1), (64, 1, 1), 0, b"\x02" * 8, regions)
    assert committed(path) == [f"{STATIC}/{good}"]
    assert list((path / ".mneme" / "staging").iterdir()) == []  # nothing half-written left


@pytest.mark.parametrize("regions, message", BROKEN)
def test_recorder_pipeline_skips_the_instance_with_one_line_and_records_the_others(
        tmp_path, capfd, regions, message):
    """What `mneme record` runs: the broken launch is named on stderr, nothing of it is
    written, the application goes on (no error), later instances are committed."""
    path = tmp_path / "db"
    w = cpp_writer(path, native.SnapshotWriter)
    bad, _ = w.add_instance(STATIC, (2, 1, 1), (64, 1, 1), 0, b"\x02" * 8, regions)
    good, _ = w.add_instance(STATIC, (1, 1, 1), (64, 1, 1), 0, b"\x01" * 8, GOOD)
    assert w.add_instance(STATIC, (2, 1, 1), (64, 1, 1), 0, b"\x02" * 8, regions) == (bad, False)
    w.flush()
    assert w.error() == ""
    lines = capfd.readouterr().err.splitlines()
    assert lines == [f"mneme record: instance {bad} of kernel {NAME} ({STATIC}) not recorded: {message}"]
    assert committed(path) == [f"{STATIC}/{good}"]
    w.close()


def test_recorder_pipeline_stores_an_exact_repeat_once(tmp_path, capfd):
    path = tmp_path / "db"
    w = cpp_writer(path, native.SnapshotWriter)
    x, y = GOOD
    dyn, _ = w.add_instance(STATIC, (1, 1, 1), (64, 1, 1), 0, b"\x01" * 8, [x, y, x])
    w.flush()
    assert w.error() == "" and capfd.readouterr().err == ""
    inst = Database.open(path).kernel(STATIC).instance(dyn)
    assert [r.address for r in inst.regions] == [BASE, BASE + (1 << 20)]
    assert inst.prologue(inst.regions[0].name).tobytes() == x[3].tobytes()
    assert [p for p in check_database(Database.open(path)) if p.fatal] == []
    w.close()


def test_python_writer_refuses_repeated_and_overlapping_regions(db_path):
    data = np.zeros(4096, np.uint8)
    with DatabaseWriter.create(db_path, INFO) as writer:
        writer.add_kernel(kernel_record())
        good, _ = writer.add_instance(STATIC, simple_instance(1))
        for regions, message in [
            ((Region("heap", BASE, data), Region("heap", BASE, data)), "region r-00007f0000000000 is recorded twice"),
            ((Region("heap", BASE, data), Region("heap", BASE + 2048, data)),
             "regions r-00007f0000000000 and r-00007f0000000800 overlap"),
        ]:
            record = InstanceRecord((3, 1, 1), (1, 1, 1), b"", regions, regions)
            with pytest.raises(DatabaseError, match=re.escape(f"instance not written: {message}")):
                writer.add_instance(STATIC, record)
    assert committed(db_path) == [f"{STATIC}/{good}"]
