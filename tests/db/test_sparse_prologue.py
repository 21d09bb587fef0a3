"""Sparse prologues (docs/format.md, "Arrays"): a prologue array of encoding ``bytes``
marked ``"sparse": true`` leaves its all-zero chunks out; they read as zeros through
mneme's reader and plain zarr-python alike, ``check`` adds them to the region's CRC-32C
arithmetically (so removing a non-zero chunk fails the checksum), and every other array
stays dense."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import crc32c
import numpy as np
import pytest
import zarr
from db_support import BASE, INFO, STATIC, kernel_record
from hostile_support import broken, edit_json, run
from mneme.replay.db import Database, DatabaseWriter, InstanceRecord, Region
from mneme.replay.db.chunks import read_array_info, read_range, stored_chunk_indices, tree_usage
from mneme.replay.db.errors import CorruptDataError
from mneme.replay.db.hashing import zeros_checksum

CHUNK = 1024
SIZE = 64 * CHUNK + 100  # 65 chunks, the last one short
#: Chunks that hold data; every other chunk of the heap region is zero.
FULL = (3, 4, 40, 64)


def pool_bytes(seed: int) -> np.ndarray:
    """A mostly-zero pool (as a preallocating allocator leaves it): data in a few chunks."""
    rng = np.random.default_rng(seed)
    data = np.zeros(SIZE, np.uint8)
    for index in FULL:
        lo = index * CHUNK
        hi = min(lo + CHUNK, SIZE)
        data[lo:hi] = rng.integers(1, 256, hi - lo, dtype=np.uint8)
    data[10 * CHUNK + 7] = 9  # one byte alone in a chunk
    return data


def record(seed: int = 1) -> InstanceRecord:
    before = pool_bytes(seed)
    after = before.copy()
    after[40 * CHUNK : 41 * CHUNK] = 0  # a chunk cleared
    after[20 * CHUNK + 5] = 1  # a byte written into a zero chunk
    g = np.zeros(64, np.uint8)  # a global that is all zero: one chunk, not stored
    return InstanceRecord(
        grid=(1, 1, 1), block=(32, 1, 1), args=seed.to_bytes(8, "little") + bytes(4),
        prologue=(Region("heap", BASE, before), Region("global", 0x1000, g, "g_zero")),
        epilogue=(Region("heap", BASE, after), Region("global", 0x1000, g.copy(), "g_zero")),
    )


@pytest.fixture
def sparse_db(tmp_path):
    """A format-2 database of two instances with sparse prologues (diff and bytes
    epilogues); returns (path, [(dynamic hash, record)])."""
    path = tmp_path / "sparse.rdb"
    written = []
    with DatabaseWriter.create(path, INFO, chunk_size=CHUNK) as writer:
        writer.add_kernel(kernel_record())
        for seed, fmt in ((1, "diff"), (2, "bytes")):
            rec = record(seed)
            dyn, _ = writer.add_instance(STATIC, rec, epilogue_format=fmt)
            written.append((dyn, rec))
    return path, written


HEAP = f"r-{BASE:016x}"
GLOBAL = f"r-{0x1000:016x}"


def test_writer_leaves_zero_chunks_out_and_marks_the_array(sparse_db):
    path, written = sparse_db
    inst = Database.open(path).kernel(STATIC).instance(written[0][0])
    info, encoding = inst.stored_array("prologue", HEAP)
    assert encoding == "bytes" and info.sparse and info.absent_is_zero
    assert info.attributes == {"mneme": {"encoding": "bytes", "sparse": True}}
    assert stored_chunk_indices(info) == sorted((*FULL, 10))
    glob, _ = inst.stored_array("prologue", GLOBAL)
    assert glob.sparse and stored_chunk_indices(glob) == []
    # args, ir and epilogues stay dense (no key), xor deltas absent-is-zero as before
    args = read_array_info(inst.path / "args", 1 << 20)
    assert not args.sparse and not args.absent_is_zero
    delta, encoding = inst.stored_array("epilogue", HEAP)
    assert encoding == "xor-prologue" and not delta.sparse and delta.absent_is_zero
    whole = Database.open(path).kernel(STATIC).instance(written[1][0])
    epi, encoding = whole.stored_array("epilogue", HEAP)
    assert encoding == "bytes" and not epi.sparse and not epi.absent_is_zero
    assert "sparse" not in json.dumps(read_array_info(inst.kernel.path / "ir", 1 << 20).attributes)


def test_reads_back_through_mneme_and_plain_zarr(sparse_db):
    path, written = sparse_db
    db = Database.open(path)
    group = zarr.open_group(str(path), mode="r")
    for dyn, rec in written:
        inst = db.kernel(STATIC).instance(dyn)
        node = group[f"kernels/{STATIC}/instances/{dyn}"]
        for pro, epi in zip(rec.prologue, rec.epilogue, strict=True):
            name = f"r-{pro.address:016x}"
            assert inst.prologue(name).tobytes() == pro.data.tobytes()
            assert inst.epilogue(name).tobytes() == epi.data.tobytes()
            before = node[f"prologue/{name}"][:]
            assert before.tobytes() == pro.data.tobytes()
            stored = node[f"epilogue/{name}"]
            after = stored[:] if stored.attrs["mneme"]["encoding"] == "bytes" else before ^ stored[:]
            assert after.tobytes() == epi.data.tobytes()
        changes = {c.name: c for c in inst.changes()}
        assert changes[HEAP].changed_bytes == int((rec.prologue[0].data != rec.epilogue[0].data).sum())
        assert changes[HEAP].first_offset == 20 * CHUNK + 5
        assert changes[GLOBAL].changed_bytes == 0 and changes[GLOBAL].first_offset is None


def test_range_reads_across_absent_chunks(sparse_db):
    """Restore-style reads: ranges that start, end and run inside absent chunks, into a
    caller's buffer, and a read of more chunks than are listed first (read_range lists the
    stored chunks for long ranges)."""
    path, written = sparse_db
    dyn, rec = written[0]
    inst = Database.open(path).kernel(STATIC).instance(dyn)
    data = rec.prologue[0].data
    info, _ = inst.stored_array("prologue", HEAP)
    for start, stop in ((0, SIZE), (5, 3 * CHUNK + 1), (CHUNK + 3, 2 * CHUNK - 1), (2 * CHUNK, 5 * CHUNK),
                        (11 * CHUNK, 40 * CHUNK + 9), (64 * CHUNK + 1, SIZE), (7, 7)):
        out = np.full(stop - start, 0xAB, np.uint8)
        inst.prologue(HEAP, start, stop, out=out)
        assert out.tobytes() == data[start:stop].tobytes(), (start, stop)
        assert read_range(info, start, stop).tobytes() == data[start:stop].tobytes()
    # the explicit keyword keeps working: False makes an absent chunk corruption
    with pytest.raises(CorruptDataError, match="chunk 0 is missing"):
        read_range(info, 0, CHUNK, missing_is_zero=False)
    with pytest.raises(CorruptDataError, match="missing"):
        read_range(info, missing_is_zero=False)
    assert read_range(info, 0, CHUNK, missing_is_zero=True).tobytes() == bytes(CHUNK)


def test_check_passes_and_counts_every_byte(sparse_db):
    path, _ = sparse_db
    code, out, err = run("check", path)
    assert code == 0 and "ok" in out, out + err
    from mneme.replay.db.integrity import check_database, region_bytes

    seen = []
    db = Database.open(path)
    assert check_database(db, seen.append) == []
    assert sum(seen) == region_bytes(db)  # absent chunks advance the progress too


def test_check_fails_in_one_line_when_a_non_zero_chunk_is_removed(sparse_db):
    path, written = sparse_db
    inst = Database.open(path).kernel(STATIC).instance(written[0][0])
    os.unlink(inst.path / "prologue" / HEAP / "c" / "40")
    code, out, err = run("check", path)
    assert code != 0
    lines = [line for line in (out + err).splitlines() if "checksum mismatch" in line]
    assert len(lines) == 1, out + err
    assert inst.id in lines[0] and f"region {HEAP}" in lines[0] and "prologue" in lines[0]


def test_a_removed_zero_chunk_of_a_bytes_epilogue_is_still_refused(sparse_db):
    path, written = sparse_db
    inst = Database.open(path).kernel(STATIC).instance(written[1][0])
    os.unlink(inst.path / "epilogue" / HEAP / "c" / "30")  # zero bytes, but a dense array
    broken(path, "chunk 30 is missing")
    with pytest.raises(CorruptDataError, match="chunk 30 is missing"):
        inst.epilogue(HEAP)


def test_dense_prologue_with_a_missing_chunk_is_refused_as_before(sparse_db):
    path, written = sparse_db
    inst = Database.open(path).kernel(STATIC).instance(written[0][0])
    meta = inst.path / "prologue" / HEAP / "zarr.json"
    edit_json(meta, lambda d: d["attributes"]["mneme"].pop("sparse"))  # now dense, chunks absent
    broken(path, "chunk 0 is missing")
    with pytest.raises(CorruptDataError, match="chunk 0 is missing"):
        inst.prologue(HEAP)
    with pytest.raises(CorruptDataError, match="missing"):
        inst.changes()


@pytest.mark.parametrize("array, value, needle", [
    ("args", True, "args array is marked sparse"),
    ("ir", True, "only an array of encoding bytes may be sparse"),
    ("epilogue-bytes", True, "epilogue array is marked sparse"),
    ("epilogue-xor", True, "only an array of encoding bytes may be sparse"),
    ("prologue", False, "must be true"),
    ("prologue", 1, "sparse"),
    ("prologue", "true", "sparse"),
])
def test_sparse_is_refused_where_the_format_does_not_allow_it(sparse_db, array, value, needle):
    path, written = sparse_db
    db = Database.open(path)
    diff = db.kernel(STATIC).instance(written[0][0])
    whole = db.kernel(STATIC).instance(written[1][0])
    target = {
        "args": diff.path / "args",
        "ir": diff.kernel.path / "ir",
        "epilogue-bytes": whole.path / "epilogue" / HEAP,
        "epilogue-xor": diff.path / "epilogue" / HEAP,
        "prologue": diff.path / "prologue" / HEAP,
    }[array]
    edit_json(target / "zarr.json", lambda d: d["attributes"]["mneme"].__setitem__("sparse", value))
    text = broken(path, needle)
    assert "Traceback" not in text
    fresh = Database.open(path)
    inst = fresh.kernel(STATIC).instance(written[0][0] if array != "epilogue-bytes" else written[1][0])
    with pytest.raises(CorruptDataError, match=needle):
        if array == "args":
            inst.args  # noqa: B018
        elif array == "ir":
            inst.kernel.ir()
        elif array.startswith("epilogue"):
            inst.epilogue(HEAP)
        else:
            inst.prologue(HEAP)


def test_a_dense_prologue_may_be_marked_sparse(tmp_path, sparse_db):
    """Marking a prologue that stores every chunk sparse changes nothing a reader gets;
    removing one of its zero chunks then is allowed, a non-zero one is caught by the CRC."""
    path, written = sparse_db
    inst = Database.open(path).kernel(STATIC).instance(written[0][0])
    # rewrite the prologue dense (every chunk) through the chunk writer, then mark it
    from mneme.replay.db.chunks import write_array

    folder = inst.path / "prologue" / HEAP
    data = written[0][1].prologue[0].data
    for child in (folder / "c").iterdir():
        child.unlink()
    write_array(folder, data, chunk_size=CHUNK, attributes={"mneme": {"encoding": "bytes", "sparse": True}})
    assert len(stored_chunk_indices(read_array_info(folder, 1 << 30))) == 65
    assert run("check", path)[0] == 0
    os.unlink(folder / "c" / "30")  # zeros
    assert run("check", path)[0] == 0
    assert inst.prologue(HEAP).tobytes() == data.tobytes()
    os.unlink(folder / "c" / "3")
    broken(path, "prologue content checksum mismatch")


def test_zeros_checksum_is_crc32c_of_zeros():
    for n in (0, 1, 3, 4096, 4 << 20, (4 << 20) * 3 + 17):
        for value in (0, 0xDEADBEEF):
            assert zeros_checksum(n, value) == crc32c.crc32c(bytes(n), value)
    zeros_checksum(106 << 30)  # no allocation: instant for a region of 106 GB
    with pytest.raises(ValueError):
        zeros_checksum(-1)


def test_ls_reads_each_file_once_and_prints_the_same_sizes(sparse_db):
    path, written = sparse_db
    db = Database.open(path)
    usage = tree_usage(path / "kernels")
    assert usage.disk == db.disk_bytes()
    for inst in db.instances():
        assert usage.nodes[inst.id] == (inst.stored_bytes(), inst.unique_bytes())
    rows = json.loads(run("ls", path, "--json")[1])
    assert {r["instance"]: (r["stored_bytes"], r["unique_bytes"]) for r in rows} == usage.nodes
    assert run("ls", path)[0] == 0


def test_a_huge_sparse_region_costs_what_is_stored(tmp_path):
    """A 4 GiB region of which one chunk is stored: ``check``, ``ls`` and ``show`` never
    visit the absent chunks (a dense region of this size would take minutes here)."""
    import time

    path = tmp_path / "huge.rdb"
    size = 4 << 30
    with DatabaseWriter.create(path, replace(INFO, vas_size=1 << 34), chunk_size=CHUNK) as writer:
        writer.add_kernel(kernel_record())
        small = record(3)
        dyn, _ = writer.add_instance(STATIC, small, epilogue_format="diff")
    # grow the heap region's arrays to 4 GiB without writing: only the metadata changes
    inst = Database.open(path).kernel(STATIC).instance(dyn)
    for side in ("prologue", "epilogue"):
        edit_json(inst.path / side / HEAP / "zarr.json", lambda d: d.__setitem__("shape", [size]))
    before = small.prologue[0].data
    after = small.epilogue[0].data
    pro_crc = zeros_checksum(size - SIZE, crc32c.crc32c(before.tobytes()))
    epi_crc = zeros_checksum(size - SIZE, crc32c.crc32c(after.tobytes()))

    def grow(doc):
        regions = doc["attributes"]["mneme"]["regions"]
        heap = next(r for r in regions if r["name"] == HEAP)
        heap.update(size=size, prologue_crc32c=pro_crc, epilogue_crc32c=epi_crc)

    edit_json(inst.path / "zarr.json", grow)  # (the dynamic hash does not cover sizes)
    start = time.monotonic()
    code, out, err = run("check", path)
    assert code == 0, out + err
    assert run("ls", path)[0] == 0
    shown = json.loads(run("show", path, inst.id, "--json")[1])
    heap = next(c for c in shown["changes"] if c["name"] == HEAP)
    assert heap["changed_bytes"] == int((before != after).sum())
    assert time.monotonic() - start < 30
    fresh = Database.open(path).kernel(STATIC).instance(dyn)
    tail = fresh.prologue(HEAP, size - 3 * CHUNK, size)
    assert not tail.any()
    assert fresh.prologue(HEAP, 0, SIZE).tobytes() == before.tobytes()


def test_copy_keeps_a_sparse_prologue_sparse(tmp_path, sparse_db):
    path, written = sparse_db
    target = tmp_path / "copy.rdb"
    code, out, err = run("copy", path, target, STATIC)
    assert code == 0, out + err
    assert run("check", target)[0] == 0
    db = Database.open(target)
    for dyn, rec in written:
        inst = db.kernel(STATIC).instance(dyn)
        info, _ = inst.stored_array("prologue", HEAP)
        assert info.sparse and stored_chunk_indices(info) == sorted((*FULL, 10))
        assert inst.prologue(HEAP).tobytes() == rec.prologue[0].data.tobytes()
        assert inst.epilogue(HEAP).tobytes() == rec.epilogue[0].data.tobytes()


def test_instance_difference_reads_what_is_stored(tmp_path, sparse_db):
    """copy/move compare a copied instance with its source: over sparse arrays only the
    chunks either side stores are read, and a byte in a chunk only one side stores (the
    other's absent zeros) is still a difference."""
    from mneme.replay.db.transfer import instance_difference

    path, written = sparse_db
    dyn, rec = written[0]
    other = tmp_path / "other.rdb"
    changed = record(1)
    changed.prologue[0].data[30 * CHUNK + 1] = 5  # a chunk the source does not store
    changed.epilogue[0].data[30 * CHUNK + 1] = 5
    with DatabaseWriter.create(other, INFO, chunk_size=CHUNK) as writer:
        writer.add_kernel(kernel_record())
        assert writer.add_instance(STATIC, changed, epilogue_format="diff")[0] == dyn
    a = Database.open(path).kernel(STATIC).instance(dyn)
    b = Database.open(other).kernel(STATIC).instance(dyn)
    assert instance_difference(a, b) == f"region {HEAP} prologue bytes differ"
    assert instance_difference(a, a) is None
    code, out, err = run("copy", path, other, STATIC)
    assert code != 0 and "differ" in out + err
    third = tmp_path / "third.rdb"
    after_only = record(1)
    after_only.epilogue[0].data[50 * CHUNK] = 7  # the same prologue, another delta
    with DatabaseWriter.create(third, INFO, chunk_size=CHUNK) as writer:
        writer.add_kernel(kernel_record())
        writer.add_instance(STATIC, after_only, epilogue_format="diff")
    c = Database.open(third).kernel(STATIC).instance(dyn)
    assert instance_difference(a, c) == f"region {HEAP} epilogue bytes differ"
