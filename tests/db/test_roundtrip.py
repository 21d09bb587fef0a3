"""Round trips through the writer and both readers (ours and plain zarr-python)."""

from __future__ import annotations

import numpy as np
import zarr
from db_support import BASE, INFO, STATIC, kernel_record, simple_instance
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mneme.replay.db import (
    Annotation,
    Database,
    DatabaseWriter,
    InstanceRecord,
    Region,
    dynamic_hash,
)

SMALL_CHUNK = 1024  # many chunks per region, edge chunks and missing delta chunks

region_sizes = st.integers(0, 5000)


@st.composite
def instances(draw):
    count = draw(st.integers(1, 4))
    regions_before, regions_after, annotations = [], [], {}
    address = BASE
    for i in range(count):
        size = draw(region_sizes)
        before = np.frombuffer(draw(st.binary(min_size=size, max_size=size)), np.uint8)
        mode = draw(st.sampled_from(["same", "sparse", "all"]))
        after = before.copy()
        if mode == "sparse" and size:
            where = draw(st.lists(st.integers(0, size - 1), max_size=10))
            after[where] ^= 0x5A
        elif mode == "all":
            after = np.frombuffer(draw(st.binary(min_size=size, max_size=size)), np.uint8)
        kind = "global" if i == count - 1 and draw(st.booleans()) else "heap"
        symbol = "g_var" if kind == "global" else None
        regions_before.append(Region(kind, address, before, symbol))
        regions_after.append(Region(kind, address, after, symbol))
        if draw(st.booleans()):
            annotations[f"r-{address:016x}"] = Annotation(
                draw(st.sampled_from(["float32", "float64", "int32"])),
                atol=draw(st.floats(0, 1)), rtol=draw(st.floats(0, 1)),
                norm=draw(st.sampled_from([None, "l2", "max"])),
            )
        address += size + draw(st.integers(1, 4096))  # distinct, even for empty regions
    grid = tuple(draw(st.integers(1, 1 << 20)) for _ in range(3))
    block = tuple(draw(st.integers(1, 1024)) for _ in range(3))
    args = draw(st.binary(max_size=512))
    return InstanceRecord(grid, block, args, tuple(regions_before), tuple(regions_after),
                          shared_mem=draw(st.integers(0, 1 << 16)), annotations=annotations)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=instances(), fmt=st.sampled_from(["diff", "bytes", "best"]))
def test_random_instances_round_trip_exactly(tmp_path_factory, record, fmt):
    path = tmp_path_factory.mktemp("rt") / "db"
    with DatabaseWriter.create(path, INFO, chunk_size=SMALL_CHUNK, epilogue_format=fmt) as writer:
        writer.add_kernel(kernel_record())
        dyn, new = writer.add_instance(STATIC, record)
    assert new
    assert dyn == dynamic_hash(STATIC, record.grid, record.block, record.shared_mem, record.args)
    inst = Database.open(path).instance(f"{STATIC}/{dyn}")
    assert (inst.grid, inst.block, inst.shared_mem, inst.args) == (
        record.grid, record.block, record.shared_mem, record.args)
    assert inst.annotations == record.annotations
    plain = zarr.open_group(str(path), mode="r")[f"kernels/{STATIC}/instances/{dyn}"]
    for before, after in zip(record.prologue, record.epilogue, strict=True):
        name = before.info().name
        assert inst.region(name).kind == before.kind
        assert inst.region(name).symbol == before.symbol
        assert inst.prologue(name).tobytes() == bytes(before.data)
        assert inst.epilogue(name).tobytes() == bytes(after.data)
        # the prologue the caller read already (restore decompresses it once for both)
        known = inst.prologue(name)
        assert inst.epilogue(name, prologue=known).tobytes() == bytes(after.data)
        assert known.tobytes() == bytes(before.data)  # not overwritten by the XOR
        # what restore streams: ranges decompressed into the caller's buffer, and the
        # epilogue as stored (its XOR with the prologue resolved by the caller)
        size = before.info().size
        out = np.full(size, 0xAB, dtype=np.uint8)
        half = size // 2
        inst.prologue(name, half, size, out=out[: size - half])
        assert out[: size - half].tobytes() == bytes(before.data)[half:]
        encoding, stored = inst.stored_epilogue(name)
        resolved = stored if encoding == "bytes" else np.bitwise_xor(stored, known.view(np.uint8).reshape(-1))
        assert resolved.tobytes() == bytes(after.data)
        # The documented overlay rule with nothing but zarr-python.
        stored = plain[f"epilogue/{name}"]
        pro = plain[f"prologue/{name}"][:]
        got = stored[:] if stored.attrs["mneme"]["encoding"] == "bytes" else pro ^ stored[:]
        assert got.tobytes() == bytes(after.data)
        if before.info().size > 10:
            lo, hi = 3, before.info().size - 2
            assert inst.epilogue(name, lo, hi).tobytes() == bytes(after.data)[lo:hi]


