"""The launch that ran just before an instance on its stream in the recorded application
(format revision "predecessor", docs/format.md): its kernel and the memory it may have
written and read, so that replay's ``app`` cache mode can leave L2 as that launch left it
in the application. Databases recorded before the revision have none (None); those
recorded before "reads" was added have writes only."""

from __future__ import annotations

from dataclasses import dataclass

from .metadata import Array, Int, Nullable, Obj, Str

#: metadata key inside the instance's mneme attributes
PREDECESSOR_KEY = "predecessor"

_U64 = Int(0, (1 << 64) - 1)
_RANGES = Nullable(Array(Array(_U64, min_len=2, max_len=2), max_len=1 << 16))
PREDECESSOR_SCHEMA = Obj({"kernel": Str(max_len=1 << 16), "writes": _RANGES}, {"reads": _RANGES})

Ranges = tuple[tuple[int, int], ...]


def _ranges(value) -> Ranges | None:
    return None if value is None else tuple((int(a), int(n)) for a, n in value)


@dataclass(frozen=True)
class Predecessor:
    """``kernel``: its demangled name; ``writes``: (address, bytes) it may have written
    (its pointer arguments' allocations from the pointer on, pointers to const left out),
    None when the recorder could not read its arguments; ``reads``: the same for its
    pointers to const (None also for recordings made before reads were kept)."""

    kernel: str
    writes: Ranges | None
    reads: Ranges | None = None

    @classmethod
    def from_json(cls, value, where: str) -> Predecessor:
        PREDECESSOR_SCHEMA.check(value, f"{where}.{PREDECESSOR_KEY}")  # CorruptDataError
        return cls(value["kernel"], _ranges(value["writes"]), _ranges(value.get("reads")))

    def describe(self) -> str:
        if self.writes is None:
            return f"{self.kernel} (what it wrote is unknown)"
        total = sum(n for _, n in self.writes)
        text = f"{self.kernel}, which may have written {len(self.writes)} range(s), {total} bytes"
        if self.reads:
            text += f" and read {len(self.reads)} range(s), {sum(n for _, n in self.reads)} bytes"
        return text
