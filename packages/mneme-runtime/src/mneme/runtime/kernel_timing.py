"""One way to time a kernel: the GPU's own timestamps of each kernel (CUPTI's Activity
API, concurrent-kernel records), with the SM clock and energy (NVML) beside them.

    timer = kernel_timer()            # process-wide; libcupti is loaded on first start
    if timer.start():
        ...launch...
        records = timer.drain()        # KernelRecord: name, start_ns, end_ns, grid, block
    else:
        print(fallback_line(timer.reason))   # time with CUDA events instead

Every time mneme prints says which method measured it: ``cupti`` or ``events`` (with
the reason CUPTI could not be used). docs/replay.md, "Timing and fidelity".
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from mneme.runtime import _native

CUPTI = "cupti"
EVENTS = "events"
METHODS = (CUPTI, EVENTS)

#: Where the nvidia-cuda-cupti wheels put libcupti, below site-packages' ``nvidia/``.
_WHEEL_DIRS = ("cu13/lib", "cuda_cupti/lib", "cu12/lib")


def cupti_wheel_libraries() -> list[str]:
    """The libcupti files of installed ``nvidia-cuda-cupti`` wheels (searched after
    MNEME_CUPTI_LIBRARY and before the CUDA toolkit's)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    found: list[str] = []
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in _WHEEL_DIRS:
            found += sorted(str(p) for p in Path(root, sub).glob("libcupti.so*"))
    return found


_configured = False


def kernel_timer() -> _native.KernelTimer:
    """The process's KernelTimer, told where the wheels' libcupti lies."""
    global _configured
    timer = _native.KernelTimer.instance()
    if not _configured:
        timer.set_search_paths(cupti_wheel_libraries())
        _configured = True
    return timer


def start_cupti() -> tuple[bool, str]:
    """Starts collecting kernel records: (True, "") or (False, why not, in one line)."""
    from mneme.runtime.device import driver_available

    if not driver_available():
        return False, "no CUDA driver"
    timer = kernel_timer()
    if timer.start():
        return True, ""
    return False, timer.reason


def fallback_line(reason: str) -> str:
    """What a report prints when CUPTI could not time: the method and why, in one line."""
    return f"{EVENTS} (CUPTI unusable: {reason})"


def method_label(method: str, reason: str = "") -> str:
    return fallback_line(reason) if method == EVENTS and reason else method


# -- summaries --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeSummary:
    """Median and spread of a set of kernel durations (ms)."""

    median_ms: float
    p25_ms: float
    p75_ms: float
    min_ms: float
    max_ms: float
    count: int

    @classmethod
    def of(cls, times: list[float]) -> TimeSummary | None:
        if not times:
            return None
        ordered = sorted(times)
        if len(ordered) > 1:
            p25, _, p75 = statistics.quantiles(ordered, n=4, method="inclusive")
        else:
            p25 = p75 = ordered[0]
        return cls(statistics.median(ordered), p25, p75, ordered[0], ordered[-1], len(ordered))

    def spread(self) -> str:
        """'IQR a-b, min-max c-d' (what reports print after the median)."""
        return (f"IQR {self.p25_ms:.4f}-{self.p75_ms:.4f} ms, "
                f"range {self.min_ms:.4f}-{self.max_ms:.4f} ms")


# -- clocks and energy ---------------------------------------------------------------------------


def nvml_index(ordinal: int) -> int:
    """NVML's index of CUDA device ``ordinal``: NVML ignores CUDA_VISIBLE_DEVICES, so a
    numeric list there maps ordinals (UUID lists are not mapped: ordinal as is)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        entries = [v.strip() for v in visible.split(",")]
        if all(v.isdigit() for v in entries) and ordinal < len(entries):
            return int(entries[ordinal])
    return ordinal


@dataclass(frozen=True)
class GpuState:
    """The GPU around a measurement: SM clock (MHz, mean of the samples before and after)
    and the energy it used between them (mJ; None where NVML has no energy counter, or
    the measurement was too short to read it: GpuMonitor)."""

    sm_clock_mhz: float
    energy_mj: float | None
    power_w: float | None


#: an NVML sample (SM clock, energy, power: 3-4 ms of driver calls on an H100, most of a
#: short replay's time) is reused for this long by the measurements that follow it
SAMPLE_REUSE_S = 0.25


class GpuMonitor:
    """Samples NVML around a measurement of device ``ordinal``. Back-to-back measurements
    (a tuner's trials) share samples up to SAMPLE_REUSE_S old: the SM clock they report is
    the clock within that time. Their energy is given only where the measurement lasted
    that long and both its samples were taken for it (NVML's energy counter advances in
    100 ms steps: a shorter measurement's difference is noise; an energy objective times
    a window of its own, timing.KernelClock.energy)."""

    def __init__(self, ordinal: int = 0):
        self.index = nvml_index(ordinal)
        self.clocks = _native.GpuClocks.instance()
        self._before = None
        self._began = 0.0
        self._fresh = False  # the begin sample was taken for this measurement
        self._last: tuple[float, object] | None = None  # (time.monotonic(), sample)

    @property
    def available(self) -> bool:
        return self.clocks.available

    @property
    def reason(self) -> str:
        return self.clocks.reason

    def _sample(self, reuse: bool):
        """A sample, and whether it was taken now (not reused)."""
        now = time.monotonic()
        if reuse and self._last is not None and now - self._last[0] < SAMPLE_REUSE_S:
            return self._last[1], False
        sample = self.clocks.sample(self.index)
        self._last = (now, sample) if sample is not None else None
        return sample, True

    def begin(self) -> None:
        self._began = time.monotonic()
        if self.clocks.available:
            self._before, self._fresh = self._sample(reuse=True)
        else:
            self._before = None

    def end(self) -> GpuState | None:
        before, self._before = self._before, None
        if before is None:
            return None
        long_enough = time.monotonic() - self._began >= SAMPLE_REUSE_S
        after, _ = self._sample(reuse=not long_enough)
        if after is None:
            return None
        energy = None
        if self._fresh and long_enough and before.has_energy and after.has_energy:
            energy = float(after.energy_mj - before.energy_mj)
        power = (before.power_mw + after.power_mw) / 2000 if after.power_mw else None
        return GpuState((before.sm_clock_mhz + after.sm_clock_mhz) / 2, energy, power)
