"""The recorder's C++ writer produces exactly what the Python reader and zarr-python read."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from db_support import BASE, assert_regions_read_back, random_regions
from mneme.replay.db import (
    Database,
    DatabaseWriter,
    KernelRecord,
    Param,
    RecordingInfo,
    dynamic_hash,
)
from mneme.replay.db.integrity import check_database

native = pytest.importorskip("mneme.runtime._native")

STATIC = "feedc0de00000042"
IR = b"BC\xc0\xde" + bytes(range(256)) * 3


def conformance_regions(rng, count):
    return random_regions(rng, count, base=BASE, size_of=lambda _i: int(rng.integers(0, 300_000)),
                          gap_of=lambda: int(rng.integers(1, 1 << 20)))


@pytest.mark.parametrize("fmt", ["diff", "bytes", "best"])
def test_cpp_written_database_reads_exactly(tmp_path, fmt):
    rng = np.random.default_rng(7)
    path = tmp_path / "cpp.rdb"
    writer = native.RecordingWriter(str(path), BASE, 1 << 30, "NVIDIA H100", "9.0",
                                    ["./app", "--n", "3"], fmt, 64 << 10, 1)
    assert writer.add_kernel(STATIC, "_Z3fooPfi", "foo(float*, int)", IR,
                             [(8, 8, 0, True, False), (4, 4, 8, False, False)], [("g_2", 64, 1)])
    assert not writer.add_kernel(STATIC, "_Z3fooPfi", "foo(float*, int)", IR, [], [])
    written = []
    for k in range(4):
        regions = conformance_regions(rng, 3)
        args = rng.integers(0, 256, 12, dtype=np.uint8).tobytes()
        grid, block = (k + 1, 2, 1), (128, 1, 1)
        dyn, new = writer.add_instance(STATIC, grid, block, 48 * k, args, regions)
        assert new and dyn == dynamic_hash(STATIC, grid, block, 48 * k, args)
        assert native.dynamic_hash(STATIC, grid, block, 48 * k, args) == dyn
        written.append((dyn, grid, block, args, regions))
    again = writer.add_instance(STATIC, *written[0][1:3], 0, written[0][3], written[0][4])
    assert again == (written[0][0], False)

    db = Database.open(path)
    assert db.info.vas_base == BASE and db.info.command_line == ("./app", "--n", "3")
    kernel = db.kernel(STATIC)
    assert kernel.ir() == IR and kernel.demangled_name == "foo(float*, int)"
    assert kernel.params == [Param(8, 8, 0, True), Param(4, 4, 8)]
    assert kernel.globals[0].name == "g_2"
    plain = zarr.open_group(str(path), mode="r")
    for dyn, grid, block, args, regions in written:
        inst = kernel.instance(dyn)
        assert (inst.grid, inst.block, inst.args) == (grid, block, args)
        assert inst.occurrences == (2 if dyn == written[0][0] else 1)
        node = plain[f"kernels/{STATIC}/instances/{dyn}"]
        assert_regions_read_back(inst, node, regions)
    assert [p for p in check_database(db) if p.fatal] == []


def test_cpp_and_python_writers_share_one_database(tmp_path):
    """Rank A writes with Python, rank B with C++: same instance → one node, two occurrences."""
    rng = np.random.default_rng(3)
    path = tmp_path / "mixed.rdb"
    regions = conformance_regions(rng, 2)
    args = b"\x01" * 16
    with DatabaseWriter.create(path, RecordingInfo(vas_base=BASE, vas_size=1 << 30)) as py:
        py.add_kernel(KernelRecord(STATIC, "_Z3fooPfi", IR, "foo(float*, int)"))
        from mneme.replay.db import InstanceRecord, Region
        record = InstanceRecord((1, 1, 1), (64, 1, 1), args,
                                tuple(Region(k, a, b, s or None) for k, a, s, b, _ in regions),
                                tuple(Region(k, a, e, s or None) for k, a, s, _, e in regions))
        dyn, _ = py.add_instance(STATIC, record)
    cpp = native.RecordingWriter(str(path), BASE, 1 << 30)
    assert cpp.add_instance(STATIC, (1, 1, 1), (64, 1, 1), 0, args, regions) == (dyn, False)
    assert Database.open(path).kernel(STATIC).instance(dyn).occurrences == 2
    with pytest.raises(Exception, match="another address range"):
        native.RecordingWriter(str(path), BASE + (1 << 30), 1 << 30)


def test_gpu_facts_complete_a_database_created_before_the_run(tmp_path):
    """`mneme record` creates the database before the application starts (no GPU facts
    yet); the recorder's writer then fills them in, and later writers leave them alone."""
    root = tmp_path / "app.rdb"
    native.RecordingWriter(str(root), BASE, 1 << 30)
    assert Database.open(root).info.gpu_name == ""
    native.RecordingWriter(str(root), BASE, 1 << 30, gpu_name="NVIDIA H100 80GB HBM3",
                           compute_capability="9.0")
    info = Database.open(root).info
    assert (info.gpu_name, info.compute_capability) == ("NVIDIA H100 80GB HBM3", "9.0")
    native.RecordingWriter(str(root), BASE, 1 << 30, gpu_name="another GPU")
    assert Database.open(root).info.gpu_name == "NVIDIA H100 80GB HBM3"
