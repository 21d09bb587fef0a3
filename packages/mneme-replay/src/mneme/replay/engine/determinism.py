"""What the unchanged kernel reproduces: a class per region, measured before verifying.

Some kernels never give the same bytes twice: float ``atomicAdd`` sums in another order,
compaction through an atomic counter writes its elements in another order, ``clock64()``
values differ on every run. Before the engine verifies any candidate of an instance it
runs the recorded configuration (the kernel compiled with the baseline pipeline, the
recorded launch) a few times, compares each region with the recorded epilogue and with
the other runs, and puts the region in one class:

- ``exact``: every run gives the recorded bytes; candidates are checked bit for bit;
- ``nondeterministic-order``: the same multiset of elements (4, 8 or 16 bytes wide), in
  another order; candidates are checked as multisets;
- ``nondeterministic-float``: float32/float64 values within a small relative spread;
  candidates are checked with a tolerance derived from the measured spread
  (``SPREAD_FACTOR`` times it, never below a few units in the last place);
- ``nondeterministic``: anything else (clock values, races); not checked, and said so.

The profile of an instance is kept in the database's private folder
(``.mneme/determinism/<static>/<dynamic>.json``, a cache that any replay can rebuild) so
``mneme show`` and later replays know it without a GPU.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..files import write_atomic
from .verify import Mismatch, Tolerance

EXACT = "exact"
ORDER = "nondeterministic-order"
FLOAT = "nondeterministic-float"
ANY = "nondeterministic"
CLASSES = (EXACT, ORDER, FLOAT, ANY)

#: runs of the unchanged kernel that decide the classes (the recording is one more sample)
DEFAULT_RUNS = 3
#: a float region whose elements differ by more than this (relative) is not "reordered sums"
MAX_FLOAT_SPREAD = 1e-3
#: tolerances are this many times the spread measured over the runs
SPREAD_FACTOR = 8.0
#: element widths an order-insensitive region is tried with, widest first
ORDER_WIDTHS = (16, 8, 4)
_FLOAT_DTYPES = ("float32", "float64")
_PROFILE_VERSION = 1


@dataclass(frozen=True)
class RegionClass:
    """How one region behaves under the unchanged kernel, and how it is verified."""

    kind: str = EXACT
    #: float class: the element type and the tolerance derived from the spread
    dtype: str | None = None
    atol: float = 0.0
    rtol: float = 0.0
    #: order class: the element width in bytes
    element: int = 0
    #: bytes that differed from the recording in at least one run
    differing_bytes: int = 0

    def tolerance(self, annotated: Tolerance | None = None) -> Tolerance:
        """The float check for this region (an annotated tolerance widens it)."""
        atol, rtol = self.atol, self.rtol
        if annotated is not None and annotated.dtype == self.dtype:
            atol, rtol = max(atol, annotated.atol), max(rtol, annotated.rtol)
        return Tolerance(self.dtype, atol=atol, rtol=rtol)

    def describe(self) -> str:
        if self.kind == FLOAT:
            return f"{FLOAT} ({self.dtype}, atol {self.atol:.3g}, rtol {self.rtol:.3g})"
        if self.kind == ORDER:
            return f"{ORDER} ({self.element}-byte elements)"
        if self.kind == ANY:
            return f"{ANY} (not checked; {self.differing_bytes} bytes differ between runs)"
        return EXACT

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RegionClass:
        value = cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        if value.kind not in CLASSES:
            raise ValueError(f"unknown determinism class {value.kind!r}")
        return value


@dataclass
class DeterminismProfile:
    """The classes of an instance's regions, measured over ``runs`` runs."""

    runs: int
    pipeline: str
    regions: dict[str, RegionClass] = field(default_factory=dict)

    def of(self, region: str) -> RegionClass:
        return self.regions.get(region, RegionClass())

    @property
    def exact(self) -> bool:
        return all(c.kind == EXACT for c in self.regions.values())

    def classes(self) -> dict[str, str]:
        """Region name → class name, for the regions that are not exact."""
        return {name: c.kind for name, c in sorted(self.regions.items()) if c.kind != EXACT}

    def summary(self) -> str:
        if self.exact:
            return f"every region exact over {self.runs} runs"
        counts: dict[str, int] = {}
        for c in self.regions.values():
            counts[c.kind] = counts.get(c.kind, 0) + 1
        return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + f" (over {self.runs} runs)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": _PROFILE_VERSION,
            "runs": self.runs,
            "pipeline": self.pipeline,
            "regions": {k: v.to_dict() for k, v in sorted(self.regions.items())},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeterminismProfile:
        if data.get("version") != _PROFILE_VERSION:
            raise ValueError("unknown determinism profile version")
        return cls(
            int(data["runs"]),
            str(data["pipeline"]),
            {str(k): RegionClass.from_dict(v) for k, v in data["regions"].items()},
        )


