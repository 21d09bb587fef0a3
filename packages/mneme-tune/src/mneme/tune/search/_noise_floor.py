"""A kernel's noise floor across processes: how far its baseline's median moves from one
tuning run to the next, kept beside the database.

Within one run, confirmation measures the baseline and the best interleaved, so their
spread is the noise of that process on that GPU at that moment. A second run, in a new
process, can find the baseline a few per cent off (another clock, another placement in
memory, another temperature): a speedup smaller than that would not hold up on the next
run. Every confirmation appends the baseline median it measured to the instance's record
(``.mneme/noise/<static>/<dynamic>.json``, per clock policy and GPU, the last
``KEPT`` runs), and the floor is their relative half-range once two runs agree on policy and
GPU. A speedup whose gain is below the floor is reported as none.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from mneme.replay.files import write_atomic

__all__ = ["across_runs", "noise_path", "remember"]

#: runs kept per instance, clock policy and GPU
KEPT = 16


def noise_path(instance) -> Path:
    return (Path(instance.kernel.db.root) / ".mneme" / "noise" / instance.kernel.static_hash /
            f"{instance.dynamic_hash}.json")


def _load(path: Path) -> list[dict[str, Any]]:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
            return []
        data = json.loads(path.read_text())
        return [r for r in data.get("runs", []) if isinstance(r, dict) and isinstance(r.get("median_ms"), float)]
    except (OSError, ValueError, AttributeError):
        return []


def remember(instance, median_ms: float, key: str) -> list[float]:
    """Appends this run's baseline median (``key``: clock policy and GPU) and returns the
    medians of the kept runs of that key, this one last. A read-only database keeps
    nothing: only this run's median comes back."""
    path = noise_path(instance)
    runs = _load(path)
    runs.append({"median_ms": float(median_ms), "key": key, "pid": os.getpid(), "time": time.time()})
    same = [r for r in runs if r.get("key") == key][-KEPT:]
    others = [r for r in runs if r.get("key") != key][-4 * KEPT:]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"runs": others + same}, indent=1).encode())
    except OSError:
        return [float(median_ms)]
    return [r["median_ms"] for r in same]


def across_runs(medians: list[float]) -> float:
    """The relative half-range of the runs' medians (0 with fewer than two)."""
    if len(medians) < 2:
        return 0.0
    middle = sorted(medians)[len(medians) // 2]
    return (max(medians) - min(medians)) / 2 / middle if middle else 0.0
