"""How a tuning run measured its times, and in which cache mode (issue 20).

The baseline (the recorded configuration) is replayed first in the cache mode asked for
(``--cache``, default ``auto``). ``auto`` resolves there, per instance, to the mode whose
replayed time is nearest the recorded in-application time (warm, app or cold; the replay
session decides, engine/timing.py); every trial is then replayed in that fixed mode, so
all trials of a study are measured alike and compare with the baseline. The baseline's
``timing`` (study attribute, summary.json, best.json's identity) says how: the timing
method (CUPTI kernel records, or CUDA events and why), the cache mode, the instance's
in-app time and the fidelity (replayed / in-app), and the SM clock where NVML reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mneme.replay.engine.timing import AUTO, CACHE_MODES, WARM

from ..errors import TuneError

#: the mode studies measured in before cache modes existed (their baseline has no timing)
LEGACY_MODE = WARM


def check_cache_mode(mode: str) -> str:
    """Check a cache mode asked for.

    Parameters:
        mode: warm, cold, app or auto.

    Returns:
        The mode.

    Raises:
        TuneError: an unknown mode.
    """
    if mode not in CACHE_MODES:
        raise TuneError(f"--cache must be one of {', '.join(CACHE_MODES)}, not {mode!r}")
    return mode


def method_label(result: Any) -> str:
    """How a replay was timed.

    Parameters:
        result: the replay result.

    Returns:
        ``cupti``, or ``events (CUPTI unusable: ...)`` with why events timed it.
    """
    return result.timing_note or result.timing_method or "events"


def instance_timing(result: Any) -> dict[str, Any]:
    """What one timed replay of the recorded configuration says about its measurement.

    Parameters:
        result: the replay result.

    Returns:
        Its method, cache mode (and each mode's time under auto), replayed and in-app
        times, fidelity and SM clock.
    """
    return {
        "instance": result.instance,
        "method": method_label(result),
        "cache": result.cache,
        "mode_times_ms": dict(result.mode_times),
        "replayed_ms": result.time,
        "app_time_ms": result.app_time_ms,
        "fidelity": result.fidelity,
        "sm_clock_mhz": result.sm_clock_mhz,
    }


def baseline_timing(results: Sequence[Any], requested: str) -> dict[str, Any] | None:
    """The baseline's ``timing``.

    Parameters:
        results: its replay results (one per instance tuned).
        requested: the cache mode asked for.

    Returns:
        The timing (each instance's when there are several); None for compile-only
        results (nothing was timed).
    """
    if not results or not all(r.times for r in results):
        return None
    per_instance = [instance_timing(r) for r in results]
    first = per_instance[0]
    timing = {**{k: v for k, v in first.items() if k != "instance"},
              "cache_requested": requested,
              "cache_modes": [t["cache"] for t in per_instance]}
    if len(per_instance) > 1:
        timing["instances"] = per_instance
    return timing


def resolved_modes(baseline: dict[str, Any], requested: str, instances: int, compile_only: bool,
                   study: str) -> list[str]:
    """The cache mode of each instance's trials: the one the baseline measured in (auto
    resolved there), the one asked for when nothing was timed (compile-only). A resumed
    study keeps its mode; asking for another is refused in one line, since trials
    measured in two modes do not compare.

    Parameters:
        baseline: the baseline's measurements.
        requested: the cache mode asked for.
        instances: the instances tuned.
        compile_only: whether nothing is timed.
        study: the study's name (for the message).

    Returns:
        One cache mode per instance.

    Raises:
        TuneError: a resumed study measured in another mode than the one asked for.
    """
    timing = baseline.get("timing")
    if timing and timing.get("cache_modes"):
        modes = list(timing["cache_modes"])
    elif compile_only or "values" not in baseline or "time" not in baseline.get("metrics", {}):
        return [requested] * instances
    else:
        modes = [LEGACY_MODE] * instances  # a study timed before cache modes: warm
    if requested != AUTO and any(m != requested for m in modes):
        raise TuneError(
            f"study {study} was measured in cache mode {', '.join(sorted(set(modes)))}: resume it "
            f"with --cache {modes[0] if len(set(modes)) == 1 else AUTO} (or auto), or tune with "
            f"--cache {requested} under another --study name")
    return modes


def timing_line(timing: dict[str, Any] | None) -> str:
    """The baseline's timing for the console.

    Parameters:
        timing: what :func:`baseline_timing` gave; None when nothing was timed.

    Returns:
        One line: ``timing: cupti, cache app (auto: warm 0.0136, app 0.0502, cold 0.0611
        ms), fidelity 1.01 (replayed 0.0512 / in-app 0.0507 ms), SM 1980 MHz``.
    """
    if not timing:
        return "timing: compile-only (nothing timed)"
    modes = timing.get("cache_modes") or [timing.get("cache")]
    cache = ", ".join(dict.fromkeys(modes))
    parts = [timing.get("method") or "events"]
    chosen = f"cache {cache}"
    if timing.get("cache_requested") == AUTO:
        measured = timing.get("mode_times_ms") or {}
        chosen += (" (auto: " + ", ".join(f"{m} {t:.4g}" for m, t in measured.items()) + " ms)"
                   if measured else " (auto)")
    parts.append(chosen)
    fidelity, app, replayed = timing.get("fidelity"), timing.get("app_time_ms"), timing.get("replayed_ms")
    parts.append(f"fidelity {fidelity:.2f} (replayed {replayed:.4g} / in-app {app:.4g} ms)"
                 if fidelity is not None and app and replayed else "fidelity - (no in-app time recorded)")
    if timing.get("sm_clock_mhz"):
        parts.append(f"SM {timing['sm_clock_mhz']:.0f} MHz")
    if len(timing.get("instances") or []) > 1:
        parts.append(f"first of {len(timing['instances'])} instances")
    return "timing: " + ", ".join(parts)