# ------------------------------------------------------------------ classification


def classify(recorded: np.ndarray, runs: list[np.ndarray]) -> RegionClass:
    """The class of a region from its recorded bytes and the bytes of each run."""
    recorded = np.ascontiguousarray(recorded).view(np.uint8).reshape(-1)
    samples = [np.ascontiguousarray(r).view(np.uint8).reshape(-1) for r in runs]
    differ = np.zeros(recorded.size, dtype=bool)
    for s in samples:
        differ |= s != recorded
    count = int(differ.sum())
    if count == 0:
        return RegionClass()
    for width in ORDER_WIDTHS:
        if recorded.size % width == 0 and all(_same_multiset(recorded, s, width) for s in samples):
            return RegionClass(ORDER, element=width, differing_bytes=count)
    for dtype in _FLOAT_DTYPES:
        found = _float_spread(recorded, samples, np.dtype(dtype))
        if found is not None:
            atol, rtol = found
            return RegionClass(FLOAT, dtype=dtype, atol=atol, rtol=rtol, differing_bytes=count)
    return RegionClass(ANY, differing_bytes=count)


def _rows(data: np.ndarray, width: int) -> np.ndarray:
    """Elements of ``width`` bytes as sortable rows (one void scalar per element)."""
    return np.sort(data.view(np.dtype((np.void, width))))


def _same_multiset(a: np.ndarray, b: np.ndarray, width: int) -> bool:
    return bool(np.array_equal(_rows(a, width), _rows(b, width)))


def _float_spread(recorded: np.ndarray, samples: list[np.ndarray], dtype: np.dtype):
    """(atol, rtol) when every run's values are within MAX_FLOAT_SPREAD of the recording."""
    if recorded.size % dtype.itemsize:
        return None
    ref = recorded.view(dtype).astype(np.float64)
    max_abs = max_rel = 0.0
    with np.errstate(all="ignore"):
        for s in samples:
            got = s.view(dtype).astype(np.float64)
            bits_differ = s.view(f"u{dtype.itemsize}") != recorded.view(f"u{dtype.itemsize}")
            if not bits_differ.any():
                continue
            a, b = got[bits_differ], ref[bits_differ]
            if not (np.isfinite(a).all() and np.isfinite(b).all()):
                return None
            tiny = np.finfo(dtype).tiny  # subnormal "values" are integers seen as floats
            if ((a != 0) & (np.abs(a) < tiny)).any() or ((b != 0) & (np.abs(b) < tiny)).any():
                return None
            diff = np.abs(a - b)
            rel = diff / np.maximum(np.abs(b), np.finfo(dtype).tiny)
            if rel.max() > MAX_FLOAT_SPREAD:
                return None
            max_abs, max_rel = max(max_abs, float(diff.max())), max(max_rel, float(rel.max()))
    ulp = float(np.finfo(dtype).eps)
    return SPREAD_FACTOR * max_abs, max(SPREAD_FACTOR * max_rel, 4 * ulp)


# ------------------------------------------------------------------ verification by class


def sorted_elements(data: np.ndarray, width: int) -> np.ndarray:
    """``data``'s ``width``-byte elements in sorted order (one side of a multiset check)."""
    return _rows(np.ascontiguousarray(data).view(np.uint8).reshape(-1), width)


def order_mismatch(name: str, address: int, actual: np.ndarray, recorded: np.ndarray,
                   width: int, *, presorted: bool = False) -> Mismatch | None:
    """A multiset comparison of ``width``-byte elements (order class). ``presorted``:
    ``recorded`` is already ``sorted_elements(recorded, width)`` (kept across trials)."""
    a = sorted_elements(actual, width)
    b = recorded if presorted else sorted_elements(recorded, width)
    if np.array_equal(a, b):
        return None
    differ = np.flatnonzero(a != b)
    return Mismatch(name, address, int(b.size) * width, f"{width}-byte multiset", int(differ.size),
                    int(differ[0]) * width if differ.size else 0)


# ------------------------------------------------------------------ the cache


def profile_path(instance) -> Path:
    db = instance.kernel.db
    return Path(db.root) / ".mneme" / "determinism" / instance.kernel.static_hash / (
        f"{instance.dynamic_hash}.json")


def load_profile(instance) -> DeterminismProfile | None:
    """The stored profile of ``instance`` (None when not measured or unreadable)."""
    path = profile_path(instance)
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 24:
            return None
        profile = DeterminismProfile.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    names = {r.name for r in instance.regions}
    return profile if set(profile.regions) <= names else None


def store_profile(instance, profile: DeterminismProfile) -> bool:
    """Keep the profile beside the database (atomically); False where it is read-only."""
    path = profile_path(instance)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(profile.to_dict(), indent=1, sort_keys=True).encode())
        return True
    except OSError:
        return False
