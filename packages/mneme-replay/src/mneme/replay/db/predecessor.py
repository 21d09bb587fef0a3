"""The launch that ran just before an instance on its stream in the recorded application
(format revision "predecessor", docs/format.md): its kernel and the memory it may have
written, so that replay's ``app`` cache mode can leave those bytes in L2 as the
application did. Databases recorded before the revision have none (None)."""

from __future__ import annotations

from dataclasses import dataclass

from .metadata import Array, Int, Nullable, Obj, Str

#: metadata key inside the instance's mneme attributes
PREDECESSOR_KEY = "predecessor"

_U64 = Int(0, (1 << 64) - 1)
PREDECESSOR_SCHEMA = Obj(
    {
        "kernel": Str(max_len=1 << 16),
        "writes": Nullable(Array(Array(_U64, min_len=2, max_len=2), max_len=1 << 16)),
    },
    {},
)


@dataclass(frozen=True)
class Predecessor:
    """``kernel``: its demangled name; ``writes``: (address, bytes) it may have written
    (its pointer arguments' allocations from the pointer on, pointers to const left out),
    None when the recorder could not read its arguments."""

    kernel: str
    writes: tuple[tuple[int, int], ...] | None

    @classmethod
    def from_json(cls, value, where: str) -> Predecessor:
        PREDECESSOR_SCHEMA.check(value, f"{where}.{PREDECESSOR_KEY}")  # CorruptDataError
        writes = value["writes"]
        return cls(value["kernel"], None if writes is None else tuple((int(a), int(n)) for a, n in writes))

    def describe(self) -> str:
        if self.writes is None:
            return f"{self.kernel} (what it wrote is unknown)"
        total = sum(n for _, n in self.writes)
        return f"{self.kernel}, which may have written {len(self.writes)} range(s), {total} bytes"
