"""A sparse region replayed on the GPU (docs/replay.md, sparse regions): a pool of 128 MiB
whose only live bytes end where its first zero range begins. The zero ranges are mapped,
verified against zeros in one launch each, and filled again by a full reset only when a
launch may have written them and no verification found them still zero.

Run on the GPU host (``MNEME_PREBUILT_BITCODE`` holding replay_kernels.bc where clang-22
is missing); skipped by the ``device`` fixture without a CUDA driver.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from mneme.replay.db import Database, DatabaseWriter, InstanceRecord
from mneme.replay.engine import ReplayConfig, ReplaySession, Tolerance
from mneme.replay.engine.sparse_regions import MIN_ZERO_BYTES
from mneme.replay.jit import CompileConfig
from replay_support import (
    BASE,
    INFO,
    KERNELS,
    MIB2,
    compile_bitcode,
    heap,
    kernel_record,
    static_hash,
)

pytestmark = pytest.mark.gpu

KERNEL = "_Z13add_uncheckedPff"
POOL = BASE + 128 * MIB2  # a pool of 128 MiB, granule-aligned
POOL_BYTES = 128 << 20
N, THREADS = 1024, 256
DATA = POOL + MIB2 - 4 * N  # the data ends at the first granule's end: zeros after it


@pytest.fixture(scope="module")
def pool_instance(tmp_path_factory):
    work = tmp_path_factory.mktemp("sparse-replay")
    bitcode = compile_bitcode(KERNELS / "replay_kernels.cu", work / "replay_kernels.bc")
    before = np.zeros(POOL_BYTES // 4, np.float32)
    at = (DATA - POOL) // 4
    before[at:at + N] = np.arange(1, N + 1, dtype=np.float32)
    after = before.copy()
    after[at:at + N] += np.float32(0.5)
    record = InstanceRecord(grid=(N // THREADS, 1, 1), block=(THREADS, 1, 1),
                            args=struct.pack("<Qf4x", DATA, 0.5),
                            prologue=(heap(POOL, before),), epilogue=(heap(POOL, after),))
    with DatabaseWriter.create(work / "pool.rdb", INFO, chunk_size=1 << 20) as writer:
        writer.add_kernel(kernel_record(bitcode, KERNEL, "add_unchecked(float*, float)"))
        writer.add_instance(static_hash(KERNEL), record)
    return Database.open(work / "pool.rdb").instance(static_hash(KERNEL))


def test_a_stray_write_into_the_zero_range_fails_and_the_next_replay_starts_from_zeros(device, pool_instance):
    quick = ReplayConfig(iterations=3, warmup=1, determinism_runs=0)
    with ReplaySession(pool_instance, device=device) as session:
        first = session.run(CompileConfig(), quick)
        assert first.verified, first.summary()
        image = session.image()
        [(name, parts)] = image.parts.items()
        assert sum(hi - lo for lo, hi in parts.zero) >= MIN_ZERO_BYTES
        assert list(parts.live) == [(0, MIB2)]  # the data's granule only
        assert image.zeros_clean  # verified after the last launch: no fill needed next
        # twice the recorded grid: the second half writes 0.5 past the data, into zeros
        stray = session.run(CompileConfig(), ReplayConfig(iterations=1, warmup=0, determinism_runs=0,
                                                          grid=(2 * N // THREADS, 1, 1)))
        assert not stray.verified
        [mismatch] = stray.mismatches
        # 0.5f is 0x3f000000: one byte of each float differs, the first at offset 3
        assert (mismatch.region, mismatch.address, mismatch.first_offset) == (name, POOL + MIB2, 3)
        assert mismatch.count == N
        assert not image.zeros_clean
        again = session.run(CompileConfig(), quick)  # the full reset filled the zeros again
        assert again.verified, again.summary()


def test_a_tolerance_never_stands_for_zeros(device, pool_instance):
    """A zero range compared with a float tolerance passes small values a launch may have
    left there: such a verification does not spare the next fill."""
    [region] = pool_instance.regions
    tolerant = ReplayConfig(iterations=3, warmup=1, determinism_runs=0,
                            tolerances={region.name: Tolerance("float32", rtol=1e-3)})
    with ReplaySession(pool_instance, device=device) as session:
        result = session.run(CompileConfig(), tolerant)
        assert result.verified, result.summary()
        assert not session.image().zeros_clean
