"""Where the recorded application's GPU time goes: every kernel and launch shape of its
profile (the recorder's ``app_profile``, CUPTI times of every launch) with its share of the
application's kernel time, the cumulative share, what tuning can change in it, and the
Amdahl bound (the application's kernel time were that kernel twice as fast).

    ranking = rank(Database.open("app.rdb"))
    for row in ranking.rows: row.share, row.cumulative, row.tunable, row.bound_2x
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mneme.replay.db import Database, Kernel
from mneme.replay.db.app_profile import AppProfile, ProfileEntry

from ..errors import NoProfileError

__all__ = ["NoProfileError", "ProfileRow", "Ranking", "rank", "tunable_of"]

#: what tuning can change in a kernel, by how its code was recorded
TUNABLE = {
    "ir": "IR: every space (pipeline, launch, specialisation, bounds)",
    "ptx": "PTX: launch and ptxas options",
    "cubin": "cubin only: launch shape alone",
    "none": "not recorded: no code",
}


@dataclass(frozen=True)
class ProfileRow:
    """One launch shape of one kernel in the recorded run.

    Attributes:
        entry: the profile entry (name, device, launch shape, launches, times, instances).
        kernel: the recorded kernel of this name; None: not recorded.
        display_name: the kernel's demangled name.
        share: its share of the application's kernel time.
        cumulative: this row's share and every larger one's.
        tunable: what tuning can change in it: a key of TUNABLE.
        origin: the file its code came from (library or executable), "" unknown
        bound_2x: the application's kernel time (ms) were this shape twice as fast
    """

    entry: ProfileEntry
    kernel: Kernel | None
    display_name: str
    share: float
    cumulative: float
    tunable: str
    origin: str
    bound_2x: float

    @property
    def instances(self) -> tuple[str, ...]:
        return self.entry.instances

    def to_json(self) -> dict:
        """The row as ``mneme profile --json`` prints it.

        Returns:
            The JSON data.
        """
        e = self.entry
        return {"kernel": self.display_name, "name": e.name,
                "static_hash": self.kernel.static_hash if self.kernel else None,
                "device": e.device, "grid": list(e.grid), "block": list(e.block),
                "shared_mem": e.shared_mem, "launches": e.launches, "total_ms": e.total_ms,
                "median_ms": e.median_ms, "share": self.share, "cumulative": self.cumulative,
                "tunable": self.tunable, "origin": self.origin or None,
                "instances": list(e.instances), "kernel_ms_if_2x": self.bound_2x}


@dataclass(frozen=True)
class Ranking:
    """The profile's rows, largest total first, and the application's totals.

    Attributes:
        database: the database's folder.
        profile: the recorded profile.
        rows: one per launch shape of a kernel, largest total first.
        by_kernel: kernel name -> share
    """

    database: Path
    profile: AppProfile
    rows: tuple[ProfileRow, ...]
    by_kernel: dict[str, float] = field(default_factory=dict)

    @property
    def kernel_ms(self) -> float:
        return self.profile.kernel_ms

    def covering(self, share: float) -> list[ProfileRow]:
        """The rows that carry a share of the application's kernel time.

        Parameters:
            share: the share (0 to 1).

        Returns:
            The fewest rows, largest first, whose shares sum to at least ``share``.
        """
        out: list[ProfileRow] = []
        for row in self.rows:
            if out and out[-1].cumulative >= share - 1e-12:
                break
            out.append(row)
        return out

    def to_json(self) -> dict:
        """The ranking as ``mneme profile --json`` prints it.

        Returns:
            The JSON data.
        """
        p = self.profile
        return {"database": str(self.database), "method": p.method, "kernel_ms": p.kernel_ms,
                "launches": p.launches, "dropped": p.dropped, "instances_tagged": p.instances_tagged,
                "rows": [r.to_json() for r in self.rows]}


def tunable_of(kernel: Kernel | None) -> str:
    """What tuning can change in ``kernel``: "ir", "ptx", "cubin" or "none"."""
    if kernel is None:
        return "none"
    if kernel.has_ir:
        return "ir"
    try:
        kinds = kernel.code_kinds
    except Exception:  # noqa: BLE001 - damaged code: nothing to tune
        return "none"
    return "ptx" if "ptx" in kinds else ("cubin" if "cubin" in kinds else "none")


def _demangled(names: list[str]) -> dict[str, str]:
    from mneme.instrument.demangle import demangle

    return dict(zip(names, demangle(names), strict=True))


def rank(db: Database) -> Ranking:
    """A recording's kernel-time profile, ranked (what ``mneme profile`` shows).

    Parameters:
        db: the database.

    Returns:
        Its rows, largest total first, with the application's totals.

    Raises:
        NoProfileError: the database holds no profile (one line saying how to get one).
    """
    profile = db.app_profile
    if profile is None:
        raise NoProfileError(
            f"{db.root} holds no application profile (in-app kernel times): it was recorded "
            "before mneme recorded them, or with MNEME_RECORD_APP_TIME=0 or without CUPTI; "
            "record the application again with mneme record (CUPTI comes with the CUDA "
            "toolkit, or pip install nvidia-cuda-cupti)")
    kernels: dict[str, Kernel] = {}
    kernel: Kernel | None
    for kernel in db.kernels():
        if kernel.problem() is None:
            kernels.setdefault(kernel.name, kernel)
    unknown = sorted({e.name for e in profile.entries if e.name not in kernels})
    names = _demangled(unknown) if unknown else {}
    total = profile.kernel_ms or 1e-30
    rows: list[ProfileRow] = []
    cumulative = 0.0
    by_kernel: dict[str, float] = {}
    for entry in profile.entries:
        kernel = kernels.get(entry.name)
        share = entry.total_ms / total
        cumulative += share
        by_kernel[entry.name] = by_kernel.get(entry.name, 0.0) + share
        rows.append(ProfileRow(
            entry=entry, kernel=kernel,
            display_name=kernel.demangled_name if kernel else names.get(entry.name, entry.name),
            share=share, cumulative=min(cumulative, 1.0), tunable=tunable_of(kernel),
            origin=(kernel.origin or "") if kernel else "",
            bound_2x=profile.kernel_ms - entry.total_ms / 2))
    return Ranking(Path(db.root), profile, tuple(rows), by_kernel)
