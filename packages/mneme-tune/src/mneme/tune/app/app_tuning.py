"""Tuning a whole application: every selected kernel a study (over the instances that
carry its time), all on one pool of workers (every GPU given), under one budget spent in
two rounds (budget.py).

    result = tune_application(db, selection, "launch,pipeline", options, budget, events)
    result.kernels[0].outcome.confirmation["speedup"]

A kernel whose space needs LLVM IR it does not have (an nvcc build, library code) is
tuned on the spaces it has: launch and ptxas options (PTX), or the launch alone (cubin).
Studies are named per kernel, so a second run on the same storage resumes them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mneme.replay.db import Database

from ..errors import TuneError
from ..tune_types import TuneOptions, TuneOutcome
from ..tuner import Tuner
from .budget import Budget, first_round, one_round, second_round
from .selection import KernelChoice, Selection

__all__ = ["AppTuneResult", "KernelRun", "promising", "tune_application"]

#: spaces a kernel without LLVM IR falls back to, in order
NO_IR_SPACES = ("launch,bounds", "launch")
#: a first round whose best is this much better than the recorded configuration, or that
#: improved this much in its second half, is promising (besides a significant speedup)
IMPROVING = 0.02


@dataclass
class KernelRun:
    """One kernel's part of the run."""

    choice: KernelChoice
    spaces: str = ""
    note: str = ""  # how its study differs from what was asked (spaces, instances)
    tuner: Tuner | None = None
    outcome: TuneOutcome | None = None
    trials: int = 0  # finished trials of its study, this run's and earlier ones'
    seconds: float = 0.0
    stopped: str = ""  # why it got no second round
    failed: bool = False  # its tuning raised (stopped says why): no further round

    @property
    def tuned(self) -> bool:
        return self.outcome is not None and bool(self.outcome.best)


@dataclass
class AppTuneResult:
    selection: Selection
    budget: Budget
    runs: list[KernelRun]
    seconds: float = 0.0
    devices: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Events:
    """What the command shows while the run goes on (all optional)."""

    kernel_starts: Callable[[KernelRun, int, float], None] | None = None  # run, round, amount
    progress: Callable | None = None  # Tuner.run's on_progress
    kernel_done: Callable[[KernelRun, int], None] | None = None


def _values(outcome: TuneOutcome) -> list[tuple[int, float]]:
    return sorted((r.number, r.values[0]) for r in outcome.trials
                  if r.state == "complete" and r.values)


def promising(outcome: TuneOutcome | None) -> bool:
    """Whether a kernel deserves more trials: a significant speedup so far, or a best that
    still improved in the second half of its trials by more than IMPROVING."""
    if outcome is None or not outcome.best:
        return False
    if outcome.confirmation.get("significant") and (outcome.confirmation.get("speedup") or 0) > 1:
        return True
    values = _values(outcome)
    if len(values) < 4:
        return False
    half = len(values) // 2
    early = min(v for _, v in values[:half])
    late = min(v for _, v in values[half:])
    return late < early * (1 - IMPROVING)


def _build(db: Database, run: KernelRun, spaces: str, options: TuneOptions) -> None:
    """The kernel's tuner: its instances in one study where their spaces agree (else the
    largest alone), on the spaces its code allows."""
    choice = run.choice
    attempts = [spaces]
    if choice.kernel is not None and not choice.kernel.has_ir:
        attempts += [s for s in NO_IR_SPACES if s != spaces]
    last: TuneError | None = None
    for space in attempts:
        for instances in ([choice.instances, choice.instances[:1]] if len(choice.instances) > 1
                          else [choice.instances]):
            try:
                run.tuner = Tuner(db, instances, space, options)
            except TuneError as error:
                last = error
                continue
            notes = []
            if space != spaces:
                notes.append(f"spaces {space} (its code has no LLVM IR)")
            if len(instances) < len(choice.instances):
                notes.append("its largest instance alone (its instances' spaces differ)")
                choice.instances = list(instances)
                choice.studied_share = choice.rows[0].share if choice.rows else 0.0
            run.spaces, run.note = space, "; ".join(notes)
            return
    choice.skipped = f"cannot be tuned: {last}"


