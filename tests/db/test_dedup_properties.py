"""Random deduplicated databases: instances of several kernels share pools of memory
(unchanged or sparsely changed between prologue and epilogue) and own unique bytes, written
in turn by the Python writer and the recorder's C++ writer. Every instance reads back
exactly through mneme's reader and plain zarr-python; shared chunks are on disk once; and
`mneme clean` of one kernel leaves every other instance exact, `check` clean and no store
entry without a user."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from db_support import BASE, assert_regions_read_back
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mneme.cli.main import cli
from mneme.replay.db import (
    Database,
    DatabaseWriter,
    InstanceRecord,
    KernelRecord,
    RecordingInfo,
    Region,
    content_store,
)
from mneme.replay.db.integrity import check_database

native = pytest.importorskip("mneme.runtime._native")

CHUNK = 1024  # many chunks per region, and partial last chunks
KERNELS = ("feedc0de000000a1", "feedc0de000000a2", "feedc0de000000a3")
INFO = RecordingInfo(vas_base=BASE, vas_size=1 << 30)
#: what zstd adds to a stored chunk at most, beyond its raw bytes (frame header, raw block)
FRAME_OVERHEAD = 64


def kernel(static: str) -> KernelRecord:
    return KernelRecord(static, f"_Z1k{static[-2:]}v", b"BC\xc0\xde" + static.encode(), f"k{static[-2:]}()")


@st.composite
def databases(draw):
    """(pools, instances): each instance (kernel index, writer, regions), each region
    (pool index or None for unique bytes, its prologue, its epilogue, how it changed)."""
    sizes = draw(st.lists(st.integers(2 * CHUNK, 6 * CHUNK), min_size=1, max_size=3))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    pools = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    instances = []
    for _ in range(draw(st.integers(2, 6))):
        regions = []
        for _ in range(draw(st.integers(1, 3))):
            pool = draw(st.one_of(st.none(), st.integers(0, len(pools) - 1)))
            before = (pools[pool] if pool is not None
                      else rng.integers(0, 256, draw(st.integers(0, 3 * CHUNK)), dtype=np.uint8))
            after = before.copy()
            change = draw(st.sampled_from(["same", "sparse", "all"]))
            if change == "sparse" and before.size:
                after[rng.integers(0, before.size, 8)] ^= 0x5A
            elif change == "all":
                after = rng.integers(0, 256, before.size, dtype=np.uint8)
            regions.append((pool, before, after, change))
        instances.append((draw(st.integers(0, len(KERNELS) - 1)), draw(st.sampled_from(["python", "c++"])),
                          regions))
    return pools, instances


def write(path, instances) -> list[tuple[str, list]]:
    """Writes every instance with its writer; returns (instance id, regions as
    ``assert_regions_read_back`` takes them) in order."""
    written = []
    for number, (k, how, regions) in enumerate(instances):
        static = KERNELS[k]
        spaced = [("heap", BASE + (i << 24), "", before, after) for i, (_, before, after, _) in enumerate(regions)]
        args = number.to_bytes(8, "little")  # every instance its own
        if how == "python":
            with DatabaseWriter.create(path, INFO, chunk_size=CHUNK) as writer:
                writer.add_kernel(kernel(static))
                record = InstanceRecord(
                    (1, 1, 1), (32, 1, 1), args,
                    tuple(Region(kind, a, before) for kind, a, _, before, _ in spaced),
                    tuple(Region(kind, a, after) for kind, a, _, _, after in spaced))
                dyn, new = writer.add_instance(static, record)
        else:
            writer = native.RecordingWriter(str(path), BASE, 1 << 30, "", "", [], "diff", CHUNK, 1)
            record = kernel(static)
            writer.add_kernel(static, record.name, record.demangled_name, record.ir, [], [])
            dyn, new = writer.add_instance(static, (1, 1, 1), (32, 1, 1), 0, args, spaced)
        assert new
        written.append((f"{static}/{dyn}", spaced))
    return written


def distinct_prologue_chunks(regions_of_all) -> int:
    """Raw bytes of the distinct prologue chunks: what a deduplicated store holds of them."""
    seen: set[bytes] = set()
    for regions in regions_of_all:
        for *_, before, _after in regions:
            for start in range(0, before.size, CHUNK):
                seen.add(before[start:start + CHUNK].tobytes())
    return sum(len(c) + FRAME_OVERHEAD for c in seen)


def chunk_file_bytes(path) -> int:
    """Bytes of the arrays' chunk files on disk, each file (inode) once."""
    inodes = {}
    for chunk in (path / "kernels").rglob("c/*"):
        info = chunk.lstat()
        if chunk.is_file():
            inodes[(info.st_dev, info.st_ino)] = info.st_size
    return sum(inodes.values())


def assert_exact(path, written) -> None:
    db = Database.open(path)
    plain = zarr.open_group(str(path), mode="r")
    for record_id, regions in written:
        static, dyn = record_id.split("/")
        assert_regions_read_back(db.instance(record_id), plain[f"kernels/{static}/instances/{dyn}"], regions)
    assert [p for p in check_database(db) if p.fatal] == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(database=databases())
def test_random_deduplicated_databases_read_back_and_survive_clean(tmp_path_factory, database):
    pools, instances = database
    path = tmp_path_factory.mktemp("dedup") / "d.rdb"
    written = write(path, instances)
    assert_exact(path, written)

    # Shared chunks are on disk once: the chunk files take no more than the distinct
    # prologue chunks plus the epilogues' differences (a few bytes per chunk where nothing
    # or little changed, the whole size where everything did).
    def epilogue_bound(before, change):
        chunks = -(-before.size // CHUNK)
        return chunks * FRAME_OVERHEAD + (before.size if change == "all" else 0)

    epilogues = sum(epilogue_bound(before, change) for _, _, regions in instances
                    for _, before, _, change in regions)
    small_arrays = 64 * (len(written) + len(KERNELS))  # arguments, IR
    assert chunk_file_bytes(path) <= (distinct_prologue_chunks(r for _, r in written) + epilogues
                                      + small_arrays)

    # Clean one kernel: every other instance stays exact and no store entry loses its user.
    used = sorted({record_id.split("/")[0] for record_id, _ in written})
    victim = used[0]
    result = CliRunner().invoke(cli, ["clean", str(path), victim])
    assert result.exit_code == 0, result.output
    kept = [(record_id, regions) for record_id, regions in written if not record_id.startswith(victim)]
    assert_exact(path, kept)
    store = content_store.store_dir(path)
    if store.is_dir():
        entries = [p for sub in store.iterdir() for p in sub.iterdir()]
        assert all(os.lstat(p).st_nlink >= 2 for p in entries), "clean left a store entry nobody uses"
        if not kept:
            assert entries == []