def test_regions_at_one_address_are_refused(db_path):
    import pytest
    from mneme.replay.db import DatabaseError

    empty = np.zeros(0, np.uint8)
    record = InstanceRecord((1, 1, 1), (1, 1, 1), b"",
                            (Region("heap", BASE, empty), Region("global", BASE, empty, "g")),
                            (Region("heap", BASE, empty), Region("global", BASE, empty, "g")))
    with DatabaseWriter.create(db_path, INFO) as writer:
        writer.add_kernel(kernel_record())
        with pytest.raises(DatabaseError, match="region r-00007f0000000000 is recorded twice"):
            writer.add_instance(STATIC, record)


def test_repeat_only_counts_occurrences(db_path):
    with DatabaseWriter.create(db_path, INFO) as writer:
        writer.add_kernel(kernel_record())
        first = writer.add_instance(STATIC, simple_instance(3))
        again = writer.add_instance(STATIC, simple_instance(3))
        other = writer.add_instance(STATIC, simple_instance(4))
    assert first[1] and not again[1] and other[1]
    assert first[0] == again[0] != other[0]
    db = Database.open(db_path)
    counts = {i.dynamic_hash: i.occurrences for i in db.kernel(STATIC).instances()}
    assert counts == {first[0]: 2, other[0]: 1}


def test_diff_stores_unchanged_data_once_and_sparse_changes_small(db_path):
    size = 8 << 20
    rng = np.random.default_rng(0)
    before = rng.random(size // 4, dtype=np.float32).view(np.uint8)
    after = before.copy().view(np.float32)
    idx = rng.choice(after.size, after.size // 100, replace=False)  # 1 % of the elements
    after[idx] += 1.0
    record = InstanceRecord((1, 1, 1), (1, 1, 1), b"", (Region("heap", BASE, before),),
                            (Region("heap", BASE, after.view(np.uint8)),))
    unchanged = InstanceRecord((2, 1, 1), (1, 1, 1), b"", (Region("heap", BASE, before),),
                               (Region("heap", BASE, before),))
    with DatabaseWriter.create(db_path, INFO) as writer:
        writer.add_kernel(kernel_record())
        dyn, _ = writer.add_instance(STATIC, record)
        same, _ = writer.add_instance(STATIC, unchanged)
    kernel = Database.open(db_path).kernel(STATIC)
    changed_epi = kernel.instance(dyn).path / "epilogue"
    from mneme.replay.db.chunks import stored_bytes
    assert stored_bytes(changed_epi) <= 0.05 * size
    assert stored_bytes(kernel.instance(same).path / "epilogue") < 4096  # metadata only
    change = kernel.instance(dyn).changes()[0]
    assert 0 < change.changed_bytes <= size // 100 * 4


def test_bytes_and_best_formats(db_path):
    rng = np.random.default_rng(5)
    before = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    after = rng.integers(0, 256, 1 << 20, dtype=np.uint8)  # everything changed
    record = InstanceRecord((1, 1, 1), (1, 1, 1), b"x", (Region("heap", BASE, before),),
                            (Region("heap", BASE, after),))
    with DatabaseWriter.create(db_path, INFO, epilogue_format="best") as writer:
        writer.add_kernel(kernel_record())
        dyn, _ = writer.add_instance(STATIC, record)
    inst = Database.open(db_path).instance(f"{STATIC}/{dyn}")
    assert inst.epilogue_format == "best"
    # random XOR random is as incompressible as the data: either choice is right, and the
    # recorded encoding must be the one actually stored
    name = inst.regions[0].name
    assert inst.epilogue(name).tobytes() == after.tobytes()


def test_several_kernels_listed_sorted_and_found_by_name(db_path):
    with DatabaseWriter.create(db_path, INFO) as writer:
        writer.add_kernel(kernel_record("aaaaaaaaaaaaaaaa"))
        assert not writer.add_kernel(kernel_record("aaaaaaaaaaaaaaaa"))
    db = Database.open(db_path)
    assert [k.static_hash for k in db.kernels()] == ["aaaaaaaaaaaaaaaa"]
    assert db.kernel("k").static_hash == "aaaaaaaaaaaaaaaa"
    assert db.kernel("_Z1kPfi").ir() == kernel_record().ir
    assert db.kernel("aaaa").params == list(kernel_record().params)
