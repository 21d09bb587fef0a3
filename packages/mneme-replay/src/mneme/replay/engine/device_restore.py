"""Restore's device path: stored chunks decompressed by nvCOMP on the GPU, in batches.

For each batch, the chunk pool's threads read the stored chunk files straight into one of
two alternating page-locked buffers and check each frame on the host (its CRC-32C and the
content size it declares: exactly the array's chunk size, so nothing decompresses past its
buffer); one copy moves the frames and the batch's pointer arrays to the device, and
nvCOMP decompresses every frame straight to its destination. A chunk that cannot go there
(the last one of an array whose padded size runs past the array's end, a destination
nvCOMP's alignment rules refuse, an epilogue stored as its XOR with the prologue)
decompresses to device scratch: the valid part is copied, or XORed in by the verifier's
kernel. A frame that decompresses to zeros (recognised by its stored bytes, decompressed on
the host once) becomes a device memset, or nothing where the destination is zero already
or the frame is an XOR delta. Missing chunks of an array where absence means zeros (XOR
deltas) are the same; elsewhere they are corruption, as on the host path.

Statuses come back one batch later; a chunk nvCOMP refused raises ``DeviceRestoreError``,
and the caller restores on the host instead (every destination is written whole by either
path, so the host path simply runs again).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..db.chunks import pool, read_chunk_into, stored_chunk_sizes
from ..db.codec import check_frame
from ..db.errors import CorruptDataError
from . import device_decompress
from .device_decompress import PrimaryContext, status_name
from .errors import DeviceRestoreError, NvcompError, RestoreError

if TYPE_CHECKING:
    from ..db.chunks import ArrayInfo

#: uncompressed bytes per batch at most: nvCOMP's zstd scratch grows with it (about 3 bytes
#: per byte: 6 GiB for 2 GiB, measured with nvCOMP 6.0 for 4 MiB chunks). nvCOMP gives each
#: chunk one thread block, so a batch needs many chunks to fill the GPU: on the H200 an
#: 8.6 GB prologue (2049 chunks) decompressed in 2.3 s in batches of 512 MiB and in 0.85 s
#: in batches of 2 GiB. ``batch_bytes`` keeps a batch's scratch within 1/16 of free memory.
BATCH_BYTES = int(os.environ.get("MNEME_NVCOMP_BATCH_MIB", "2048")) << 20
_MIN_BATCH = 256 << 20


#: instances that move less than this restore on the host under "auto": it is as fast for
#: them, and nvCOMP's first use in a process makes the driver place its code right after the
#: live reservation, where a later instance's memory mapped outside its range (PyTorch's
#: expandable segments) must go (seen on the H200: 44 of 71 PyTorch instances could no
#: longer reserve their mapped regions after small instances restored through nvCOMP)
NVCOMP_MIN_BYTES = 1 << 30


def batch_bytes(free_device_bytes: int) -> int:
    """Uncompressed bytes per batch for a device with that much free memory."""
    return max(_MIN_BATCH, min(BATCH_BYTES, free_device_bytes // 16 // _MIN_BATCH * _MIN_BATCH))
#: compressed bytes per batch (two page-locked host buffers of this size, one on the device)
COMPRESSED_BYTES = 256 << 20
MAX_CHUNKS = 4096
#: frames up to this size are checked for decompressing to zeros (a 4 MiB chunk of zeros
#: is a frame of about 150 bytes)
_SMALL_FRAME = 1024
_ALIGN = 256
#: per chunk: compressed pointer, compressed size, buffer size, output pointer (u64 each)
_HEADER_WORDS = 4


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclass(frozen=True)
class Transfer:
    """One stored array to its device destination: written (``xor`` False) or XORed into
    bytes already there (an epilogue stored as its XOR with the prologue)."""

    info: ArrayInfo
    dst: int
    xor: bool = False
    missing_is_zero: bool = False
    zeroed: bool = False  # the destination holds zeros already


@dataclass(frozen=True)
class Piece:
    """One stored chunk: where its frame goes and where its bytes land."""

    transfer: int  # index into the transfer list
    index: int  # chunk index in its array
    stored: int  # bytes of the chunk file (frame and CRC)
    dst: int  # device address of the chunk's first byte
    valid: int  # bytes of the chunk inside the array
    chunk: int  # bytes the frame decompresses to (the array's chunk size)
    via_scratch: bool  # decompressed to scratch (partial, unaligned or an XOR delta)


@dataclass
class Batch:
    pieces: list[Piece] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # of each frame in the frame area
    scratch: list[int] = field(default_factory=list)  # scratch offset of each (-1: direct)
    compressed: int = 0
    uncompressed: int = 0
    scratch_bytes: int = 0
    work: list[int] = field(default_factory=list)  # the pieces nvCOMP decompressed, in order


@dataclass(frozen=True)
class Limits:
    chunks: int  # chunks per batch
    compressed: int  # frame bytes per batch
    uncompressed: int  # decompressed bytes per batch (nvCOMP's scratch)
    scratch: int  # bytes of device scratch for chunks that cannot land in place
    max_chunk: int

    @property
    def header_bytes(self) -> int:
        return _round_up(_HEADER_WORDS * 8 * self.chunks, _ALIGN)

    @property
    def results_bytes(self) -> int:
        """actual sizes (u64) and statuses (i32) of a batch's chunks"""
        return _round_up(12 * self.chunks, _ALIGN)


