"""How replay times a kernel: its GPU timestamps from CUPTI (mneme.runtime.kernel_timing),
in a chosen cache state, with the SM clock and energy beside it.

Each measurement starts from a full reset (every recorded byte back to the prologue);
each iteration then puts back only the bytes the recorded launch changed (reset_plan.py),
so read-only inputs are not rewritten and keep whatever cache state the mode gives them.
Cache modes (docs/replay.md, "Timing and fidelity"), what happens before each iteration:

- ``warm``: the changed bytes are restored: the kernel's data stays in L2 from the
  iteration before, as for a kernel iterating on its own data.
- ``cold``: restored, then L2 is flushed: nothing of the kernel's data is cached.
- ``app``: the application's state as the launch before it on its stream left it: the
  changed bytes restored, L2 flushed, then what that launch may have written (recorded
  as the instance's "predecessor") rewritten, so it is in L2 and everything else comes
  from memory. Without a recorded predecessor: L2 flushed, then the changed bytes
  restored (the kernel's outputs stand in for what the kernel before it wrote).
- ``auto``: per instance, whichever of the three gives the time closest to the recorded
  in-application time (the instance's ``app_time``); warm where there is none.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

WARM, COLD, APP, AUTO = "warm", "cold", "app", "auto"
CACHE_MODES = (WARM, COLD, APP, AUTO)
#: the modes auto chooses from, in the order it measures them
MEASURED_MODES = (WARM, APP, COLD)


def prepare(image, stream, mode: str) -> None:
    """Bring memory and L2 to ``mode``'s state before one iteration."""
    if mode == APP and image.predecessor is not None:
        image.reset(stream, written_only=True)
        image.flush_l2(stream)
        image.touch_predecessor(stream)
    elif mode == APP:
        image.flush_l2(stream)
        image.reset(stream, written_only=True)
    else:
        image.reset(stream, written_only=True)
        if mode == COLD:
            image.flush_l2(stream)


@dataclass
class Measurement:
    """Timed iterations of one kernel (ms), how they were timed, and the GPU meanwhile."""

    times: list[float]
    method: str  # "cupti" or "events"
    note: str = ""  # why events were used, when they were
    sm_clock_mhz: float | None = None
    energy_mj: float | None = None  # per iteration
    mode_times: dict[str, float] = field(default_factory=dict)


class KernelClock:
    """Times launches on one device: CUPTI records where CUPTI works (started once per
    process), CUDA events otherwise. Events are recorded either way, so a launch CUPTI
    did not report still has a time."""

    def __init__(self, device, ordinal: int = 0):
        from mneme.runtime.kernel_timing import GpuMonitor, start_cupti

        self.device = device
        self.cupti, self.reason = start_cupti()
        self.monitor = GpuMonitor(ordinal)
        self._events: list = []

    def measure(self, launch: Callable[[], None], before: Callable[[], None], stream,
                kernel_name: str, warmup: int, iterations: int,
                synchronize: Callable[[], None], setup: Callable[[], None] | None = None) -> Measurement:
        """``setup`` once, then ``before`` and ``launch``, ``warmup`` + ``iterations``
        times; ``synchronize`` waits for the stream (raising what the kernel's failure is)."""
        from mneme.runtime.kernel_timing import CUPTI, EVENTS, fallback_line, kernel_timer

        while len(self._events) < 2 * iterations:
            self._events.append(self.device.event())
        timer = kernel_timer() if self.cupti else None
        if timer is not None:
            timer.drain()  # what ran before (other replays, resets) is not ours
        if setup is not None:
            setup()
        self.monitor.begin()
        for i in range(warmup + iterations):
            before()
            timed = i - warmup
            if timed >= 0:
                self._events[2 * timed].record(stream)
            launch()
            if timed >= 0:
                self._events[2 * timed + 1].record(stream)
        synchronize()
        gpu = self.monitor.end()
        events = [self._events[2 * i].elapsed_ms(self._events[2 * i + 1])
                  for i in range(iterations)]
        result = Measurement(events, EVENTS, fallback_line(self.reason) if not self.cupti else "")
        if gpu is not None:
            result.sm_clock_mhz = gpu.sm_clock_mhz
            if gpu.energy_mj is not None:
                result.energy_mj = gpu.energy_mj / (warmup + iterations)
        if timer is None:
            return result
        ours = sorted((r for r in timer.drain() if r.name == kernel_name),
                      key=lambda r: r.start_ns)
        if len(ours) < iterations:
            result.note = (f"events (CUPTI reported {len(ours)} of {warmup + iterations} "
                           f"launches of {kernel_name})")
            return result
        result.times = [r.duration_ms for r in ours[-iterations:]]
        result.method = CUPTI
        return result


    def energy(self, launch: Callable[[], None], setup: Callable[[], None], window_ms: float,
               synchronize: Callable[[], None]) -> float | None:
        """Energy per launch (mJ): after ``setup``, the kernel back to back for
        ``window_ms`` of wall time while NVML's energy counter runs; None where the GPU
        has no energy counter. The counter advances in steps (tens of milliseconds), so the
        window starts just after one step and ends at the first step after the last launch
        finished: the reading covers the launches and at most one step of idling."""
        clocks, index = self.monitor.clocks, self.monitor.index
        if not self.monitor.available:
            return None
        setup()
        synchronize()
        start = _next_step(clocks, index)
        if start is None:
            return None
        launches, deadline = 0, time.perf_counter() + window_ms / 1000
        while time.perf_counter() < deadline and launches < ENERGY_MAX_LAUNCHES:
            for _ in range(ENERGY_BATCH):
                launch()
            launches += ENERGY_BATCH
        synchronize()
        end = _next_step(clocks, index)
        if end is None:
            return None
        return (end - start) / launches


def _next_step(clocks, index: int) -> float | None:
    """The energy counter (mJ) right after its next step (None: no counter, or it did not
    move within a second)."""
    first = clocks.sample(index)
    if first is None or not first.has_energy:
        return None
    deadline = time.perf_counter() + 1.0
    while time.perf_counter() < deadline:
        now = clocks.sample(index)
        if now is not None and now.energy_mj != first.energy_mj:
            return float(now.energy_mj)
        time.sleep(0.0005)
    return None


#: launches between looks at the clock while an energy window runs
ENERGY_BATCH = 64
#: launches of one energy window at most (a kernel of a few microseconds)
ENERGY_MAX_LAUNCHES = 200_000


def closest_mode(mode_times: dict[str, float], app_ms: float) -> str:
    """The mode whose median is nearest the in-application time (by ratio: 0.5x and 2x
    are equally far)."""
    import math

    return min(mode_times, key=lambda m: abs(math.log(mode_times[m] / app_ms)))


def median(times: list[float]) -> float:
    return statistics.median(times)
