"""The recorded application's kernel-time profile (format revision "app_profile",
docs/format.md): every kernel and launch shape the application launched while it was
recorded — recorded or not, library code included — with its launches and its total
time by the GPU's own timestamps. The recorder writes it into the root's attributes at
exit; databases recorded before the revision, or with in-app timing off, have none."""

from __future__ import annotations

from dataclasses import dataclass

from .metadata import Array, Bool, Float, Int, Nullable, Obj, OneOf, Str

#: metadata key inside the root's mneme attributes
APP_PROFILE_KEY = "app_profile"

_COUNT = Int(0, (1 << 63) - 1)
_MS = Float(0.0, 1e12)
_DIM = Array(Int(0, (1 << 32) - 1), min_len=3, max_len=3)
ENTRY_SCHEMA = Obj({
    "name": Str(max_len=1 << 16),
    "device": Int(0, 1 << 16),
    "grid": _DIM,
    "block": _DIM,
    "shared_mem": Int(0, (1 << 32) - 1),
    "launches": _COUNT,
    "snapshotted": _COUNT,
    "total_ms": _MS,
    "median_ms": Nullable(_MS),
    "instances": Array(Str(max_len=33, pattern=r"[0-9a-f]{16}/[0-9a-f]{16}")),
})
APP_PROFILE_SCHEMA = Obj(
    {
        "method": OneOf(("cupti", "events")),
        "kernel_ms": _MS,
        "launches": _COUNT,
        "kernels": Array(ENTRY_SCHEMA),
    },
    {"dropped": _COUNT, "instances_tagged": Bool()},
)


@dataclass(frozen=True)
class ProfileEntry:
    """One kernel at one launch shape (name, grid, block, dynamic shared memory) in the
    recorded run: ``launches`` in all, ``total_ms`` their time (a snapshotted launch counts
    at the key's median, its own being perturbed), ``instances`` the recorded instances
    (``STATIC/DYNAMIC``) of this shape."""

    name: str
    device: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    launches: int
    snapshotted: int
    total_ms: float
    median_ms: float | None
    instances: tuple[str, ...]

    @property
    def shape(self) -> str:
        """'64x1x1 / 256x1x1 / 0': grid, block, dynamic shared memory."""
        return f"{'x'.join(map(str, self.grid))} / {'x'.join(map(str, self.block))} / {self.shared_mem}"


@dataclass(frozen=True)
class AppProfile:
    """Every launch shape of the recorded run, largest total time first."""

    method: str
    kernel_ms: float
    launches: int
    entries: tuple[ProfileEntry, ...]
    dropped: int = 0
    instances_tagged: bool = False

    @classmethod
    def from_json(cls, value, where: str) -> AppProfile:
        APP_PROFILE_SCHEMA.check(value, f"{where}.{APP_PROFILE_KEY}")  # CorruptDataError
        entries = tuple(
            ProfileEntry(e["name"], e["device"], tuple(e["grid"]), tuple(e["block"]), e["shared_mem"],
                         e["launches"], e["snapshotted"], float(e["total_ms"]),
                         None if e["median_ms"] is None else float(e["median_ms"]), tuple(e["instances"]))
            for e in value["kernels"])
        entries = tuple(sorted(entries, key=lambda e: -e.total_ms))
        return cls(value["method"], float(value["kernel_ms"]), value["launches"], entries,
                   value.get("dropped", 0), value.get("instances_tagged", False))
