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
from typing import Any

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
               kernel_ms: float, synchronize: Callable[[], None]) -> float | None:
        """Energy per launch (mJ): the GPU's power while the kernel runs back to back,
        times the kernel's own time ``kernel_ms``; None where the GPU has no energy
        counter. NVML's counter advances in steps (every 100 ms on the H200), so the power
        is the energy between two steps seen while launching over the time between them:
        from the first step after launching began (the queue is full by then) to the last
        one once ``window_ms`` and at least ENERGY_STEPS more steps have passed."""
        clocks, index = self.monitor.clocks, self.monitor.index
        if not self.monitor.available:
            return None
        setup()
        synchronize()
        first: Any = clocks.sample(index)  # a ClockSample, or None
        if first is None or not first.has_energy:
            return None
        last = float(first.energy_mj)
        steps: list[tuple[float, float]] = []  # (seconds, mJ) where a step was first seen
        begin = time.perf_counter()
        deadline = begin + window_ms / 1000
        launches = 0
        # Short kernels in batches queued ahead (the GPU never waits for the host); a long
        # one waited for launch by launch, so the queue never holds seconds of work.
        long_kernel = kernel_ms >= LONG_KERNEL_MS
        batch = 1 if long_kernel else ENERGY_BATCH
        while launches < ENERGY_MAX_LAUNCHES and time.perf_counter() - begin < ENERGY_GIVE_UP_S:
            for _ in range(batch):
                launch()
            launches += batch
            if long_kernel:
                synchronize()
            now: Any = clocks.sample(index)
            if now is not None and float(now.energy_mj) != last:
                last = float(now.energy_mj)
                steps.append((time.perf_counter(), last))
            if len(steps) > ENERGY_STEPS and time.perf_counter() >= deadline:
                break
        synchronize()
        if len(steps) < 2:
            return None
        (t0, e0), (t1, e1) = steps[0], steps[-1]
        watts = (e1 - e0) / ((t1 - t0) * 1000)  # mJ per ms
        return watts * kernel_ms


#: counter steps an energy window spans at least (after the first, which starts it)
ENERGY_STEPS = 2
#: an energy window that saw too few counter steps by then gives up (None)
ENERGY_GIVE_UP_S = 3.0
#: launches between looks at the clock while an energy window runs
ENERGY_BATCH = 64
#: kernels at least this long (ms) are waited for launch by launch in an energy window
LONG_KERNEL_MS = 0.5
#: launches of one energy window at most (a kernel of a few microseconds)
ENERGY_MAX_LAUNCHES = 200_000


def closest_mode(mode_times: dict[str, float], app_ms: float) -> str:
    """The mode whose median is nearest the in-application time (by ratio: 0.5x and 2x
    are equally far)."""
    import math

    return min(mode_times, key=lambda m: abs(math.log(mode_times[m] / app_ms)))


def median(times: list[float]) -> float:
    return statistics.median(times)
