"""Restore's device path without a GPU: the nvCOMP binding's loading and its one-line
failures, the chunk-file helpers it reads through, and its batch planning, checked on real
stored arrays by applying the plan with the host's decoder (test_device_restore_gpu.py
runs it on the device)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from mneme.replay.db.chunks import (
    read_array_info,
    read_chunk_file,
    read_chunk_into,
    read_range,
    stored_chunk_sizes,
    write_array,
)
from mneme.replay.db.codec import check_frame, decode_chunk
from mneme.replay.db.errors import CorruptDataError
from mneme.replay.engine import device_decompress, device_restore
from mneme.replay.engine.device_restore import (
    Limits,
    Transfer,
    limits_for,
    missing_zero_runs,
    pieces,
    plan_batches,
    xor_runs,
)

CHUNK = 4096


def _array(tmp_path, name: str, data: np.ndarray, *, skip_zero: bool = False):
    folder = tmp_path / name
    write_array(folder, data, chunk_size=CHUNK, skip_zero_chunks=skip_zero)
    return read_array_info(folder, 1 << 30)


@pytest.fixture
def no_cache():
    device_decompress.load.cache_clear()
    yield
    device_decompress.load.cache_clear()


def test_absent_library_is_one_line(monkeypatch, tmp_path, no_cache):
    monkeypatch.setenv("MNEME_NVCOMP", str(tmp_path / "libnvcomp.so.6"))
    with pytest.raises(device_decompress.NvcompError) as error:
        device_decompress.load()
    assert "\n" not in str(error.value) and "does not exist" in str(error.value)


def test_a_file_that_is_not_nvcomp_is_one_line(monkeypatch, tmp_path, no_cache):
    bogus = tmp_path / "libnvcomp.so.6"
    bogus.write_bytes(b"not an ELF file")
    monkeypatch.setenv("MNEME_NVCOMP", str(bogus))
    with pytest.raises(device_decompress.NvcompError) as error:
        device_decompress.load()
    assert "\n" not in str(error.value) and "cannot load" in str(error.value)


def test_candidates_come_from_the_wheel(monkeypatch):
    monkeypatch.delenv("MNEME_NVCOMP", raising=False)
    for path in device_decompress.library_candidates():
        assert path.parent.parent.name == "libnvcomp" and path.name.startswith("libnvcomp.so")


def test_the_library_binds_without_a_gpu(monkeypatch, no_cache):
    """The wheel's library loads without a driver; its version, alignments and scratch
    size come back through the signatures bound here (nvcomp/zstd.h of nvCOMP 5/6)."""
    monkeypatch.delenv("MNEME_NVCOMP", raising=False)
    if not any(p.is_file() for p in device_decompress.library_candidates()):
        pytest.skip("nvidia-libnvcomp-cu13 is not installed")
    nvcomp = device_decompress.load()
    assert nvcomp.version >= 5000, nvcomp
    assert nvcomp.output_alignment in (1, 2, 4, 8, 16) and nvcomp.input_alignment <= 16
    small = nvcomp.temp_size(16, 4 << 20, 4 << 20)
    large = nvcomp.temp_size(64, 4 << 20, 256 << 20)
    assert 0 < small < large
    limits = limits_for(4 << 20, 8 << 30, 512 << 20)
    # the scratch of a default batch: about 3 bytes per byte (batch_bytes keeps it within
    # 1/16 of free device memory)
    assert nvcomp.temp_size(limits.chunks, limits.max_chunk, limits.uncompressed) < 4 * limits.uncompressed


def test_chunk_files_read_and_check(tmp_path):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 3 * CHUNK + 100, dtype=np.uint8)
    info = _array(tmp_path, "a", data)
    sizes = stored_chunk_sizes(info)
    assert sorted(sizes) == [0, 1, 2, 3]
    for index, size in sizes.items():
        out = np.empty(size, np.uint8)
        read_chunk_into(info, index, memoryview(out))
        assert out.tobytes() == read_chunk_file(info, index)
        check_frame(memoryview(out), CHUNK, "here")
        with pytest.raises(CorruptDataError, match="declares"):
            check_frame(memoryview(out), 2 * CHUNK, "here")
        with pytest.raises(CorruptDataError, match="changed size"):
            read_chunk_into(info, index, memoryview(np.empty(size + 1, np.uint8)))
    blob = bytearray(read_chunk_file(info, 1))
    blob[10] ^= 0xFF
    with pytest.raises(CorruptDataError, match="checksum"):
        check_frame(memoryview(bytes(blob)), CHUNK, "here")
    os.symlink(info.path / "c" / "0", info.path / "c" / "9")  # beyond the array: listed as corruption
    with pytest.raises(CorruptDataError):
        stored_chunk_sizes(info)


def test_symlinked_chunk_is_refused(tmp_path):
    info = _array(tmp_path, "a", np.arange(2 * CHUNK, dtype=np.uint8))
    target = info.path / "c" / "1"
    os.replace(target, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", target)
    with pytest.raises(CorruptDataError, match="symbolic link"):
        stored_chunk_sizes(info)


def _apply(transfers, sizes, batches, memory: np.ndarray, base: int, scratch_at: int):
    """What the device does with a plan, done with the host's decoder on ``memory``
    (device addresses from ``base``): zero runs, decompression in place or to scratch,
    copies of the valid part, XOR runs."""
    for address, size in missing_zero_runs(transfers, sizes):
        memory[address - base: address - base + size] = 0
    for batch in batches:
        for piece, offset in zip(batch.pieces, batch.scratch, strict=True):
            info = transfers[piece.transfer].info
            chunk = decode_chunk(read_chunk_file(info, piece.index), piece.chunk, "x")
            assert len(read_chunk_file(info, piece.index)) == piece.stored
            if piece.via_scratch:
                assert offset >= 0 and offset + piece.chunk <= batch.scratch_bytes
                at = scratch_at + offset - base
                memory[at: at + piece.chunk] = chunk
                if not transfers[piece.transfer].xor:
                    memory[piece.dst - base: piece.dst - base + piece.valid] = memory[at: at + piece.valid]
            else:
                assert offset == -1 and piece.valid == piece.chunk
                memory[piece.dst - base: piece.dst - base + piece.chunk] = chunk
        for dst, src, size in xor_runs(batch, transfers, scratch_at):
            memory[dst - base: dst - base + size] ^= memory[src - base: src - base + size]


@pytest.mark.parametrize("max_chunks", [1, 3, 100])
def test_plan_restores_every_byte(tmp_path, max_chunks):
    """Partial last chunks, an unaligned destination, missing chunks of an XOR delta and
    of a zero-filled array, batches cut by every limit: applying the plan gives the bytes
    the host reader gives."""
    rng = np.random.default_rng(5)
    size = 5 * CHUNK + 123
    prologue = rng.integers(0, 256, size, dtype=np.uint8)
    prologue[CHUNK: 3 * CHUNK] = 7  # compressible
    after = prologue.copy()
    after[4 * CHUNK + 5: 4 * CHUNK + 50] += 1  # chunks 0-3 of the delta absent
    small = rng.integers(0, 256, 1000, dtype=np.uint8)  # one chunk of its own size
    p = _array(tmp_path, "p", prologue)
    d = _array(tmp_path, "d", np.bitwise_xor(after, prologue), skip_zero=True)
    s = _array(tmp_path, "s", small)
    z = _array(tmp_path, "z", np.zeros(2 * CHUNK, np.uint8), skip_zero=True)
    base = 1 << 20
    memory = np.full(1 << 17, 0xEE, np.uint8)
    at_p, at_e, at_s, at_z = base, base + 8 * CHUNK, base + 16 * CHUNK + 4, base + 20 * CHUNK
    scratch = base + 24 * CHUNK
    plain = [Transfer(p, at_p), Transfer(s, at_s), Transfer(z, at_z, missing_is_zero=True)]
    xors = [Transfer(d, at_e, xor=True, missing_is_zero=True)]
    limits = Limits(chunks=max_chunks, compressed=3 * CHUNK, uncompressed=4 * CHUNK, scratch=4 * CHUNK,
                    max_chunk=CHUNK)
    for transfers in (plain, xors):
        sizes = [stored_chunk_sizes(t.info) for t in transfers]
        items = pieces(transfers, sizes, output_alignment=8)
        batches = plan_batches(items, limits)
        assert [p for b in batches for p in b.pieces] == items
        for batch in batches:
            assert len(batch.pieces) <= max_chunks and batch.uncompressed <= 4 * CHUNK
            assert batch.compressed <= 3 * CHUNK or len(batch.pieces) == 1
            assert batch.scratch_bytes <= 4 * CHUNK
        if transfers is xors:  # the epilogue starts as the prologue's copy
            memory[at_e - base: at_e - base + size] = memory[at_p - base: at_p - base + size]
        _apply(transfers, sizes, batches, memory, base, scratch)
    assert (memory[at_p - base: at_p - base + size] == read_range(p)).all()
    assert (memory[at_e - base: at_e - base + size] == after).all()
    assert (memory[at_s - base: at_s - base + 1000] == small).all()
    assert not memory[at_z - base: at_z - base + 2 * CHUNK].any()
    assert memory[at_p - base + size] == 0xEE  # nothing past the array's end


def test_pieces_route_partial_unaligned_and_xor_chunks_to_scratch(tmp_path):
    info = _array(tmp_path, "a", np.arange(2 * CHUNK + 10, dtype=np.uint8))
    sizes = [stored_chunk_sizes(info)]
    aligned = pieces([Transfer(info, 1 << 20)], sizes, 8)
    assert [p.via_scratch for p in aligned] == [False, False, True]
    assert aligned[-1].valid == 10 and aligned[-1].chunk == CHUNK
    assert all(p.via_scratch for p in pieces([Transfer(info, (1 << 20) + 4)], sizes, 8))
    assert all(p.via_scratch for p in pieces([Transfer(info, 1 << 20, xor=True)], sizes, 8))


def test_missing_chunk_of_a_bytes_array_is_corruption(tmp_path):
    info = _array(tmp_path, "a", np.arange(3 * CHUNK, dtype=np.uint8))
    os.unlink(info.path / "c" / "1")
    with pytest.raises(CorruptDataError, match="chunk 1 is missing"):
        pieces([Transfer(info, 1 << 20)], [stored_chunk_sizes(info)], 8)


def test_limits_cover_one_chunk_and_small_instances():
    small = limits_for(1000, 3000, 0)
    assert small.uncompressed == 3072 and small.scratch >= 1000
    assert small.compressed >= 1000
    large = limits_for(4 << 20, 8 << 30, 512 << 20)
    assert large.uncompressed == device_restore.BATCH_BYTES and large.scratch == 512 << 20
    assert large.compressed == device_restore.COMPRESSED_BYTES
    huge_chunk = limits_for(1 << 30, 2 << 30, 0)
    assert huge_chunk.uncompressed >= 1 << 30 and huge_chunk.compressed > 1 << 30


def test_zero_frames_are_recognised(tmp_path):
    zeros = _array(tmp_path, "z", np.zeros(CHUNK, np.uint8))
    ones = _array(tmp_path, "o", np.ones(CHUNK, np.uint8))
    is_zero = device_restore._ZeroFrames()
    assert is_zero(read_chunk_file(zeros, 0)[:-4], CHUNK)
    assert not is_zero(read_chunk_file(ones, 0)[:-4], CHUNK)
    assert not is_zero(b"\x00" * 10, CHUNK)  # not a frame


def test_batches_fill_the_gpu_within_free_memory():
    """Batches are as large as allowed (many chunks per nvCOMP call), their scratch within
    1/16 of free device memory, never below 256 MiB."""
    from mneme.replay.engine.device_restore import BATCH_BYTES, batch_bytes

    assert batch_bytes(139 << 30) == BATCH_BYTES
    assert batch_bytes(16 << 30) == 1 << 30
    assert batch_bytes(1 << 30) == 256 << 20
