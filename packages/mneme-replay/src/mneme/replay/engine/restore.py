"""Restore: recreate a recorded instance's device memory at its recorded addresses.

``DeviceImage`` reserves the recorded virtual address range with the runtime's
``AddressSpace``, recreates every heap region at its recorded address (managed regions,
which the driver placed outside that range at record time, get reservations of their own
at exactly their recorded addresses; "peer" regions, another GPU's memory the launch
reached, are mapped on a second GPU that the replay GPU reaches), uploads the
prologue once and keeps a pristine device copy of it, so resetting memory before each
iteration is device-to-device copies only. Device globals live in the loaded module:
``bind_module`` points them at the module's addresses and resets them the same way.
Recorded epilogues are uploaded once too, for on-device verification.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from mneme.runtime.errors import RangeUnavailableError
from mneme.runtime.recording_format import IN_RANGE_KIND, OWN_ADDRESS_KINDS, PEER_KIND

from . import predecessor_traffic
from .device_restore import DeviceRestore, Transfer, device_path
from .errors import DeviceRestoreError, RestoreError
from .host_batches import STREAM_BATCH, HostBatches
from .l2_touch import L2Touch, table_bytes
from .reset_plan import changed_ranges, written_copies
from .restore_layout import CANARY, MAX_SLACK, merge_spans, peer_devices, round_up, slack_intervals
from .sparse_regions import ZERO_BUFFER_BYTES, CheckRange, RegionParts, region_parts, subtract
from .verify_kernels import RESULT_BYTES

if TYPE_CHECKING:
    from mneme.replay.db import RegionInfo

_SCRATCH_ALIGNMENT = 4096
# Reservations grow in these steps. While a reservation is live, the driver puts its own
# new allocations (module code, events) at the first free addresses after it; those stay
# when the image closes and would sit inside the next, slightly larger reservation at the
# same base (seen on the H100 host after many replays in one process: "the driver offered
# base+16.125 GiB"). Whole steps keep the driver's allocations beyond what later images
# of recordings up to the same step need. Unmapped virtual addresses cost nothing.
_RESERVE_STEP = 64 << 30
#: where x86-64 Linux maps shared libraries and large host allocations (top of the 47-bit space)
_HOST_MAPPINGS = 0x7000_0000_0000


@dataclass
class _Global:
    region: RegionInfo
    pristine: int  # device address of the recorded prologue bytes
    expected: int | None
    changed: list = field(default_factory=list)  # (start, end) the recorded launch changed
    address: int | None = None  # in the currently bound module


def restore_bytes(instance) -> int:
    """What restoring ``instance`` moves to the device with verification: every region's
    prologue and its recorded epilogue (the units DeviceImage's ``progress`` counts)."""
    return 2 * sum(int(r.size) for r in instance.regions)


class DeviceImage:
    """The recorded memory of one instance, live on one device.

    Use as a context manager or call ``close()``; closing releases every byte it mapped.
    ``restore_path`` says where the chunks decompressed: "nvcomp" or "host".

    Parameters:
        device: the mneme.runtime Device to restore on.
        info: the recording's information (its address range).
        instance: the instance.
        verify: also put the recorded epilogues on the device, for verification.
        extra_scratch: more scratch bytes to reserve past the recorded range.
        verifier: the DeviceVerifier whose kernels resolve XOR epilogues on the device;
            None resolves them on the host.
        progress: called with the bytes of each batch streamed to the device.
        decompress: where stored chunks decompress: "auto" (instances moving at least
            ``device_restore.NVCOMP_MIN_BYTES``: on the GPU with nvCOMP where it loads, else on the
            host, ``restore_note`` saying why; ``MNEME_RESTORE=host`` keeps it on the
            host), "host", or "device" (nvCOMP or RestoreError).

    Raises:
        ValueError: an unknown ``decompress``.
        RestoreError: the recorded memory cannot be recreated (a region outside the
            recorded range, managed memory straddling its end, no device
            decompression where it was asked for).
        RangeUnavailableError: the recorded addresses are taken in this process.
    """

    def __init__(self, device, info, instance, *, verify: bool = True, extra_scratch: int = 0, verifier=None,
                 progress=None, decompress: str = "auto"):
        if decompress not in ("auto", "host", "device"):
            raise ValueError(f"decompress must be auto, host or device, not {decompress!r}")
        self.device = device
        self.instance = instance
        self.restore_path, self.restore_note = "host", ""
        self._decompress_mode = decompress
        self._progress = progress  # told the bytes of each batch streamed to the device
        # XOR epilogues are resolved on the device with the verifier's kernels (on the host
        # without one)
        self._verifier = verifier
        regions = list(instance.regions)
        # Heap and managed regions both come back as device memory at their recorded
        # addresses: at replay only the kernel touches them.
        self.heap = [r for r in regions
                     if r.kind == IN_RANGE_KIND or r.kind in OWN_ADDRESS_KINDS or r.kind == PEER_KIND]
        self.globals_info = [r for r in regions if r.kind == "global"]
        granularity = int(device.properties.granularity) or (2 << 20)
        # regions restored, reset and verified by their live ranges (sparse_regions.py)
        self.parts: dict[str, RegionParts] = {}
        for r in self.heap:
            parts = region_parts(instance, r, granularity)
            if parts is not None:
                self.parts[r.name] = parts
        self.spans = merge_spans([r for r in self.heap if r.kind == IN_RANGE_KIND])
        # managed memory, and memory the application mapped itself: at their own addresses
        managed = merge_spans([r for r in self.heap if r.kind in OWN_ADDRESS_KINDS], granularity)
        # another GPU's memory, per recorded GPU: mapped on a GPU of this machine that this
        # one reaches
        peer_regions = [r for r in self.heap if r.kind == PEER_KIND]
        recorded_peers = sorted({r.device for r in peer_regions})
        peer_spans = {d: merge_spans([r for r in peer_regions if r.device == d], granularity)
                      for d in recorded_peers}
        # the instance's GPU's range (each GPU of a process has its own), else the recording's
        base, size = (int(v) for v in getattr(instance, "address_range", (info.vas_base, info.vas_size)))
        for span in self.spans:
            if span.address < base or span.address + span.size > base + size:
                raise RestoreError(
                    f"region at {span.address:#x} lies outside the recorded address range "
                    f"{base:#x}+{size:#x}: the database is inconsistent"
                )
        # regions whose recorded epilogue goes to the device (verification)
        checked = self.heap + self.globals_info if verify else []
        # Scratch (pristine copies, expected epilogues, verification results, L2 flush)
        # lives in the same reservation, past the recorded range.
        every_peer_span = [s for spans in peer_spans.values() for s in spans]
        scratch = sum(round_up(s.size, _SCRATCH_ALIGNMENT) for s in self.spans + managed + every_peer_span)
        scratch += sum(round_up(r.size, _SCRATCH_ALIGNMENT) for r in self.globals_info)
        scratch += sum(round_up(r.size, _SCRATCH_ALIGNMENT) for r in checked)
        scratch += round_up(RESULT_BYTES * (len(regions) + 1 + self._extra_checks()), _SCRATCH_ALIGNMENT)
        scratch += round_up(ZERO_BUFFER_BYTES, _SCRATCH_ALIGNMENT) if self.parts else 0
        scratch += round_up(extra_scratch, _SCRATCH_ALIGNMENT)
        # one batch of bytes in flight to the device (and twice that of delta staging, which
        # the device path's chunks that decompress aside share)
        self._batch = min(STREAM_BATCH, max((r.size for r in self.heap + self.globals_info), default=0))
        self._nvcomp, note = device_path(device, instance, self.heap + self.globals_info, checked,
                                         decompress, self._batch)
        self.restore_note = note or self.restore_note
        self._staging = 2 * self._batch if self._nvcomp is None else self._nvcomp[1].scratch
        scratch += self._staging
        if self._nvcomp is not None:
            scratch += DeviceRestore.device_bytes(self._nvcomp[1], self._nvcomp[2]) + granularity
        scratch += self._flush_size()  # address space only until flush_l2 is used
        # (and until app mode replays the launch before it: scratch, its table, a sink)
        scratch += predecessor_traffic.scratch_bound(self._l2_bytes(device)) + 2 * granularity
        # every scratch allocation starts a fresh granule; keep room for that
        scratch += granularity * (len(self.spans) + len(managed) + len(every_peer_span) + 2 * len(regions) + 9)
        # Whole steps below the host's mapping area; in it (bases like 0x7f0000000000,
        # where the process's own libraries land) as little as needed: a 64 GiB range there
        # collides with them (seen on the H100 host: "the driver offered 0x7f0204000000").
        step = _RESERVE_STEP if base + size < _HOST_MAPPINGS else granularity
        reserve = round_up(size + scratch, step)
        # The peer GPUs' contexts before any reservation: a context made while a range is
        # reserved puts the driver's own memory right after it, where the peer's recorded
        # range may lie (seen on two H200s).
        peers = peer_devices(device, recorded_peers, getattr(instance, "id", "?")) if recorded_peers else {}
        try:
            self.space = device.address_space(base, reserve)
        except RangeUnavailableError as error:
            if base + reserve <= _HOST_MAPPINGS:
                raise
            # (older recorders' default base: where the process's own libraries land)
            raise RangeUnavailableError(
                f"{error}; this recording's addresses ({base:#x}) lie in the host's mapping "
                "area, where the process's own libraries may land: record it again with this "
                "mneme (its default base, 0x200000000000, lies below it)") from None
        self._allocations: list = []
        self._managed_spaces: list = []
        self._peer_spaces: list = []
        try:
            for recorded, spans in peer_spans.items():
                # one reservation per peer GPU, in whole steps like the own range (the
                # driver's later allocations land beyond what later images need)
                lo = spans[0].address
                hi = lo + round_up(spans[-1].address + spans[-1].size - lo,
                                    _RESERVE_STEP if lo < _HOST_MAPPINGS else granularity)
                space = peers[recorded].address_space(lo, hi - lo, shared_with=[device])
                self._peer_spaces.append(space)
                for span in spans:
                    self._allocations.append(space.allocate_at(span.address, span.size))
            # The recorder places managed memory right after the recorded range (inside
            # this reservation): mapped first, before any scratch. Older recordings hold
            # the driver's addresses: each gets a reservation of its own there.
            for span in managed:
                if base <= span.address and span.address + span.size <= base + reserve:
                    self._allocations.append(self.space.allocate_at(span.address, span.size))
                    continue
                if span.address < base + reserve and base < span.address + span.size:
                    raise RestoreError(
                        f"managed memory recorded at {span.address:#x} straddles the end of "
                        f"the replay's address range {base:#x}+{reserve:#x}"
                    )
                space = device.address_space(span.address, span.size)
                self._managed_spaces.append(space)
                self._allocations.append(space.allocate_at(span.address, span.size))
            self.spans = self.spans + managed + every_peer_span
            # Scratch goes after everything recorded, never into a hole between recorded
            # regions: a kernel reaching memory it was not recorded with must fault there,
            # not scribble on a pristine copy.
            ends = [base + size] + [s.address + s.size for s in managed
                                    if base <= s.address < base + reserve]
            self._granularity = granularity
            self._scratch_next = round_up(max(ends), granularity)
            slack = slack_intervals([s for s in self.spans if base <= s.address < base + reserve],
                                    granularity)
            self.slack = slack if sum(s.size for s in slack) <= MAX_SLACK else []
            self._restore(info, checked)
        except BaseException:
            self.close()
            raise

    # -- construction ----------------------------------------------------------------

    def _allocate_live(self, size: int, parts: RegionParts) -> int:
        """Scratch of ``size`` bytes of address space with only the live ranges mapped."""
        address = self._scratch_next
        for lo, hi in parts.live:
            self._allocations.append(self.space.allocate_at(address + lo, hi - lo))
        self._scratch_next = round_up(address + max(size, 1), self._granularity)
        return address

    def _extra_checks(self) -> int:
        """Verification slots beyond one per region: a sparse region takes one per range."""
        return sum(len(p.live) - 1 + len(p.zero) for p in self.parts.values())

    def checks_of(self, region) -> list[CheckRange]:
        """The device ranges that verify ``region``.

        Parameters:
            region: a region of the instance.

        Returns:
            The whole region, or a sparse region's live ranges against its expected bytes
            and its zero ranges against the zero buffer (``period`` set); empty where the
            region is not verified.
        """
        actual, expected = self.actual_address(region), self.expected.get(region.name)
        if actual is None or expected is None:
            return []
        recorded = int(region.address)
        parts = self.parts.get(region.name)
        if parts is None:
            return [CheckRange(actual, expected, int(region.size), recorded)]
        checks = [CheckRange(actual + lo, expected + lo, hi - lo, recorded + lo) for lo, hi in parts.live]
        checks += [CheckRange(actual + lo, self.zeros, hi - lo, recorded + lo, ZERO_BUFFER_BYTES)  # type: ignore[arg-type]
                   for lo, hi in parts.zero]
        return checks

    def live_ranges(self, region) -> list[tuple[int, int]]:
        """The offsets of ``region`` that hold recorded bytes.

        Parameters:
            region: a region of the instance.

        Returns:
            (start, end) offsets: the whole region, or a sparse region's live ranges.
        """
        parts = self.parts.get(region.name)
        return [(0, int(region.size))] if parts is None else list(parts.live)

    def _allocate(self, size: int) -> int:
        address = self._scratch_next
        allocation = self.space.allocate_at(address, max(size, 1))
        self._scratch_next = round_up(address + max(size, 1), self._granularity)
        self._allocations.append(allocation)
        return int(allocation.address)

    def _restore(self, info, checked: list) -> None:
        """Each region's prologue to its address (and the epilogues of ``checked`` to
        scratch for verification): decompressed on the device (device_restore.py), else
        streamed from the host (``_restore_on_host``). An epilogue stored as its XOR with
        the prologue is resolved on the device (the prologue is there already)."""
        device = self.device
        verify = {r.name for r in checked}
        self.expected: dict[str, int] = {}
        stream = device.stream()
        for span in self.spans:
            if not any(a.address == span.address for a in self._allocations):
                self._allocations.append(self.space.allocate_at(span.address, span.size))
            device.fill(span.address, 0, span.size, stream)  # bytes between regions: zero
        # (region, prologue's device address): heap regions at theirs, globals in scratch
        sources = [(r, int(r.address)) for r in self.heap]
        sources += [(r, self._allocate(r.size)) for r in self.globals_info]
        for region, _ in sources:
            if region.name in verify:
                parts = self.parts.get(region.name)
                self.expected[region.name] = (self._allocate(region.size) if parts is None
                                              else self._allocate_live(region.size, parts))
        needs_staging = self._nvcomp is not None or (self._verifier is not None and verify)
        staging = self._allocate(self._staging) if needs_staging else None
        if self._nvcomp is None or not self._restore_on_device(
                sources, staging, stream):  # type: ignore[arg-type]
            self._restore_on_host(sources, staging, stream)
        # pristine copies: one per span (the reset is one D2D copy per span), less the zero
        # ranges of sparse regions, which a full reset fills with zeros instead
        # whether the zero ranges are known to hold zeros: set by a full reset and by a
        # verification that found them so, cleared by every launch (launched())
        self.zeros_clean = False
        self.zero_fills = sorted((int(r.address) + lo, hi - lo) for r in self.heap
                                 for lo, hi in (self.parts[r.name].zero if r.name in self.parts else ()))
        self.pristine: list[tuple[int, int, int]] = []  # (dst, src, size)
        for span in self.spans:
            pieces = subtract(span.address, span.size, self.zero_fills)
            copy = self._allocate(sum(n for _, n in pieces))
            for address, n in pieces:
                device.copy_device_to_device(copy, address, n, stream)
                self.pristine.append((address, copy, n))
                copy += n
        self.globals = [_Global(r, at, self.expected.get(r.name), changed=changed_ranges(self.instance, r))
                        for r, at in sources if r.kind == "global"]
        # what one timed iteration puts back: the bytes the recorded launch changed
        self.written = written_copies(self.instance, self.heap, self.pristine)
        # what the application's previous launch on the stream moved through L2 (app mode)
        self.predecessor = predecessor_traffic.plan(self.instance, [(d, n) for d, _, n in self.pristine],
                                                    self._l2_bytes(device))
        self._touch: L2Touch | None = None
        stream.synchronize()
        self.results = self._allocate(RESULT_BYTES * (len(checked) + len(self.slack) + 1 + self._extra_checks()))
        self.zeros = None  # what zero ranges are verified against
        if self.parts:
            self.zeros = self._allocate(ZERO_BUFFER_BYTES)
            device.fill(self.zeros, 0, ZERO_BUFFER_BYTES)
        self.canary = None
        if self.slack:
            self.canary = self._allocate(max(s.size for s in self.slack))
            device.fill(self.canary, CANARY, max(s.size for s in self.slack))
            self._fill_slack()
        self._flush: tuple[int, int] | None = None
        device.synchronize()

    def _restore_on_device(self, sources: list, staging: int, stream) -> bool:
        """nvCOMP decompresses every stored chunk on the device. False (``restore_note``
        saying why) when it failed: the host path then writes everything again."""
        nvcomp, limits, temp = self._nvcomp
        transfers, copies = [], []
        for region, at in sources:
            prologue = self.instance.stored_array("prologue", region.name)[0]
            transfers.append(Transfer(prologue, at, zeroed=region.kind != "global",
                                      missing_is_zero=prologue.absent_is_zero))
            expected = self.expected.get(region.name)
            if expected is None:
                continue
            array, encoding = self.instance.stored_array("epilogue", region.name)
            xor = encoding != "bytes"
            if xor:
                copies += [(expected + lo, at + lo, hi - lo) for lo, hi in self.live_ranges(region)]
            transfers.append(Transfer(array, expected, xor=xor, missing_is_zero=xor))
        from mneme.runtime import DriverError

        try:
            area = self._allocate(DeviceRestore.device_bytes(limits, temp))
        except DriverError as error:
            if getattr(error, "name", "") != "CUDA_ERROR_OUT_OF_MEMORY" or self._decompress_mode == "device":
                raise
            self.restore_note = (f"restore on the host: nvCOMP's batches need "
                                 f"{DeviceRestore.device_bytes(limits, temp) >> 20} MiB more device memory than is free")
            return False
        restorer = DeviceRestore(self.device, nvcomp, limits, temp, area, staging, self._verifier, self._progress)
        try:
            restorer.run(transfers, copies, stream)
        except DeviceRestoreError as error:
            if self._decompress_mode == "device":
                raise RestoreError(f"device decompression failed: {error}") from None
            self.restore_note = f"restore on the host: {error}"
            return False
        self.restore_path = "nvcomp"
        return True

    def _restore_on_host(self, sources: list, staging: int | None, stream) -> None:
        """Chunks decompress on the pool's threads into two page-locked batches that
        alternate, each copied to the device while the next one decompresses, so no region
        is ever whole in host memory."""
        batches = HostBatches(self.device, stream, self._batch, self._progress)
        xor_staging = staging if self._verifier is not None else None
        for region, at in sources:
            for start, end in self.live_ranges(region):
                batches.stream_in(end - start, at + start,
                                  lambda lo, hi, out, r=region, s=start: self._prologue(r, s + lo, s + hi, out))
            if region.name in self.expected:
                self._expect(region, at, batches, xor_staging)
            parts = self.parts.get(region.name)
            if parts is not None and self._progress is not None:  # zero ranges: the span's fill
                self._progress(parts.zero_bytes * (2 if region.name in self.expected else 1))
        batches.finish()

    def _fill_slack(self, stream=None) -> None:
        for s in self.slack:
            self.device.fill(s.address, CANARY, s.size, stream)

    def _expect(self, region, prologue_at: int, batches: HostBatches, staging: int | None) -> None:
        """The recorded epilogue of ``region`` into its scratch. Stored whole: streamed in
        like a prologue. Stored as its XOR with the prologue (at ``prologue_at`` on the
        device now): the prologue copied, then each batch of the delta XORed in on the
        device; on the host where there is no verifier to run the XOR."""
        encoding = self.instance.epilogue_encoding(region.name)
        for start, end in self.live_ranges(region):
            at = self.expected[region.name] + start
            if encoding == "bytes":
                batches.stream_in(end - start, at, lambda lo, hi, out, s=start:
                                  self._stored_epilogue(region, s + lo, s + hi, out))
            elif staging is None:
                batches.stream_in(end - start, at, lambda lo, hi, out, s=start:
                                  self._epilogue(region, s + lo, s + hi, out))
            else:
                self.device.copy_device_to_device(at, prologue_at + start, end - start, batches.stream)
                batches.stream_in(end - start, at, lambda lo, hi, out, s=start:
                                  self._stored_epilogue(region, s + lo, s + hi, out),
                                  xor=(self._verifier, staging))

    def _stored_epilogue(self, region, lo: int, hi: int, out: np.ndarray) -> None:
        self.instance.stored_epilogue(region.name, lo, hi, out=out)

    def _epilogue(self, region, lo: int, hi: int, out: np.ndarray) -> None:
        out[:] = self.instance.epilogue(region.name, lo, hi)

    def _prologue(self, region, lo: int, hi: int, out: np.ndarray) -> None:
        self.instance.prologue(region.name, lo, hi, out=out)

    # -- modules -----------------------------------------------------------------------

    def bind_module(self, module) -> list[str]:
        """Point the device globals at a module's and set them to their recorded values.

        Parameters:
            module: a loaded mneme.runtime Module.

        Returns:
            The symbols the module does not have (optimized away: the kernel cannot read
            or write them).

        Raises:
            RestoreError: a global is smaller in the module than it was recorded.
        """
        missing = []
        for g in self.globals:
            symbol = g.region.symbol or ""
            try:
                address, size = module.global_address(symbol)
            except Exception:  # noqa: BLE001 - the driver's "not found" is a DriverError
                g.address = None
                missing.append(symbol)
                continue
            if size < g.region.size:
                raise RestoreError(
                    f"global {symbol} is {size} bytes in the compiled module but was recorded "
                    f"with {g.region.size}"
                )
            g.address = int(address)
        self.reset()
        self.device.synchronize()
        return missing

    # -- per iteration -------------------------------------------------------------------

    @property
    def reset_bytes(self) -> int:
        return sum(size for _, _, size in self.pristine) + sum(size for _, size in self.zero_fills) + sum(
            g.region.size for g in self.globals if g.address is not None
        )

    @property
    def written_bytes(self) -> int:
        """Bytes one timed iteration puts back (``reset(written_only=True)``)."""
        return sum(size for _, _, size in self.written) + sum(
            hi - lo for g in self.globals if g.address is not None for lo, hi in g.changed)

    def reset(self, stream=None, written_only: bool = False) -> None:
        """Bring every recorded byte back to the prologue (device-to-device copies).

        Parameters:
            stream: the stream to queue on; None for the default stream.
            written_only: only the bytes the recorded launch changed (reset_plan.py), for
                timed iterations after a full reset.
        """
        copy = self.device.copy_device_to_device
        for dst, src, size in self.written if written_only else self.pristine:
            copy(dst, src, size, stream)
        if not written_only:
            if not self.zeros_clean:  # sparse regions' zero ranges (106 GB: ~26 ms a fill)
                for address, size in self.zero_fills:
                    self.device.fill(address, 0, size, stream)
                self.zeros_clean = True
            self._fill_slack(stream)
        for g in self.globals:
            if g.address is None or not g.region.size:
                continue
            for lo, hi in g.changed if written_only else [(0, g.region.size)]:
                copy(g.address + lo, g.pristine + lo, hi - lo, stream)

    def launched(self) -> None:
        """Note that a kernel ran on this image: its sparse regions' zero ranges may hold
        something now, so the next full reset fills them again unless a verification found
        them still zero first (``zeros_clean``)."""
        self.zeros_clean = False

    def touch_predecessor(self, stream=None) -> None:
        """Move what the launch before this one wrote and read through L2 as it did
        (``app`` mode, predecessor_traffic.py): its writes end up dirty, unchanged.

        Parameters:
            stream: the stream to queue on; None for the default stream.
        """
        if self.predecessor is None or self.device.properties.backend != "cuda":
            return  # (the touch kernel is PTX)
        self.launched()  # (it rewrites what it reads, but it is a launch over the regions)
        if self._touch is None:
            segments = self.predecessor.segments(self._allocate(self.predecessor.scratch_bytes))
            self._touch = L2Touch(self.device, segments, self._allocate(table_bytes(len(segments))),
                                  self._allocate(4))
        self._touch.launch(stream)

    def flush_l2(self, stream=None) -> None:
        """Evict the L2 cache by writing a buffer twice its size.

        Parameters:
            stream: the stream to queue on; None for the default stream.
        """
        if self._flush is None:
            size = self._flush_size()
            self._flush = (self._allocate(size), size)
        address, size = self._flush
        self.device.fill(address, 0, size, stream)

    def _flush_size(self) -> int:
        return max(int(self.device.properties.l2_cache_size) * 2, 1 << 20)

    @staticmethod
    def _l2_bytes(device) -> int:
        return int(device.properties.l2_cache_size) or (50 << 20)

    # -- verification ----------------------------------------------------------------------

    def actual_address(self, region) -> int | None:
        """Where the replayed bytes of a region are.

        Parameters:
            region: a region of the instance.

        Returns:
            The device address; None for a global the bound module does not have.
        """
        if region.kind == IN_RANGE_KIND or region.kind in OWN_ADDRESS_KINDS or region.kind == PEER_KIND:
            return int(region.address)
        for g in self.globals:
            if g.region.name == region.name:
                return g.address
        return None

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Release every byte the image mapped; idempotent."""
        space = getattr(self, "space", None)
        if space is not None and not space.closed:
            space.close()
        for own in getattr(self, "_managed_spaces", []) + getattr(self, "_peer_spaces", []):
            if not own.closed:
                own.close()
        self._managed_spaces = []
        self._peer_spaces = []
        self._allocations = []

    def __enter__(self) -> DeviceImage:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
