"""The recorder's snapshot pipeline without a GPU: host memory stands in for the device.

``_native.SnapshotWriter`` runs the same C++ pipeline as ``mneme record`` (staging blocks
under a host-memory cap, background threads that diff, compress, write and commit), with
copies that are plain memcpy. What it writes must be what the synchronous writer writes,
byte for byte, and what the Python reader reads.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import zarr
from db_support import assert_regions_read_back, random_regions
from mneme.replay.db import Database
from mneme.replay.db.integrity import check_database

native = pytest.importorskip("mneme.runtime._native")

BASE = 0x200000000000
STATIC = "feedc0de00000042"
IR = b"BC\xc0\xde" + bytes(range(256)) * 3
CHUNK = 64 << 10


def regions_for(rng, count, max_size=600_000):
    """Regions of every shape: empty, below a chunk, several chunks with a short last one;
    epilogues unchanged, sparsely changed or rewritten."""

    def size_of(i):
        if i % 4 == 0:
            return int(rng.integers(1, max_size))
        return int(rng.choice([0, 100, CHUNK, int(rng.integers(1, max_size))]))

    regions = random_regions(rng, count, base=BASE, size_of=size_of,
                             gap_of=lambda: int(rng.integers(1, 1 << 20)) // 256 * 256 + 256)
    rng.shuffle(regions)  # the writer orders them by address
    return regions


def new_writer(path, cls=None, fmt="diff", **options):
    cls = cls or native.SnapshotWriter
    extra = {} if cls is native.RecordingWriter else options
    w = cls(str(path), BASE, 1 << 30, "NVIDIA H100", "9.0", ["./app"], fmt, CHUNK, 1, **extra)
    w.add_kernel(STATIC, "_Z3fooPfi", "foo(float*, int)", IR,
                 [(8, 8, 0, True, False), (4, 4, 8, False, False)], [])
    return w


def write_many(w, seed=7, count=12, regions=5, max_size=600_000):
    rng = np.random.default_rng(seed)
    written = {}
    for k in range(count):
        regs = regions_for(rng, regions, max_size)
        args = rng.integers(0, 256, 12, dtype=np.uint8).tobytes()
        dyn, new = w.add_instance(STATIC, (k + 1, 2, 1), (128, 1, 1), 16 * k, args, regs)
        assert new
        written[dyn] = regs
    return written


def assert_reads_back(path, written):
    db = Database.open(path)
    kernel = db.kernel(STATIC)
    assert {i.dynamic_hash for i in kernel.instances()} == set(written)
    plain = zarr.open_group(str(path), mode="r")
    for dyn, regions in written.items():
        inst = kernel.instance(dyn)
        node = plain[f"kernels/{STATIC}/instances/{dyn}"]
        assert_regions_read_back(inst, node, regions)
    assert [p for p in check_database(db) if p.fatal] == []
    staging = path / ".mneme" / "staging"
    assert not staging.exists() or list(staging.iterdir()) == []


def tree(path: Path) -> dict[str, bytes]:
    """Every file of a database by relative path; instance metadata without its timestamp."""
    out = {}
    for f in sorted(path.rglob("*")):
        rel = str(f.relative_to(path))
        if not f.is_file() or rel.startswith(".mneme") or rel == "zarr.json":
            continue
        data = f.read_bytes()
        if f.name == "zarr.json" and b'"kind": "instance"' in data:
            doc = json.loads(data)
            doc["attributes"]["mneme"].pop("recorded")
            data = json.dumps(doc, sort_keys=True).encode()
        out[rel] = data
    return out


@pytest.mark.parametrize("fmt", ["diff", "bytes", "best"])
def test_background_pool_writes_what_the_reader_reads(tmp_path, fmt):
    w = new_writer(tmp_path / "p.rdb", fmt=fmt, threads=4)
    written = write_many(w)
    w.flush()
    stats = w.stats()
    assert stats["instances"] == stats["committed"] == len(written)
    assert stats["snapshot_bytes"] == sum(2 * r[3].size for regs in written.values() for r in regs)
    assert w.error() == ""
    assert_reads_back(tmp_path / "p.rdb", written)


@pytest.mark.parametrize("fmt", ["diff", "best"])
@pytest.mark.parametrize("host_memory", [0, 2 * CHUNK])
def test_same_files_as_the_synchronous_writer(tmp_path, fmt, host_memory):
    """Chunk files and metadata are byte-identical to RecordingWriter.add_instance's, with
    the prologue kept in staging (large cap) or read back from its chunk files (tiny cap)."""
    sync = new_writer(tmp_path / "sync.rdb", native.RecordingWriter, fmt)
    write_many(sync, count=6)
    piped = new_writer(tmp_path / "pipe.rdb", fmt=fmt, threads=3, host_memory=host_memory)
    write_many(piped, count=6)
    piped.close()
    a, b = tree(tmp_path / "sync.rdb"), tree(tmp_path / "pipe.rdb")
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []


def test_back_pressure_streams_snapshots_larger_than_the_cap(tmp_path):
    cap = 2 * CHUNK  # the smallest cap: two staging blocks
    w = new_writer(tmp_path / "tiny.rdb", threads=2, host_memory=cap)
    assert w.host_memory == cap
    written = write_many(w, count=5, regions=4, max_size=3_000_000)  # ~45 chunks per side
    w.flush()
    stats = w.stats()
    assert stats["peak_staged_bytes"] <= cap and stats["staging_bytes"] <= cap
    assert stats["snapshot_bytes"] > 20 * cap
    assert stats["committed"] == 5
    assert_reads_back(tmp_path / "tiny.rdb", written)
    line = w.stats_line()
    assert line.startswith("mneme record: stats instances=5 ")
    fields = dict(kv.split("=") for kv in line.split()[3:])
    assert int(fields["peak_staged_bytes"]) <= cap and int(fields["host_memory_bytes"]) == cap


def test_staging_grows_toward_the_snapshot_in_the_background(tmp_path):
    """A 2 x 40 MiB snapshot: the first 64 MiB slab is allocated at once, the rest by one
    background thread while copies proceed; the pool then holds the whole capture."""
    w = new_writer(tmp_path / "g.rdb", threads=2, host_memory=1 << 30)
    size = 40 << 20
    regions = []
    for i in range(2):
        before = np.zeros(size, dtype=np.uint8)
        before[:: 1 << 16] = i + 1
        after = before.copy()
        after[12345 :: 1 << 20] ^= 0x5A
        regions.append(("heap", BASE + i * (64 << 20), "", before, after))
    dyn, _ = w.add_instance(STATIC, (1, 1, 1), (1, 1, 1), 0, b"\x03" * 12, regions)
    w.flush()
    stats = w.stats()
    assert stats["staging_bytes"] == 2 * 2 * size and stats["pinned_bytes"] == 0  # plain memory here
    assert stats["peak_staged_bytes"] <= stats["staging_bytes"]
    w.close()
    assert_reads_back(tmp_path / "g.rdb", {dyn: regions})


def _wait_for_staging(w, want: int) -> None:
    deadline = time.monotonic() + 30
    while w.stats()["staging_bytes"] < want and time.monotonic() < deadline:
        time.sleep(0.01)


def test_staging_reserved_ahead_is_there_for_the_first_snapshot(tmp_path):
    """What the recorder does as the application allocates: the pool grows in the
    background, an eighth of the cap ahead before any snapshot (a framework's pool is
    allocated whole and mostly never staged), four times the largest snapshot staged after
    one; the snapshot after it waits for no allocation."""
    cap = 256 << 20
    w = new_writer(tmp_path / "pre.rdb", threads=2, host_memory=cap)
    assert w.reserve_lead == cap // 8
    w.reserve(1 << 30)  # more than the cap and the lead: the lead wins
    _wait_for_staging(w, cap // 8)
    assert w.stats()["staging_bytes"] == cap // 8
    w.reserve(1 << 20)  # already there: nothing changes
    size = 12 << 20  # both sides staged at once: 24 MiB, within the 32 MiB ahead
    before = np.random.default_rng(4).integers(0, 256, size, dtype=np.uint8)
    regions = [("heap", BASE, "", before, before ^ 1)]
    dyn, _ = w.add_instance(STATIC, (1, 1, 1), (1, 1, 1), 0, b"\x04" * 12, regions)
    w.flush()
    stats = w.stats()
    assert stats["staging_bytes"] == cap // 8 and stats["alloc_s"] == 0
    # where the background time went: every stage was timed; the random prologue chunks
    # are all new, the epilogue's deltas (every byte ^ 1) all one chunk stored once
    assert stats["encode_s"] > 0 and stats["hash_s"] > 0 and stats["crc_s"] > 0 and stats["write_s"] > 0
    assert stats["delta_s"] > 0
    assert stats["deduplicated_chunks"] == size // CHUNK - 1
    # after a snapshot the lead follows what snapshots stage
    lead = 4 * stats["peak_staged_bytes"]
    assert lead > cap // 8 and w.reserve_lead == lead
    w.reserve(1 << 30)
    _wait_for_staging(w, lead)
    assert w.stats()["staging_bytes"] == lead
    w.close()
    assert_reads_back(tmp_path / "pre.rdb", {dyn: regions})


def test_a_pool_of_zeros_stages_only_what_it_copies(tmp_path):
    """A snapshot's staging grows toward the chunks it copies, not toward its regions'
    size: a 128 MiB pool with one live chunk (JAX's, at 106 GB, grew the staging to its
    cap, 33.8 GB page-locked for 38 MB ever staged)."""
    w = new_writer(tmp_path / "pool.rdb", threads=2, host_memory=1 << 30)
    size = 128 << 20
    before = np.zeros(size, np.uint8)
    before[:CHUNK] = 7
    after = before.copy()
    after[5] = 9
    dyn, _ = w.add_instance(STATIC, (1, 1, 1), (1, 1, 1), 0, b"\x05" * 12,
                            [("heap", BASE, "", before, after)])
    w.flush()
    stats = w.stats()
    assert stats["zero_bytes"] == size - CHUNK
    assert stats["staging_bytes"] <= 64 << 20  # one slab, where it grew to 2 x 128 MiB
    w.close()
    assert_reads_back(tmp_path / "pool.rdb", {dyn: [("heap", BASE, "", before, after)]})


@pytest.mark.parametrize("fmt", ["diff", "bytes", "best"])
def test_unchanged_epilogue_chunks_are_not_copied(tmp_path, fmt):
    """Digests at the source (the device for the recorder; chunk_digest on the host here)
    before and after the kernel: a diff epilogue skips the chunks that did not change,
    and what reads back is still every byte; the other formats copy everything."""
    w = new_writer(tmp_path / f"{fmt}.rdb", fmt=fmt, threads=2)
    rng = np.random.default_rng(11)
    size = 10 * CHUNK + 123  # ten whole chunks and a short one
    before = rng.integers(0, 256, size, dtype=np.uint8)
    after = before.copy()
    after[3 * CHUNK + 5] ^= 1  # one chunk changes
    after[-1] ^= 0xFF  # and the short last one
    same = rng.integers(0, 256, 5000, dtype=np.uint8)  # a region the kernel leaves alone
    regions = [("heap", BASE, "", before, after), ("heap", BASE + (16 << 20), "", same, same.copy())]
    dyn, _ = w.add_instance(STATIC, (1, 1, 1), (1, 1, 1), 0, b"\x05" * 12, regions)
    w.flush()
    stats = w.stats()
    unchanged = 9 * CHUNK + 5000 if fmt == "diff" else 0
    assert stats["unchanged_bytes"] == unchanged
    assert stats["snapshot_bytes"] == 2 * (size + 5000)
    w.close()
    assert_reads_back(tmp_path / f"{fmt}.rdb", {dyn: regions})


def test_repeats_count_while_in_flight_and_after_commit(tmp_path):
    w = new_writer(tmp_path / "r.rdb", threads=2)
    rng = np.random.default_rng(1)
    regions = regions_for(rng, 3)
    first = w.add_instance(STATIC, (1, 1, 1), (32, 1, 1), 0, b"\x01" * 12, regions)
    again = w.add_instance(STATIC, (1, 1, 1), (32, 1, 1), 0, b"\x01" * 12, regions)
    assert first[1] and again == (first[0], False)
    w.flush()
    assert w.add_instance(STATIC, (1, 1, 1), (32, 1, 1), 0, b"\x01" * 12, regions) == (first[0], False)
    w.close()
    inst = Database.open(tmp_path / "r.rdb").kernel(STATIC).instance(first[0])
    assert inst.occurrences == 3


def test_repeats_after_the_commit_wait_in_memory_until_a_flush(tmp_path):
    """A repeat never waits for the disk (the application's launch goes on): the counts of
    committed instances, and of instances an earlier recording holds, are written at the
    flush (at exit in the recorder)."""
    db = tmp_path / "m.rdb"
    rng = np.random.default_rng(2)
    regions = regions_for(rng, 2)
    w = new_writer(db, threads=2)
    dyn, _ = w.add_instance(STATIC, (1, 1, 1), (32, 1, 1), 0, b"\x02" * 12, regions)
    w.flush()
    meta = db / "kernels" / STATIC / "instances" / dyn / "zarr.json"
    written = meta.stat().st_mtime_ns
    for _ in range(50):
        assert w.add_instance(STATIC, (1, 1, 1), (32, 1, 1), 0, b"\x02" * 12, regions) == (dyn, False)
    assert meta.stat().st_mtime_ns == written  # nothing written per repeat
    assert Database.open(db).kernel(STATIC).instance(dyn).occurrences == 1
    w.flush()
    assert Database.open(db).kernel(STATIC).instance(dyn).occurrences == 51
    w.close()
    # a second recording into the database: its launches of the same instance count too
    again = new_writer(db, threads=1)
    for _ in range(7):
        assert again.add_instance(STATIC, (1, 1, 1), (32, 1, 1), 0, b"\x02" * 12, regions) == (dyn, False)
    again.close()
    assert Database.open(db).kernel(STATIC).instance(dyn).occurrences == 58


def test_destroying_the_writer_flushes(tmp_path):
    w = new_writer(tmp_path / "d.rdb", threads=1)
    written = write_many(w, count=8, max_size=1_500_000)
    del w
    gc.collect()
    assert_reads_back(tmp_path / "d.rdb", written)


def test_an_abandoned_capture_is_never_listed(tmp_path):
    w = new_writer(tmp_path / "a.rdb", threads=2)
    rng = np.random.default_rng(5)
    regions = regions_for(rng, 3)
    specs = [(k, a, b.size, s) for k, a, s, b, _ in regions]
    capture = w.begin_instance(STATIC, (1, 1, 1), (64, 1, 1), 0, b"\x02" * 12, specs)
    w.capture_prologue(capture, [r[3] for r in regions])
    w.abandon(capture)  # the launch failed
    w.flush()
    assert list(Database.open(tmp_path / "a.rdb").instances()) == []
    # the same launch, captured again later, is recorded
    capture = w.begin_instance(STATIC, (1, 1, 1), (64, 1, 1), 0, b"\x02" * 12, specs)
    assert capture.dynamic_hash
    w.capture_prologue(capture, [r[3] for r in regions])
    with pytest.raises(Exception, match="one buffer per region"):
        w.capture_epilogue(capture, [])
    w.capture_epilogue(capture, [r[4] for r in regions])
    w.close()
    assert_reads_back(tmp_path / "a.rdb", {capture.dynamic_hash: regions})


CRASHING = textwrap.dedent("""
    import os, sys
    import numpy as np
    sys.path.insert(0, {here!r})
    from test_snapshot_pipeline import new_writer, write_many
    w = new_writer({path!r}, threads=1)
    w.install_crash_handler(120.0)
    write_many(w, seed=11, count=6, regions=3, max_size=4_000_000)
    print("uncommitted", w.uncommitted, flush=True)
    os.abort()
""")


def test_a_fatal_signal_commits_the_captured_instances(tmp_path):
    path = tmp_path / "crash.rdb"
    script = CRASHING.format(here=str(Path(__file__).parent), path=str(path))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == -signal.SIGABRT, result.stderr
    assert "uncommitted" in result.stdout
    if int(result.stdout.split()[-1]) > 0:
        assert "committing" in result.stderr
    # the same instances, regenerated from the seed, are all there byte for byte
    probe = new_writer(tmp_path / "probe.rdb", threads=1)
    written = write_many(probe, seed=11, count=6, regions=3, max_size=4_000_000)
    probe.close()
    assert_reads_back(path, written)


def test_sizes_and_the_default_cap():
    assert native.parse_size("64M") == 64 << 20
    assert native.parse_size("0.5G") == 1 << 29
    assert native.parse_size("8GiB") == 8 << 30
    assert native.parse_size("123") == 123
    for bad in ("", "x", "-1G", "12Q"):
        assert native.parse_size(bad) == 0
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert native.default_host_memory() == min(32 << 30, ram // 4)


@pytest.mark.parametrize("retain", [True, False])
def test_prologue_chunks_the_database_holds_are_linked_not_copied(tmp_path, retain):
    """A memory pool (JAX takes 75 % of the GPU at start) is mostly bytes an earlier
    snapshot stored: a later prologue links those chunks (their digest at the source is
    known) and copies only the ones written since; epilogues diff against the linked
    prologue, read back from its chunk file. Everything reads back byte for byte."""
    # a cap of four blocks keeps no prologue in staging for the epilogue (read back instead)
    w = new_writer(tmp_path / "pool.rdb", threads=2, **({} if retain else {"host_memory": 4 * CHUNK}))
    rng = np.random.default_rng(5)
    size = 12 * CHUNK + 77
    pool = rng.integers(0, 256, size, dtype=np.uint8)
    first_after = pool.copy()
    first_after[2 * CHUNK:3 * CHUNK] ^= 0x5A  # the first kernel writes chunk 2
    first = w.add_instance(STATIC, (1, 1, 1), (1, 1, 1), 0, b"\x01" * 12,
                           [("heap", BASE, "", pool, first_after)])[0]
    w.flush()
    assert w.stats()["known_bytes"] == 0  # nothing was stored before it
    # The second launch sees the first one's output: chunk 2 is new, the others known.
    second_after = first_after.copy()
    second_after[7 * CHUNK + 3] ^= 1  # it writes into a linked chunk
    second_after[-1] ^= 0xFF  # and into the short last one
    second = w.add_instance(STATIC, (1, 1, 1), (1, 1, 1), 0, b"\x02" * 12,
                            [("heap", BASE, "", first_after, second_after)])[0]
    w.flush()
    stats = w.stats()
    assert stats["known_bytes"] == size - CHUNK
    assert stats["snapshot_bytes"] == 4 * size  # the snapshots hold every byte all the same
    w.close()
    assert_reads_back(tmp_path / "pool.rdb", {first: [("heap", BASE, "", pool, first_after)],
                                              second: [("heap", BASE, "", first_after, second_after)]})
    assert not [p for p in check_database(Database.open(tmp_path / "pool.rdb")) if p.fatal]


def test_a_store_entry_at_the_link_limit_gets_a_next_generation(tmp_path):
    """A pool of one repeated chunk (not zeros: those are not stored) is one store entry
    that every snapshot links once a chunk; ext4 allows 65,000 links a file. Past that the
    chunks link to a next generation of the entry (a copy of its bytes, ``<name>.1``),
    not a file each, and everything reads back and checks."""
    limit = os.pathconf(tmp_path, "PC_LINK_MAX")
    if limit > 100_000:
        pytest.skip(f"this file system allows {limit} links a file: the limit is not reached cheaply")
    chunk = 512  # small chunks: the limit in a few megabytes
    chunks = limit // 2 + 1000
    w = native.SnapshotWriter(str(tmp_path / "z.rdb"), BASE, 1 << 30, "NVIDIA H100", "9.0", ["./app"], "diff",
                              chunk, 1, threads=2)
    w.add_kernel(STATIC, "_Z3fooPfi", "foo(float*, int)", IR, [(8, 8, 0, True, False), (4, 4, 8, False, False)], [])
    pool = np.full(chunks * chunk, 0xA5, np.uint8)
    written = {}
    for i in range(2):  # two snapshots of the pool: past the limit in links
        after = pool.copy()
        after[i * chunk] ^= 1
        regions = [("heap", BASE, "", pool, after)]
        written[w.add_instance(STATIC, (1, 1, 1), (1, 1, 1), 0, bytes([i + 1]) * 12, regions)[0]] = regions
        w.flush()
    assert w.stats()["known_bytes"] == chunks * chunk  # the second prologue linked whole
    w.close()
    links = {p.name: p.stat().st_nlink for p in (tmp_path / "z.rdb" / ".mneme" / "chunks").rglob("*") if p.is_file()}
    same = [name for name in links if name.split("-")[0].split(".")[0] == max(links, key=links.get).split("-")[0]]
    assert len(same) == 2 and any(".1-" in name for name in same), links  # the entry and one generation
    # Every chunk file is there and verified against its instance's checksums, prologue
    # and epilogue (reading 100,000 small chunks back through zarr too would take minutes).
    db = Database.open(tmp_path / "z.rdb")
    assert {i.dynamic_hash for i in db.kernel(STATIC).instances()} == set(written)
    assert not [p for p in check_database(db) if p.fatal]


@pytest.mark.parametrize("fmt", ["diff", "best", "bytes"])
@pytest.mark.parametrize("retain", [True, False])
@pytest.mark.parametrize("digests", [True, False])
def test_zero_prologue_chunks_are_not_stored(tmp_path, fmt, retain, digests):
    """Prologue arrays are sparse (``"sparse": true``): a chunk of zeros (most of a
    framework's fresh memory pool) is neither stored nor linked. The digest pass at the
    source finds it (on the device it is then not copied either); without digests it is
    dropped once copied. The region's CRC-32C still covers every byte, and an epilogue
    chunk XORs against zeros, the prologue kept in staging or (not retained) with no chunk
    file to read back. RecordingWriter.add_instance writes the same files."""
    import crc32c

    path = tmp_path / "z.rdb"
    w = new_writer(path, fmt=fmt, threads=2, digests=digests, **({} if retain else {"host_memory": 4 * CHUNK}))
    size = 10 * CHUNK + 123  # ten whole chunks and a short one
    before = np.zeros(size, np.uint8)
    before[3 * CHUNK + 17] = 9  # chunk 3 holds something
    before[-1] = 1  # and the short last one
    after = before.copy()
    after[5 * CHUNK:5 * CHUNK + 1000] = 7  # the kernel writes into a zero chunk
    after[3 * CHUNK + 17] = 0  # and zeroes chunk 3
    left = np.zeros(5000, np.uint8)  # all zero, left alone
    fresh = np.zeros(3000, np.uint8)  # all zero, then written
    regions = [("heap", BASE, "", before, after), ("heap", BASE + (16 << 20), "", left, left.copy()),
               ("heap", BASE + (32 << 20), "", fresh, np.arange(3000, dtype=np.uint8))]
    dyn, _ = w.add_instance(STATIC, (1, 1, 1), (1, 1, 1), 0, b"\x07" * 12, regions)
    w.flush()
    stats = w.stats()
    assert w.error() == ""
    assert stats["zero_bytes"] == 9 * CHUNK + 5000 + 3000
    assert stats["known_bytes"] == 0
    assert stats["snapshot_bytes"] == 2 * (size + 8000)
    assert stats["unchanged_bytes"] == (8 * CHUNK + 123 + 5000 if fmt == "diff" and digests else 0)
    assert f" zero_bytes={9 * CHUNK + 8000} " in w.stats_line()
    w.close()

    node = path / "kernels" / STATIC / "instances" / dyn
    stored = {}
    for address, _ in ((BASE, 0), (BASE + (16 << 20), 1), (BASE + (32 << 20), 2)):
        name = f"r-{address:016x}"
        meta = json.loads((node / "prologue" / name / "zarr.json").read_text())
        assert meta["attributes"] == {"mneme": {"encoding": "bytes", "sparse": True}}
        assert list(meta["attributes"]["mneme"]) == ["encoding", "sparse"]
        epi = json.loads((node / "epilogue" / name / "zarr.json").read_text())
        assert "sparse" not in epi["attributes"]["mneme"]
        c = node / "prologue" / name / "c"
        stored[name] = sorted(int(p.name) for p in c.iterdir()) if c.exists() else []
    assert list(stored.values()) == [[3, 10], [], []]  # only the chunks that are not zero
    # The checksums are those of the full bytes, zeros included.
    meta = json.loads((node / "zarr.json").read_text())["attributes"]["mneme"]
    for record, (_, _, _, b, a) in zip(meta["regions"], regions, strict=True):
        assert record["prologue_crc32c"] == crc32c.crc32c(b.tobytes())
        assert record["epilogue_crc32c"] == crc32c.crc32c(a.tobytes())
    # Plain Zarr reads an absent chunk as its fill value 0: the prologue and the epilogue
    # (for xor-prologue, prologue ^ delta) read back byte for byte.
    plain = zarr.open_group(str(path), mode="r")[f"kernels/{STATIC}/instances/{dyn}"]
    for (_, address, _, b, a) in regions:
        name = f"r-{address:016x}"
        assert np.array_equal(plain[f"prologue/{name}"][:], b)
        delta = plain[f"epilogue/{name}"]
        got = delta[:] if delta.attrs["mneme"]["encoding"] == "bytes" else b ^ delta[:]
        assert np.array_equal(got, a)
    # mneme's reader and check (sparse prologues: packages/mneme-replay, db/chunks.py)
    assert_reads_back(path, {dyn: regions})
    # The synchronous writer stores the same files.
    sync = new_writer(tmp_path / "sync.rdb", native.RecordingWriter, fmt)
    assert sync.add_instance(STATIC, (1, 1, 1), (1, 1, 1), 0, b"\x07" * 12, regions)[0] == dyn
    a, b = tree(tmp_path / "sync.rdb"), tree(path)
    assert a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []


def test_zero_chunks_are_never_linked(tmp_path):
    """Zero chunks are not in the store, so a later prologue does not link to one: a pool
    that stays zero costs no file at all, snapshot after snapshot."""
    path = tmp_path / "pool.rdb"
    w = new_writer(path, threads=2)
    size = 6 * CHUNK
    pool = np.zeros(size, np.uint8)
    dyns = []
    for i in range(3):
        after = pool.copy()
        after[i * CHUNK] = i + 1
        dyns.append(w.add_instance(STATIC, (1, 1, 1), (1, 1, 1), 0, bytes([i + 1]) * 12,
                                   [("heap", BASE, "", pool, after)])[0])
        w.flush()
        pool = after  # the next launch sees this one's output
    stats = w.stats()
    # prologues of 6, 5 and 4 zero chunks (each launch makes one more chunk non-zero)
    assert stats["zero_bytes"] == (6 + 5 + 4) * CHUNK
    assert stats["known_bytes"] == CHUNK  # the third prologue's chunk 0, stored by the second
    w.close()
    instances = path / "kernels" / STATIC / "instances"
    files = {p.relative_to(instances).as_posix() for p in instances.rglob("prologue/*/c/*")}
    assert files == {f"{dyns[1]}/prologue/r-{BASE:016x}/c/0", f"{dyns[2]}/prologue/r-{BASE:016x}/c/0",
                     f"{dyns[2]}/prologue/r-{BASE:016x}/c/1"}
    assert not [p for p in check_database(Database.open(path)) if p.fatal]
