"""Which kernels a whole-application tuning run takes, and on which of their instances.

Kernels are ranked by their share of the application's kernel time (all their launch
shapes together); ``--share S`` takes the fewest that cover S of it, ``--kernels N`` the N
largest. A kernel is tuned over the instances that carry its time: the largest instance
of each of its largest shapes (up to MAX_INSTANCES), in one study, so that the
configuration found holds for the launches that matter (``--per kernel``). Kernels
that cannot be tuned (not recorded: library code without a recorded instance) are kept in
the selection with the reason, so the report accounts for every share it was asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mneme.replay.db import Database, Instance, Kernel

from ..errors import TuneError
from .profile import ProfileRow, Ranking

__all__ = ["MAX_INSTANCES", "KernelChoice", "Selection", "select"]

#: instances of one kernel in its study: each adds a replay to every trial
MAX_INSTANCES = 3


@dataclass
class KernelChoice:
    """One kernel of the application and what the run does with it."""

    name: str  # mangled
    display_name: str
    share: float  # of the application's kernel time, every shape of it
    total_ms: float
    rows: list[ProfileRow]  # its launch shapes, largest first
    kernel: Kernel | None = None
    instances: list[Instance] = field(default_factory=list)
    #: the share of the application's kernel time the studied instances' shapes carry
    studied_share: float = 0.0
    #: why it is not tuned ("" when it is)
    skipped: str = ""

    @property
    def tunable(self) -> bool:
        return not self.skipped


@dataclass
class Selection:
    ranking: Ranking
    kernels: list[KernelChoice]
    asked: str  # "share 0.9" / "top 5"

    @property
    def covered(self) -> float:
        """The share of the application's kernel time of the kernels taken."""
        return sum(k.share for k in self.kernels)

    @property
    def tuned_share(self) -> float:
        return sum(k.share for k in self.kernels if k.tunable)


def _instance_time(instance: Instance) -> float:
    app = instance.app_time
    if app is None or app.median_ms is None:
        return 0.0
    return app.median_ms * (app.launches + app.snapshotted + (1 if app.first_ms is not None else 0))


def _choose_instances(db: Database, choice: KernelChoice) -> None:
    for row in choice.rows:
        if len(choice.instances) >= MAX_INSTANCES:
            break
        candidates = []
        for spec in row.instances:
            try:
                candidates.append(db.instance(spec))
            except Exception:  # noqa: BLE001 - a damaged instance is not tuned (mneme check says why)
                continue
        if not candidates:
            continue
        choice.instances.append(max(candidates, key=_instance_time))
        choice.studied_share += row.share


def select(db: Database, ranking: Ranking, share: float | None = None, top: int | None = None) -> Selection:
    """The kernels covering ``share`` of the application's kernel time (or the ``top``
    largest), each with its instances to study or the reason it is skipped."""
    if share is not None and not 0 < share <= 1:
        raise TuneError(f"--share {share}: give a fraction of the application's kernel time in (0, 1]")
    by_name: dict[str, KernelChoice] = {}
    for row in ranking.rows:
        choice = by_name.get(row.entry.name)
        if choice is None:
            choice = by_name[row.entry.name] = KernelChoice(
                row.entry.name, row.display_name, 0.0, 0.0, [], kernel=row.kernel)
        choice.share += row.share
        choice.total_ms += row.entry.total_ms
        choice.rows.append(row)
    ordered = sorted(by_name.values(), key=lambda c: -c.share)
    taken: list[KernelChoice] = []
    if top is not None:
        taken = ordered[:top]
    else:
        goal = 0.9 if share is None else share
        covered = 0.0
        for choice in ordered:
            if covered >= goal - 1e-12:
                break
            taken.append(choice)
            covered += choice.share
    for choice in taken:
        if choice.kernel is None:
            choice.skipped = ("not recorded (no code of it in the database: library code the "
                              "recorder could not capture, or left out by --kernel / -mr)")
            continue
        _choose_instances(db, choice)
        if not choice.instances:
            choice.skipped = "none of its launch shapes has a recorded instance"
    asked = f"top {top}" if top is not None else f"share {0.9 if share is None else share:g}"
    return Selection(ranking, taken, asked)
