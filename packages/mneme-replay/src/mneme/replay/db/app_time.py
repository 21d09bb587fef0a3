"""An instance's in-application time (format revision "app_time", docs/format.md): what
the instance's own launches (``scope`` "instance": same kernel, shape and arguments) or
the kernel's launches of the instance's shape (``scope`` "key") took inside the recorded
application, by the GPU's own timestamps. Databases recorded before the revision have
none (None); those recorded before the "instance" scope are "key"."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .metadata import Float, Int, Nullable, Obj, OneOf

#: metadata key inside the instance's mneme attributes
APP_TIME_KEY = "app_time"

_MS = Nullable(Float(0.0, 1e9))
APP_TIME_SCHEMA = Obj(
    {
        "method": OneOf(("cupti", "events")),
        "median_ms": _MS,
        "p25_ms": _MS,
        "p75_ms": _MS,
        "launches": Int(0, (1 << 63) - 1),
        "first_ms": _MS,
    },
    {"snapshotted": Int(0, (1 << 63) - 1), "min_ms": _MS, "max_ms": _MS,
     "scope": OneOf(("instance", "key")), "key_median_ms": _MS, "key_launches": Int(0, (1 << 63) - 1)},
)


@dataclass(frozen=True)
class AppTime:
    """The instance's launches in the recorded run (``scope`` "instance"), or, where none
    of its own was timed unperturbed or launches were not tagged, those of its key (kernel,
    grid, block, dynamic shared memory; ``scope`` "key"); the first launch and the
    snapshotted ones (perturbed by the snapshot) left out of the median; ``first_ms`` is
    the first launch's own time (None when it was snapshotted). ``median_ms`` is None when
    no other launch was timed. With scope "instance", ``key_median_ms`` and
    ``key_launches`` give the key's for comparison."""

    method: str
    median_ms: float | None
    p25_ms: float | None
    p75_ms: float | None
    launches: int
    first_ms: float | None
    snapshotted: int = 0
    min_ms: float | None = None
    max_ms: float | None = None
    scope: str = "key"
    key_median_ms: float | None = None
    key_launches: int | None = None

    @classmethod
    def from_json(cls, value, where: str) -> AppTime:
        APP_TIME_SCHEMA.check(value, f"{where}.{APP_TIME_KEY}")  # CorruptDataError
        fields = cls.__dataclass_fields__
        return cls(**{k: v for k, v in value.items() if k in fields})

    def to_json(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """One line: 'median 0.0507 ms (IQR 0.0501-0.0512) over 31 launches, first 0.2190
        ms, 1 snapshotted (cupti)'."""
        if self.median_ms is None:
            text = "no launch timed outside the snapshots"
        else:
            own = " of this instance" if self.scope == "instance" else ""
            text = (f"median {self.median_ms:.4f} ms (IQR {self.p25_ms:.4f}-{self.p75_ms:.4f})"
                    f" over {self.launches} launches{own}")
        if self.first_ms is not None:
            text += f", first {self.first_ms:.4f} ms"
        if self.snapshotted:
            text += f", {self.snapshotted} snapshotted"
        return f"{text} ({self.method})"
