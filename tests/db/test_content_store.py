"""Content-addressed chunks: a chunk whose bytes the database already holds is stored once
(hard links into .mneme/chunks), by both writers, readable by plain zarr-python, and
`mneme clean` never deletes a chunk that an instance still uses."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from db_support import BASE
from mneme.cli.main import cli
from mneme.replay.db import (
    Database,
    DatabaseError,
    DatabaseWriter,
    InstanceRecord,
    KernelRecord,
    RecordingInfo,
    Region,
    content_store,
)
from mneme.replay.db.integrity import check_database, check_instance

native = pytest.importorskip("mneme.runtime._native")

STATIC = "feedc0de00000077"
IR = b"BC\xc0\xde" + bytes(range(256))
CHUNK = 64 << 10


def instance(pool: np.ndarray, small: int, block: int) -> InstanceRecord:
    """A large pool that no launch changes and a small buffer that each one does."""
    a = Region("heap", BASE, pool)
    before = Region("heap", BASE + (1 << 24), np.full(4096, small, np.uint8))
    after = Region("heap", BASE + (1 << 24), np.full(4096, small + 1, np.uint8))
    return InstanceRecord((1, 1, 1), (block, 1, 1), b"\0" * 8, (a, before), (a, after))


def write(path, count=4, pool=None):
    pool = np.random.default_rng(5).integers(0, 256, 1 << 20, dtype=np.uint8) if pool is None else pool
    with DatabaseWriter.create(path, RecordingInfo(vas_base=BASE, vas_size=1 << 30),
                               chunk_size=CHUNK) as writer:
        writer.add_kernel(KernelRecord(STATIC, "_Z3barv", IR, "bar()"))
        for i in range(count):
            writer.add_instance(STATIC, instance(pool, i, 32 * (i + 1)))
    return pool


def test_unchanged_memory_is_stored_once_and_reads_back_everywhere(tmp_path):
    path = tmp_path / "d.rdb"
    pool = write(path)
    db = Database.open(path)
    instances = db.instances()
    stored = sum(i.stored_bytes() for i in instances)
    # four prologues of a 1 MiB incompressible pool on disk once
    assert db.disk_bytes() < stored / 3
    assert all(i.unique_bytes() < i.stored_bytes() / 10 for i in instances)
    plain = zarr.open_group(str(path), mode="r")
    for inst in instances:
        region = inst.regions[0].name
        assert np.array_equal(inst.prologue(region), pool)
        node = plain[f"kernels/{STATIC}/instances/{inst.dynamic_hash}/prologue/{region}"]
        assert np.array_equal(node[:], pool)  # zarr-python: hard links are plain files
    assert [p for p in check_database(db) if p.fatal] == []
    # stored chunks are readable by everyone, as the C++ writer's are
    entries = [p for sub in content_store.store_dir(path).iterdir() for p in sub.iterdir()]
    assert entries and all(p.stat().st_mode & 0o444 == 0o444 for p in entries)
    shown = CliRunner().invoke(cli, ["ls", str(path)])
    assert shown.exit_code == 0 and "on disk" in shown.output and "unique" in shown.output


def test_clean_keeps_every_chunk_an_instance_still_uses(tmp_path):
    path = tmp_path / "d.rdb"
    pool = write(path)
    # a second kernel with the same pool, then the first kernel deleted
    with DatabaseWriter.create(path, RecordingInfo(vas_base=BASE, vas_size=1 << 30),
                               chunk_size=CHUNK) as writer:
        writer.add_kernel(KernelRecord("feedc0de00000078", "_Z3bazv", IR, "baz()"))
        writer.add_instance("feedc0de00000078", instance(pool, 9, 64))
    before = Database.open(path).disk_bytes()
    result = CliRunner().invoke(cli, ["clean", str(path), STATIC])
    assert result.exit_code == 0, result.output
    db = Database.open(path)
    (inst,) = db.instances()
    assert np.array_equal(inst.prologue(inst.regions[0].name), pool)
    assert [p for p in check_database(db) if p.fatal] == []
    # the small buffers of the deleted instances were theirs alone: collected
    assert "unused stored chunk" in result.output
    store = content_store.store_dir(path)
    entries = [p for sub in store.iterdir() for p in sub.iterdir()]
    assert all(os.lstat(p).st_nlink >= 2 for p in entries)
    assert db.disk_bytes() <= before
    # deleting the last user frees the pool too
    assert CliRunner().invoke(cli, ["clean", str(path), "feedc0de00000078"]).exit_code == 0
    assert not [p for sub in store.iterdir() for p in sub.iterdir()]


def test_clean_removes_an_entry_whose_writer_died_before_removing_its_temporary(tmp_path):
    """A writer publishes a chunk by linking its temporary as the entry, then removes the
    temporary; killed in between, it leaves an entry with two links and no user. `clean`
    frees both, whichever the folder lists first, and keeps the entries arrays use."""
    path = tmp_path / "d.rdb"
    pool = write(path, count=1)
    store = content_store.store_dir(path)
    used = sorted(p for sub in store.iterdir() for p in sub.iterdir())
    orphans = []
    for i, name in enumerate(("00" + "1" * 30 + "-10000-1", "ff" + "2" * 30 + "-10000-1")):
        entry = store / name[:2] / name
        entry.parent.mkdir(exist_ok=True)
        entry.write_bytes(b"x" * 100)
        os.link(entry, entry.parent / (".tmp-4242-" + str(i) if i else ".0tmp-4242-0"))
        orphans.append(entry)
    removed, freed = content_store.collect(path)
    assert (removed, freed) == (4, 200)
    assert sorted(p for sub in store.iterdir() for p in sub.iterdir()) == used
    (inst,) = Database.open(path).instances()
    assert np.array_equal(inst.prologue(inst.regions[0].name), pool)


def test_copy_of_a_deduplicated_database_is_complete_and_still_shared(tmp_path):
    path = tmp_path / "d.rdb"
    pool = write(path, count=4)
    target = tmp_path / "copy.rdb"
    result = CliRunner().invoke(cli, ["copy", str(path), str(target), STATIC])
    assert result.exit_code == 0, result.output
    source_disk = Database.open(path).disk_bytes()
    shutil.rmtree(path)  # nothing of the copy may point back into the source
    db = Database.open(target)
    for inst in db.instances():
        assert np.array_equal(inst.prologue(inst.regions[0].name), pool)
    assert [p for p in check_database(db) if p.fatal] == []
    # the pool is on the destination's disk once, as it was at the source
    assert db.disk_bytes() <= source_disk * 1.01
    assert db.disk_bytes() < sum(i.stored_bytes() for i in db.instances()) / 3
    entries = [p for sub in content_store.store_dir(target).iterdir() for p in sub.iterdir()]
    assert entries and all(os.lstat(p).st_nlink == 1 + 4 for p in entries if p.stat().st_size > CHUNK // 2)


def test_copy_does_not_trust_the_sources_store_names(tmp_path):
    """A source whose store entry names other bytes (a hostile or damaged database) is
    copied plainly: the destination's store never holds a name that lies, which would
    hand the wrong bytes to a later recording of the named ones."""
    path = tmp_path / "d.rdb"
    write(path, count=2)
    store = content_store.store_dir(path)
    victim = next(p for sub in store.iterdir() for p in sub.iterdir() if p.stat().st_size > CHUNK // 2)
    liar = "0" * 32 + victim.name[32:]
    (store / liar[:2]).mkdir(exist_ok=True)
    victim.rename(store / liar[:2] / liar)
    target = tmp_path / "copy.rdb"
    result = CliRunner().invoke(cli, ["copy", str(path), str(target), STATIC])
    assert result.exit_code == 0, result.output
    names = {p.name for sub in content_store.store_dir(target).iterdir() for p in sub.iterdir()}
    assert liar not in names and victim.name not in names
    assert [p for p in check_database(Database.open(target)) if p.fatal] == []


def test_both_writers_name_chunks_alike_and_share_them(tmp_path):
    """The C++ writer (the recorder's) links to chunks the Python writer stored."""
    path = tmp_path / "mixed.rdb"
    pool = write(path, count=1)
    before = Database.open(path).disk_bytes()
    cpp = native.RecordingWriter(str(path), BASE, 1 << 30, "", "", [], "diff", CHUNK, 1)
    small = np.full(4096, 7, np.uint8)
    regions = [("heap", BASE, "", pool, pool), ("heap", BASE + (1 << 24), "", small, small + 1)]
    dyn, new = cpp.add_instance(STATIC, (2, 1, 1), (32, 1, 1), 0, b"\1" * 8, regions)
    assert new
    db = Database.open(path)
    inst = db.kernel(STATIC).instance(dyn)
    assert np.array_equal(inst.prologue(inst.regions[0].name), pool)
    # the pool's 16 chunks were linked, not written again
    assert db.disk_bytes() - before < (1 << 20) // 4
    piece = pool[:CHUNK]
    assert native.chunk_digest(piece.tobytes()) == content_store.key(piece, CHUNK, 1).split("-")[0]
    assert [p for p in check_database(db) if p.fatal] == []


def test_check_decodes_a_shared_chunk_once_and_blames_every_user(tmp_path, monkeypatch):
    """`mneme check` verifies a chunk file many instances link to once (by inode), and a
    damaged shared chunk is reported for each instance holding it."""
    from mneme.replay.db import integrity

    path = tmp_path / "d.rdb"
    write(path, count=4)
    decoded = []
    real_decode = integrity._decode
    monkeypatch.setattr(integrity, "_decode", lambda info, index: decoded.append(info.path) or real_decode(info, index))
    verified = []
    assert [p for p in check_database(Database.open(path), verified.append) if p.fatal] == []
    # the progress it reports adds up to every region byte, shared ones included
    assert sum(verified) == integrity.region_bytes(Database.open(path)) == 4 * 2 * ((1 << 20) + 4096)
    pool_chunks = (1 << 20) // CHUNK
    pool_decodes = [p for p in decoded if p.parent.name == "prologue" and "7f0000000000" in p.name]
    assert len(pool_decodes) == pool_chunks, "the shared pool is decoded once, not once per instance"

    # Damage one stored chunk of the pool (its compressed bytes): every instance is blamed.
    db = Database.open(path)
    first = next(db.instances())
    chunk = first.path / "prologue" / first.regions[0].name / "c" / "3"
    assert os.stat(chunk).st_nlink == 1 + 4  # the store entry and four instances
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    os.chmod(chunk, 0o644)
    with open(chunk, "r+b") as f:  # in place: every hard link sees it
        f.write(data)
    blamed = {p.where.split()[0] for p in check_database(Database.open(path)) if p.fatal}
    assert blamed == {i.id for i in db.instances()}


def test_check_decodes_a_file_linked_into_an_array_of_another_chunk_size(tmp_path):
    """A hostile database links one chunk file into an array of another chunk size, at a
    last chunk of the same length: the reader refuses it there (the frame declares the
    other size), so check must decode it there too, not reuse the first array's result."""
    path = tmp_path / "d.rdb"
    tail = np.arange(1000, dtype=np.uint8)
    info = RecordingInfo(vas_base=BASE, vas_size=1 << 30)
    sizes = {CHUNK: CHUNK, CHUNK // 2: 3 * (CHUNK // 2)}  # chunk size -> bytes before the tail
    for block, (chunk, head) in enumerate(sizes.items(), start=1):
        data = np.concatenate([np.full(head, block, np.uint8), tail])
        with DatabaseWriter.create(path, info, chunk_size=chunk) as writer:
            writer.add_kernel(KernelRecord(STATIC, "_Z3barv", IR, "bar()"))
            writer.add_instance(STATIC, InstanceRecord((1, 1, 1), (block, 1, 1), b"\0" * 8,
                                                       (Region("heap", BASE, data),),
                                                       (Region("heap", BASE, data),)))
    first, second = sorted(Database.open(path).instances(), key=lambda i: i.block)
    name = first.regions[0].name
    mine, theirs = first.path / "prologue" / name / "c" / "1", second.path / "prologue" / name / "c" / "3"
    assert os.stat(mine).st_ino != os.stat(theirs).st_ino
    theirs.unlink()
    os.link(mine, theirs)
    with pytest.raises(DatabaseError):  # what a reader gets
        second.prologue(name)
    problems, sums = [], {}
    for inst in (first, second):  # the good array first: its chunk is the cached one
        check_instance(problems, inst, sums)
    assert {p.where.split()[0] for p in problems if p.fatal} == {second.id}
    blamed = {p.where.split()[0] for p in check_database(Database.open(path)) if p.fatal}
    assert blamed == {second.id}


def test_writers_racing_to_store_the_same_bytes_share_one_inode(tmp_path):
    """Threads (as processes would) storing one chunk at the same moment: the first entry
    wins and everyone links to it. A replacing rename would leave chunks linked to an
    entry no longer in the store: the same bytes on disk twice, and shared no more."""
    import threading

    store = content_store.store_dir(tmp_path)
    blob, name = os.urandom(1 << 16), "ab" + "0" * 30 + "-10000-1"
    targets = [tmp_path / f"t{i}" for i in range(16)]
    start = threading.Barrier(len(targets))

    def store_one(target):
        start.wait()
        assert content_store.add(store, name, blob, target)

    threads = [threading.Thread(target=store_one, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entry = store / name[:2] / name
    assert {t.stat().st_ino for t in targets} == {entry.stat().st_ino}
    assert entry.stat().st_nlink == len(targets) + 1 and entry.read_bytes() == blob
    assert sorted(p.name for p in entry.parent.iterdir()) == [name]  # no temporary left


def test_recorder_threads_storing_equal_chunks_share_one_inode(tmp_path):
    """The C++ writer's pipeline threads encode chunks in parallel: 512 equal chunks of one
    region are stored once, whichever threads got to them at the same moment."""
    path = tmp_path / "equal.rdb"
    w = native.SnapshotWriter(str(path), BASE, 1 << 30, "NVIDIA H100", "9.0", ["./app"], "diff", CHUNK, 1,
                              threads=8)
    w.add_kernel(STATIC, "_Z3barv", "bar()", IR, [], [])
    pool = np.tile(np.random.default_rng(3).integers(0, 256, CHUNK, dtype=np.uint8), 512)
    dyn, _ = w.add_instance(STATIC, (1, 1, 1), (1, 1, 1), 0, b"", [("heap", BASE, "", pool, pool)])
    w.flush()
    assert w.stats()["deduplicated_chunks"] == 512 - 1  # the epilogue changed nothing: no deltas
    w.close()
    inst = Database.open(path).kernel(STATIC).instance(dyn)
    folder = inst.path / "prologue" / inst.regions[0].name / "c"
    assert len({f.stat().st_ino for f in folder.iterdir()}) == 1
    assert np.array_equal(inst.prologue(inst.regions[0].name), pool)
