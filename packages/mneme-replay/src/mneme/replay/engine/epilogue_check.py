"""ReplaySession's comparison of the replayed memory with the recorded epilogue.

Verification checks each region by its determinism class (engine/determinism.py): bit for
bit, within a tolerance, or as a multiset of elements, on the device (DeviceVerifier).
The classes themselves are measured here first, by runs of the unchanged kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..jit import CompileConfig
from . import determinism as nd
from .config import ReplayConfig
from .verify import RegionCheck, Tolerance

_WORD = (1 << 64) - 1

if TYPE_CHECKING:
    from mneme.replay.db import Instance
    from mneme.runtime import Device, Stream

    from .restore import DeviceImage
    from .result import ReplayResult
    from .verify import DeviceVerifier


class EpilogueChecks:
    """The part of ReplaySession (engine/session.py) that compares device memory with the
    recording. It works on the session's restored image, verification kernels, stream
    and caches (``_expected_host``, ``_expected_sorted``, ``_expected_digests``,
    ``_profile``), which the session creates."""

    if TYPE_CHECKING:  # the session's, which these checks use
        instance: Instance
        _profile: nd.DeterminismProfile | None
        _expected_host: dict[str, np.ndarray]
        _expected_sorted: dict[str, np.ndarray]
        _expected_digests: dict[tuple[str, int], tuple[int, int]]
        _verifier: DeviceVerifier | None
        _stream: Stream | None

        @property
        def device(self) -> Device: ...
        def image(self) -> DeviceImage: ...
        def _device_verifier(self) -> DeviceVerifier: ...
        def tolerances(self, replay: ReplayConfig) -> dict[str, Tolerance]: ...
        def run(self, compile: CompileConfig | None = None,
                replay: ReplayConfig | None = None) -> ReplayResult: ...


    # -- what the unchanged kernel reproduces ------------------------------------------------

    def determinism(self, replay: ReplayConfig | None = None) -> nd.DeterminismProfile:
        """The instance's determinism profile: from the database's cache, else measured now
        by ``replay.determinism_runs`` runs of the recorded configuration (baseline
        pipeline, recorded launch) and kept in the cache."""
        replay = replay or ReplayConfig()
        if self._profile is None:
            self._profile = nd.load_profile(self.instance)
        if self._profile is None:
            self._profile = self._measure_determinism(replay)
            nd.store_profile(self.instance, self._profile)
        return self._profile

    def _measure_determinism(self, replay: ReplayConfig) -> nd.DeterminismProfile:
        """Runs the recorded configuration and classifies each region that differs from
        the recording. Exact comparison and the multiset digests run on the device; only
        a region no multiset explains (float spread, or anything) comes to the host."""
        baseline = CompileConfig()
        unchanged = ReplayConfig(iterations=1, warmup=0, verify=False, arch=replay.arch,
                                 device=replay.device, determinism_runs=0)
        exact = {r.name: Tolerance() for r in self.instance.regions}
        regions = {r.name: r for r in self.instance.regions}
        runs = max(1, replay.determinism_runs)
        differing: dict[str, int] = {}  # region -> most bytes that differed in one run
        orders: dict[str, set[int]] = {}  # element widths whose multiset held in every run
        samples: dict[str, list[np.ndarray]] = {}  # runs no multiset explains, on the host
        for _ in range(runs):
            self.run(baseline, unchanged)
            for mismatch in self._check(exact, profile=None):
                region = regions.get(mismatch.region)
                if region is None:  # bytes outside the recorded regions: verification says so
                    continue
                differing[region.name] = max(differing.get(region.name, 0), int(mismatch.count))
                # only the widths every earlier run held can still be the class: one digest
                # pass over the region per width, and none for widths already ruled out
                candidates = orders.get(region.name, set(nd.ORDER_WIDTHS))
                held = {w for w in candidates if self._multiset_same(region, w)}
                orders[region.name] = held
                if not held:
                    samples.setdefault(region.name, []).append(self._device_bytes(region))
        profile = nd.DeterminismProfile(runs, baseline.pipeline)
        for name, count in differing.items():
            widths = [w for w in nd.ORDER_WIDTHS if w in orders[name]]
            if widths:
                profile.regions[name] = nd.RegionClass(nd.ORDER, element=widths[0], differing_bytes=count)
                continue
            taken = samples.get(name) or [self._device_bytes(regions[name])]
            profile.regions[name] = nd.classify(self._expected_bytes(regions[name]), taken)
        return profile

    def _multiset_same(self, region, width: int) -> bool | None:
        """Whether the region's replayed bytes hold the recorded multiset of ``width``-byte
        elements, decided by digests on the device; None where the device cannot tell
        (elements not aligned), so the host decides."""
        image = self.image()
        # a sparse region by its live ranges (the digests add up; its zero ranges are
        # compared exactly, in _check)
        pieces = [(p.actual, p.expected, p.size) for p in image.checks_of(region) if not p.period]
        if not pieces or any(n % width or a % width or e % width for a, e, n in pieces):
            return None
        self._device_verifier()

        def digest(which: int) -> tuple[int, int]:
            words = [self._verifier.multiset_digest(  # type: ignore[union-attr]
                piece[which], piece[2], width, image.results, self._stream) for piece in pieces]
            return (sum(w[0] for w in words) & _WORD, sum(w[1] for w in words) & _WORD)

        key = (region.name, width)
        if key not in self._expected_digests:
            self._expected_digests[key] = digest(1)
        return digest(0) == self._expected_digests[key]

    def _device_bytes(self, region) -> np.ndarray:
        """The replayed bytes of ``region`` (of a sparse region: its live ranges, one after
        the other), on the host."""
        image = self.image()
        address = image.actual_address(region)
        ranges = image.live_ranges(region)
        data = np.empty(sum(hi - lo for lo, hi in ranges), dtype=np.uint8)
        if address is not None and data.size:
            at = 0
            for lo, hi in ranges:
                self.device.copy_from_device(data[at : at + hi - lo], address + lo)
                at += hi - lo
        return data

    def _expected_bytes(self, region) -> np.ndarray:
        """The recorded epilogue of ``region`` (as ``_device_bytes`` lays it out)."""
        if region.name not in self._expected_host:
            pieces = [np.ascontiguousarray(self.instance.epilogue(region.name, lo, hi)).view(np.uint8).reshape(-1)
                      for lo, hi in self.image().live_ranges(region)]
            self._expected_host[region.name] = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        return self._expected_host[region.name]
    # -- verification ---------------------------------------------------------------------

    def verify(self, replay: ReplayConfig | None = None) -> list:
        """Compare the device memory now with the recorded epilogue (on the device)."""
        replay = replay or ReplayConfig()
        profile = self._profile if replay.determinism_runs else None
        return self._check(self.tolerances(replay), profile)

    def _check(self, tolerances: dict[str, Tolerance], profile) -> list:
        """Each region by its class (bit-exact without a profile), on the device:
        order-insensitive regions by their multiset digests (the host sorts them only to
        describe a mismatch)."""
        image = self.image()
        self._device_verifier()
        checks, unordered = [], []
        for region in self.instance.regions:
            pieces = image.checks_of(region)  # the whole region, or a sparse one's pieces
            if not pieces:
                continue
            kind = profile.of(region.name) if profile is not None else nd.RegionClass()
            if kind.kind == nd.ANY:
                continue
            if kind.kind == nd.ORDER:
                unordered.append((region, kind.element))
                # (a sparse region's zero ranges still compare exactly)
                pieces = [p for p in pieces if p.period]
            tolerance = tolerances.get(region.name, Tolerance())
            if kind.kind == nd.FLOAT:
                tolerance = kind.tolerance(tolerances.get(region.name))
            checks += [RegionCheck(region.name, p.actual, p.expected, p.size, tolerance, p.address, p.period)
                       for p in pieces]
        # Mapped bytes around the recorded regions must still hold the canary: a kernel that
        # wrote them wrote memory it was not recorded with.
        for slack in image.slack:
            checks.append(RegionCheck(f"outside the recorded regions at {slack.address:#x}",
                                      slack.address, image.canary,  # type: ignore[arg-type]
                                      slack.size, Tolerance(),
                                      slack.address))
        mismatches = self._verifier.run(checks, image.results, self._stream)  # type: ignore[union-attr]
        # Every zero range checked bit-exactly and found zero: the next full reset need not
        # fill them (a tolerance passes small values, which a fill would have cleared).
        zero_checks = {(c.region, c.address) for c in checks
                       if c.period and (not c.plan.typed or c.plan.mode == 0)}
        if ({name for name, parts in image.parts.items() if parts.zero} <= {r for r, _ in zero_checks}
                and not any((m.region, m.address) in zero_checks for m in mismatches)):
            image.zeros_clean = True
        for region, width in unordered:
            if self._multiset_same(region, width):  # on the device: only two words come back
                continue
            # Differs (or the device cannot tell): the host finds where, for the report.
            if region.name not in self._expected_sorted:  # sorted once, not per trial
                self._expected_sorted[region.name] = nd.sorted_elements(
                    self._expected_bytes(region), width)
            found = nd.order_mismatch(region.name, int(region.address), self._device_bytes(region),
                                      self._expected_sorted[region.name], width, presorted=True)
            if found is not None:
                mismatches.append(found)
        return mismatches