def _run_round(run: KernelRun, amount: float, budget: Budget, executor, events: Events,
               round_index: int) -> None:
    tuner = run.tuner
    assert tuner is not None
    if budget.trials is not None:
        target = run.trials + int(amount)
        tuner.options = dataclasses.replace(tuner.options, trials=max(target, 1), timeout=None)
    else:
        # seconds: as many trials as fit, the study's total far ahead of what is done
        tuner.options = dataclasses.replace(tuner.options, trials=run.trials + 1_000_000, timeout=amount)
    if events.kernel_starts:
        events.kernel_starts(run, round_index, amount)
    started = time.monotonic()
    try:
        run.outcome = tuner.run(on_progress=events.progress, executor=executor)
    except TuneError as error:
        # One kernel that cannot be tuned (no launch shape runs its recorded code, say)
        # costs that kernel, never the application's run: said in its row.
        run.seconds += time.monotonic() - started
        run.stopped = f"tuning failed: {error}"
        run.failed = True
        if events.kernel_done:
            events.kernel_done(run, round_index)
        return
    run.seconds += time.monotonic() - started
    run.trials = len([t for t in run.outcome.trials if t.state in ("complete", "failed")])
    if events.kernel_done:
        events.kernel_done(run, round_index)


def _report_only(run: KernelRun, executor, events: Events) -> None:
    """(--merge-report) The kernel's study as the shared storage holds it: no new trial."""
    tuner = run.tuner
    assert tuner is not None
    run.trials = tuner._finished(tuner.study)
    if run.trials == 0:
        run.stopped = "no trials in its shared study"
        return
    _run_round(run, 0, Budget(trials=run.trials), executor, events, 1)


def tune_application(db: Database, selection: Selection, spaces: str, options: TuneOptions,
                     budget: Budget, events: Events | None = None, *, rotate: int = 0, rounds: int = 2,
                     report_only: bool = False) -> AppTuneResult:
    """``rotate``: start at that kernel (a job array's task index, slurm.py); ``rounds``: 1
    spends the budget at once (tasks sharing the studies); ``report_only``: no new trial."""
    events = events or Events()
    started = time.monotonic()
    runs = [KernelRun(choice) for choice in selection.kernels]
    for run in runs:
        if run.choice.tunable:
            _build(db, run, spaces, options)
    live = [r for r in runs if r.tuner is not None]
    result = AppTuneResult(selection, budget, runs)
    if not live:
        result.seconds = time.monotonic() - started
        return result
    from ..worker_start import make_executor

    executor = make_executor(live[0].tuner)
    result.devices = list(executor.device_info)
    try:
        shares = [r.choice.share for r in live]
        first = first_round(budget, shares) if rounds == 2 else one_round(budget, shares)
        spent = 0.0
        start = rotate % len(live)
        for run, amount in zip(live[start:] + live[:start], first[start:] + first[:start], strict=True):
            if report_only:
                _report_only(run, executor, events)
                continue
            if amount <= 0:
                run.stopped = f"no budget left for it ({budget.describe(budget.total)} for {len(live)} kernels)"
                continue
            before = time.monotonic()
            done_before = run.trials
            _run_round(run, amount, budget, executor, events, 1)
            spent += (run.trials - done_before) if budget.trials is not None else time.monotonic() - before
        if rounds == 1 or report_only:  # (the second round needs every kernel's first, seen by one process)
            result.seconds = time.monotonic() - started
            return result
        hopeful = [promising(r.outcome) for r in live]
        for run, hope in zip(live, hopeful, strict=True):
            if run.outcome is not None and not hope and not run.stopped:
                run.stopped = (f"stopped after {run.trials} trials: nothing beyond its noise floor and "
                               "no longer improving")
        second = second_round(budget, spent, shares, hopeful)
        for run, amount in zip(live, second, strict=True):
            if amount >= 1 or (budget.seconds is not None and amount > 0.5):
                _run_round(run, amount, budget, executor, events, 2)
    finally:
        executor.shutdown(wait=False, cancel_futures=True)
    result.seconds = time.monotonic() - started
    return result