def limits_for(max_chunk: int, total: int, scratch: int, batch: int = BATCH_BYTES) -> Limits:
    """Batch limits for arrays of chunks up to ``max_chunk`` bytes, ``total`` bytes in all,
    with ``scratch`` device bytes for chunks that decompress aside (at least one chunk),
    ``batch`` uncompressed bytes per batch at most."""
    from ..db.codec import max_chunk_file_size

    max_chunk = max(max_chunk, 1)
    uncompressed = max(min(batch, _round_up(max(total, 1), _ALIGN)), max_chunk)
    compressed = max(min(COMPRESSED_BYTES, _round_up(max_chunk_file_size(max_chunk) * -(-uncompressed // max_chunk),
                                                     _ALIGN)),
                     _round_up(max_chunk_file_size(max_chunk), _ALIGN))
    return Limits(chunks=MAX_CHUNKS, compressed=compressed, uncompressed=uncompressed,
                  scratch=max(scratch, _round_up(max_chunk, _ALIGN)), max_chunk=max_chunk)


def pieces(transfers: list[Transfer], sizes: list[dict[int, int]], output_alignment: int) -> list[Piece]:
    """The stored chunks of every transfer in order (``sizes``: each array's stored chunk
    file sizes by index). A missing chunk is corruption unless its array reads absent
    chunks as zeros (left out then: the caller zeroes what needs it)."""
    out = []
    for t, (transfer, stored) in enumerate(zip(transfers, sizes, strict=True)):
        info = transfer.info
        for index in range(info.chunk_count()):
            lo, hi = info.chunk_bounds(index)
            if index not in stored:
                if not transfer.missing_is_zero:
                    raise CorruptDataError(f"{info.path}: chunk {index} is missing (data truncated)")
                continue
            dst = transfer.dst + lo
            via_scratch = transfer.xor or hi - lo < info.chunk_size or dst % output_alignment != 0
            out.append(Piece(t, index, stored[index], dst, hi - lo, info.chunk_size, via_scratch))
    return out


def missing_zero_runs(transfers: list[Transfer], sizes: list[dict[int, int]]) -> list[tuple[int, int]]:
    """(address, bytes) the device must zero: the absent chunks of arrays that read them as
    zeros, written (not XORed) into a destination that is not zero already."""
    runs: list[tuple[int, int]] = []
    for transfer, stored in zip(transfers, sizes, strict=True):
        if transfer.xor or transfer.zeroed or not transfer.missing_is_zero:
            continue
        for index in range(transfer.info.chunk_count()):
            if index not in stored:
                lo, hi = transfer.info.chunk_bounds(index)
                if runs and runs[-1][0] + runs[-1][1] == transfer.dst + lo:
                    runs[-1] = (runs[-1][0], runs[-1][1] + hi - lo)
                else:
                    runs.append((transfer.dst + lo, hi - lo))
    return runs


def plan_batches(items: list[Piece], limits: Limits, input_alignment: int = 8) -> list[Batch]:
    """Pieces in order, cut into batches within ``limits``."""
    batches: list[Batch] = []
    batch = Batch()
    for piece in items:
        frame = _round_up(piece.stored, max(input_alignment, 8))
        aside = _round_up(piece.chunk, _ALIGN) if piece.via_scratch else 0
        if batch.pieces and (len(batch.pieces) >= limits.chunks
                             or batch.compressed + frame > limits.compressed
                             or batch.uncompressed + piece.chunk > limits.uncompressed
                             or batch.scratch_bytes + aside > limits.scratch):
            batches.append(batch)
            batch = Batch()
        batch.pieces.append(piece)
        batch.offsets.append(batch.compressed)
        batch.scratch.append(batch.scratch_bytes if piece.via_scratch else -1)
        batch.compressed += frame
        batch.uncompressed += piece.chunk
        batch.scratch_bytes += aside
    if batch.pieces:
        batches.append(batch)
    return batches


def xor_runs(batch: Batch, transfers: list[Transfer], scratch: int) -> list[tuple[int, int, int]]:
    """(dst, src, bytes) XORs of a batch's delta chunks, neighbours merged (consecutive
    chunks of one array sit next to each other in scratch when each fills its chunk)."""
    runs: list[list[int]] = []
    for piece, offset in zip(batch.pieces, batch.scratch, strict=True):
        if not transfers[piece.transfer].xor:
            continue
        src = scratch + offset
        if runs and runs[-1][0] + runs[-1][2] == piece.dst and runs[-1][1] + runs[-1][2] == src:
            runs[-1][2] += piece.valid
        else:
            runs.append([piece.dst, src, piece.valid])
    return [tuple(r) for r in runs]  # type: ignore[misc]


class _ZeroFrames:
    """Which small frames decompress to all zeros (decided on the host once per frame)."""

    def __init__(self) -> None:
        self._known: dict[bytes, bool] = {}

    def __call__(self, body, chunk: int) -> bool:
        if len(body) > _SMALL_FRAME:
            return False
        key = bytes(body)
        found = self._known.get(key)
        if found is None:
            from numcodecs.zstd import Zstd

            try:
                found = not np.frombuffer(Zstd().decode(key), np.uint8).any()
            except Exception:  # noqa: BLE001 - nvCOMP will say what is wrong with it
                found = False
            self._known[key] = found
        return found


class DeviceRestore:
    """Decompresses transfers on the device with nvCOMP. ``area``: device scratch of
    ``device_bytes(limits, temp)`` bytes; ``scratch``: device scratch of ``limits.scratch``
    bytes (shared with the host path's XOR staging)."""

    def __init__(self, device, nvcomp, limits: Limits, temp: int, area: int, scratch: int,
                 verifier=None, progress=None):
        self.device, self.nvcomp, self.limits = device, nvcomp, limits
        self.verifier, self.progress = verifier, progress
        self.scratch = scratch
        self.header = area
        self.frames = area + limits.header_bytes
        self.results = self.frames + limits.compressed
        self.temp = self.results + limits.results_bytes
        self.temp_bytes = temp
        self.context: PrimaryContext | None = None  # while run() runs
        self._zero = _ZeroFrames()

    @staticmethod
    def device_bytes(limits: Limits, temp: int) -> int:
        return limits.header_bytes + limits.compressed + limits.results_bytes + _round_up(temp, _ALIGN)

    def run(self, transfers: list[Transfer], copies: list[tuple[int, int, int]], stream) -> None:
        """Writes every non-XOR transfer, then ``copies`` (dst, src, bytes: device to
        device, the prologues under XOR epilogues), then the XOR transfers; on ``stream``.
        Raises CorruptDataError for bad stored data, DeviceRestoreError when nvCOMP fails."""
        try:
            self.context = PrimaryContext(self.device.ordinal)
        except NvcompError as error:
            raise DeviceRestoreError(str(error)) from None
        try:
            self._run([t for t in transfers if not t.xor], stream)
            for dst, src, size in copies:
                self.device.copy_device_to_device(dst, src, size, stream)
            self._run([t for t in transfers if t.xor], stream)
            stream.synchronize()
        except DeviceRestoreError:
            # nothing of this path may still run while the host path writes the same bytes
            try:
                stream.synchronize()
            except Exception:  # noqa: BLE001 - the host path reports what the device says
                pass
            raise
        finally:
            self.context.close()

    def _run(self, transfers: list[Transfer], stream) -> None:
        if not transfers:
            return
        if any(t.xor for t in transfers) and self.verifier is None:
            raise DeviceRestoreError("no XOR kernel to resolve epilogue deltas on the device")
        sizes = list(pool().map(lambda t: stored_chunk_sizes(t.info), transfers))
        for address, size in missing_zero_runs(transfers, sizes):
            self.device.fill(address, 0, size, stream)
        items = pieces(transfers, sizes, self.nvcomp.output_alignment)
        batches = plan_batches(items, self.limits, self.nvcomp.input_alignment)
        span = self.limits.header_bytes + self.limits.compressed
        hosts = [self.device.pinned_array(span) for _ in range(min(2, len(batches)))]
        results = [self.device.pinned_array(self.limits.results_bytes) for _ in hosts]
        events: list[Any] = [None] * len(hosts)  # a mneme.runtime Event per slot, once recorded
        pending: list[Batch | None] = [None] * len(hosts)
        batch: Batch | None
        for k, batch in enumerate(batches):
            slot = k % len(hosts)
            if events[slot] is not None:
                events[slot].synchronize()  # batch k-2: its copy and statuses are done
                self._check(pending[slot], results[slot], transfers)  # type: ignore[arg-type]
            self._one(batch, transfers, hosts[slot], results[slot], stream)
            events[slot] = self.device.event()
            events[slot].record(stream)
            pending[slot] = batch
        stream.synchronize()
        for slot, batch in enumerate(pending):
            if batch is not None:
                self._check(batch, results[slot], transfers)
        if self.progress is not None:  # the chunks absent (zeros)
            self.progress(sum(t.info.size for t in transfers) - sum(p.valid for p in items))

    def _read(self, batch: Batch, transfers: list[Transfer], frames: np.ndarray) -> list[bool]:
        """The batch's frames into ``frames`` on the pool's threads, each checked; which
        of them decompress to zeros."""

        def one(i: int) -> bool:
            piece, offset = batch.pieces[i], batch.offsets[i]
            info = transfers[piece.transfer].info
            view = memoryview(frames[offset: offset + piece.stored])
            read_chunk_into(info, piece.index, view)
            check_frame(view, piece.chunk, f"{info.path} chunk {piece.index}")
            return self._zero(view[:-4], piece.chunk)

        return list(pool().map(one, range(len(batch.pieces))))

    def _one(self, batch: Batch, transfers: list[Transfer], host: np.ndarray, results: np.ndarray, stream) -> None:
        limits, device = self.limits, self.device
        zeros = self._read(batch, transfers, host[limits.header_bytes:])
        work = [i for i, zero in enumerate(zeros) if not zero]
        header = host[: limits.header_bytes].view(np.uint64)
        n = len(work)
        comp_ptrs, comp_sizes = header[:n], header[limits.chunks: limits.chunks + n]
        buf_sizes = header[2 * limits.chunks: 2 * limits.chunks + n]
        out_ptrs = header[3 * limits.chunks: 3 * limits.chunks + n]
        for j, i in enumerate(work):
            piece = batch.pieces[i]
            comp_ptrs[j] = self.frames + batch.offsets[i]
            comp_sizes[j] = piece.stored - 4  # the frame, without the CRC after it
            buf_sizes[j] = piece.chunk
            out_ptrs[j] = self.scratch + batch.scratch[i] if piece.via_scratch else piece.dst
        device.copy_to_device(self.header, host[: limits.header_bytes + batch.compressed], stream)
        words = 8 * limits.chunks
        if n:
            actual, statuses = self.results, self.results + words
            device.fill(statuses, 0xFF, 4 * n, stream)
            try:
                with self.context:  # type: ignore[union-attr]
                    self.nvcomp.decompress_async(self.header, self.header + words, self.header + 2 * words,
                                                 actual, n, self.temp, self.temp_bytes,
                                                 self.header + 3 * words, statuses, stream._native.handle)
            except NvcompError as error:
                raise DeviceRestoreError(str(error)) from None
            device.copy_from_device(results[:words], actual, stream)
            device.copy_from_device(results[words: words + 4 * n], statuses, stream)
        batch.work = work
        for i, piece in enumerate(batch.pieces):
            transfer = transfers[piece.transfer]
            if zeros[i]:
                if not transfer.xor and not transfer.zeroed:
                    device.fill(piece.dst, 0, piece.valid, stream)
            elif piece.via_scratch and not transfer.xor:
                device.copy_device_to_device(piece.dst, self.scratch + batch.scratch[i], piece.valid, stream)
        for dst, src, size in xor_runs(_without(batch, zeros), transfers, self.scratch):
            self.verifier.xor_into(dst, src, size, stream)
        if self.progress is not None:
            self.progress(sum(p.valid for p in batch.pieces))

    def _check(self, batch: Batch, results: np.ndarray, transfers: list[Transfer]) -> None:
        words = 8 * self.limits.chunks
        work = batch.work
        actual = results[: 8 * len(work)].view(np.uint64)
        statuses = results[words: words + 4 * len(work)].view(np.int32)
        for j, i in enumerate(work):
            piece = batch.pieces[i]
            if statuses[j] != 0 or actual[j] != piece.chunk:
                info = transfers[piece.transfer].info
                what = (status_name(int(statuses[j])) if statuses[j] != 0
                        else f"{int(actual[j])} bytes instead of {piece.chunk}")
                raise DeviceRestoreError(f"nvCOMP could not decompress {info.path} chunk {piece.index} ({what})")


def _without(batch: Batch, zeros: list[bool]) -> Batch:
    """The batch's pieces that are not zero frames (their XOR is a no-op)."""
    keep = [i for i, zero in enumerate(zeros) if not zero]
    return Batch([batch.pieces[i] for i in keep], [batch.offsets[i] for i in keep],
                 [batch.scratch[i] for i in keep])


def device_path(device, instance, restored: list, checked: list, mode: str, batch: int) -> tuple[Any, str]:
    """How an instance's chunks decompress: on the device with nvCOMP, or on the host.

    Parameters:
        device: the mneme.runtime Device.
        instance: the instance restored.
        restored: the regions whose prologues are restored.
        checked: the regions whose epilogues go to the device (verification).
        mode: ``auto``, ``host`` or ``device`` (``MNEME_RESTORE=host`` makes ``auto`` host).
        batch: bytes of one host batch in flight (the device path stages twice that).

    Returns:
        ((nvCOMP, batch limits, its scratch bytes) or None for the host, and the one line
        saying why the host where that was not asked for ("" otherwise)).

    Raises:
        RestoreError: ``mode`` is ``device`` and nvCOMP cannot be used.
    """
    if mode == "host" or (mode == "auto" and os.environ.get("MNEME_RESTORE", "").lower() == "host"):
        return None, "restore on the host (MNEME_RESTORE=host)" if mode == "auto" else ""
    moved = sum(r.size for r in restored) + sum(r.size for r in checked)
    if mode == "auto" and moved < NVCOMP_MIN_BYTES:
        return None, ""  # the host path is as fast here, and keeps nvCOMP out of the process
    try:
        if device.properties.backend != "cuda":
            raise NvcompError(f"nvCOMP needs a CUDA device, not {device.properties.backend}")
        nvcomp = device_decompress.load()
        arrays = [instance.stored_array("prologue", r.name)[0] for r in restored]
        arrays += [instance.stored_array("epilogue", r.name)[0] for r in checked]
        free = int(device.memory_info()[0])
        limits = limits_for(max((a.chunk_size for a in arrays), default=1), sum(a.size for a in arrays),
                            2 * batch, batch_bytes(free))
        return (nvcomp, limits, nvcomp.temp_size(limits.chunks, limits.max_chunk, limits.uncompressed)), ""
    except NvcompError as error:
        if mode == "device":
            raise RestoreError(f"device decompression unavailable: {error}") from None
        return None, f"restore on the host: {error}"
