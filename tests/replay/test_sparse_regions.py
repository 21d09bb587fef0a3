"""Sparse regions (engine/sparse_regions.py): a region whose prologue stores only its
non-zero chunks is split into live ranges (chunks stored on either side) and zero ranges,
from the chunk files present; pristine copies and the per-iteration reset work on the live
pieces only."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from mneme.replay.db import Database, DatabaseWriter, InstanceRecord, Region
from mneme.replay.engine import RegionCheck, ReplayConfigError, Tolerance, sparse_regions
from mneme.replay.engine.reset_plan import written_copies
from mneme.replay.engine.sparse_regions import ZERO_BUFFER_BYTES, region_parts, subtract
from mneme.replay.engine.verify_kernels import verification_ir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "db"))
from db_support import BASE, INFO, STATIC, kernel_record  # noqa: E402

CHUNK = 256 << 10
CHUNKS = 32
ARGS = bytes(16)


def _pool(path: Path, epilogue_format: str = "diff"):
    """A pool of 32 chunks as a framework preallocates it: one buffer written before the
    launch (chunk 3), one the launch writes (chunk 10, zero before), a small input far
    apart (chunk 30); the rest never written."""
    before = np.zeros(CHUNKS * CHUNK, np.uint8)
    before[3 * CHUNK + 100 : 3 * CHUNK + 5000] = 7
    before[30 * CHUNK + 1] = 1
    after = before.copy()
    after[10 * CHUNK : 10 * CHUNK + 64] = 9
    with DatabaseWriter.create(path, INFO, chunk_size=CHUNK, epilogue_format=epilogue_format) as writer:
        writer.add_kernel(kernel_record())
        dyn, _ = writer.add_instance(STATIC, InstanceRecord((8, 1, 1), (128, 1, 1), ARGS,
                                                            (Region("heap", BASE, before),),
                                                            (Region("heap", BASE, after),)))
    instance = Database.open(path).kernel(STATIC).instance(dyn)
    return instance, before, after


@pytest.fixture
def split(tmp_path, monkeypatch):
    """The pool's instance, region, parts (chunk-aligned), bytes before and after."""
    monkeypatch.setattr(sparse_regions, "MIN_ZERO_BYTES", CHUNK)
    instance, before, after = _pool(tmp_path / "p.rdb")
    (region,) = instance.regions
    parts = region_parts(instance, region, CHUNK)
    assert parts is not None
    return instance, region, parts, before, after


def test_a_pool_splits_into_the_chunks_either_side_stored_and_zeros(split):
    instance, region, parts, before, after = split
    assert parts.live == ((3 * CHUNK, 4 * CHUNK), (10 * CHUNK, 11 * CHUNK), (30 * CHUNK, 31 * CHUNK))
    assert parts.zero == ((0, 3 * CHUNK), (4 * CHUNK, 10 * CHUNK), (11 * CHUNK, 30 * CHUNK),
                          (31 * CHUNK, 32 * CHUNK))
    assert parts.live_bytes + parts.zero_bytes == region.size
    # what the split relies on: the zero ranges hold zeros on both sides
    for lo, hi in parts.zero:
        assert not before[lo:hi].any() and not after[lo:hi].any()
        assert not instance.prologue(region.name, lo, hi).any()
    # live ranges widen to the mapping granularity, clamped to the region
    wide = region_parts(instance, region, 4 * CHUNK)
    assert wide is not None and wide.live == ((0, 4 * CHUNK), (8 * CHUNK, 12 * CHUNK), (28 * CHUNK, 32 * CHUNK))


def test_small_savings_and_dense_epilogues_keep_a_region_whole(tmp_path, monkeypatch):
    instance, _, _ = _pool(tmp_path / "p.rdb")
    (region,) = instance.regions
    assert region_parts(instance, region, CHUNK) is None  # 8 MiB: below MIN_ZERO_BYTES
    monkeypatch.setattr(sparse_regions, "MIN_ZERO_BYTES", CHUNK)
    stored_whole, _, _ = _pool(tmp_path / "b.rdb", epilogue_format="bytes")
    (region,) = stored_whole.regions
    assert region_parts(stored_whole, region, CHUNK) is None  # every epilogue chunk stored


def test_pristine_pieces_skip_zero_ranges_and_the_reset_finds_its_piece(split):
    instance, region, parts, _, _ = split
    holes = [(BASE + lo, hi - lo) for lo, hi in parts.zero]
    pieces = subtract(BASE, CHUNKS * CHUNK, holes)
    assert pieces == [(BASE + lo, hi - lo) for lo, hi in parts.live]
    pristine, src = [], 0x9000_0000_0000
    for address, size in pieces:  # as DeviceImage lays them out: one compact copy
        pristine.append((address, src, size))
        src += size
    # the launch changed chunk 10 only: one copy, from the second piece's pristine bytes
    assert written_copies(instance, [region], pristine) == [(BASE + 10 * CHUNK, pristine[1][1], CHUNK)]


def test_a_zero_range_is_one_check_that_reads_the_zero_buffer_over_and_over():
    # one launch per zero range however long: the kernels read expected[i & mask]
    size = 100 << 30  # a 100 GiB range
    raw = RegionCheck("pool", 1 << 40, 1 << 41, size, Tolerance(), 1 << 40, ZERO_BUFFER_BYTES)
    assert raw.plan.itemsize == 8 and raw.plan.count == size // 8
    assert raw.expected_mask == ZERO_BUFFER_BYTES // 8 - 1
    typed = RegionCheck("pool", 1 << 40, 1 << 41, size, Tolerance("float32", rtol=1e-3), 1 << 40,
                        ZERO_BUFFER_BYTES)
    assert typed.plan.typed and typed.expected_mask == ZERO_BUFFER_BYTES // 4 - 1
    whole = RegionCheck("pool", 1 << 40, 1 << 41, size, Tolerance(), 1 << 40)
    assert whole.expected_mask == 2**64 - 1  # a region against its own recorded bytes
    with pytest.raises(ValueError, match="power of two"):
        RegionCheck("pool", 1 << 40, 1 << 41, size, Tolerance(), 1 << 40, 3 << 20)
    with pytest.raises(ReplayConfigError):  # the tolerance rules still apply
        RegionCheck("pool", 1 << 40, 1 << 41, 6, Tolerance("float32", rtol=1e-3), 1 << 40, 1 << 20)
    ir = verification_ir()
    assert ir.count("and i64 %i, %emask") == ir.count("@mneme_verify_")


def test_subtract_leaves_the_pieces_outside_the_holes():
    assert subtract(0, 100, [(10, 10), (50, 60)]) == [(0, 10), (20, 30)]
    assert subtract(0, 100, []) == [(0, 100)]
