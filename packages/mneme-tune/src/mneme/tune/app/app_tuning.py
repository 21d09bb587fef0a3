"""Tuning a whole application: every selected kernel a study (over the instances that
carry its time), under one budget spent in two rounds (budget.py). With one GPU every
kernel runs in turn on one pool of workers; with several, kernels run side by side, one
per GPU (lanes.py), each kernel's trials on one GPU.

    result = tune_application(db, selection, "launch,pipeline", options, budget, events)
    result.kernels[0].outcome.confirmation["speedup"]

A kernel whose space needs LLVM IR it does not have (an nvcc build, library code) is
tuned on the spaces it has: launch and ptxas options (PTX), or the launch alone (cubin).
Studies are named per kernel, so a second run on the same storage resumes them.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mneme.replay.db import Database

from ..errors import TuneError
from ..search._tuner import Tuner
from ..tune_types import TuneOptions, TuneOutcome
from .budget import MIN_SECONDS, Budget, first_round, one_round, second_round
from .lanes import make_lanes, run_on_lanes
from .selection import KernelChoice, Selection

__all__ = ["AppTuneResult", "KernelRun", "joining_options", "promising", "tune_application"]

#: spaces a kernel without LLVM IR falls back to, in order
NO_IR_SPACES = ("launch,bounds", "launch")
#: a lane joins a running kernel only while at least this much of its round is left
JOIN_MIN_TRIALS = 8
JOIN_MIN_SECONDS = 3.0
#: (a budget in seconds) what a kernel's round costs beyond its search: the baseline, the
#: confirmation, the report. Kept back from its search time so that the run ends within
#: the budget; a kernel whose turn comes with less than MIN_SECONDS of search left is skipped
ROUND_OVERHEAD_SECONDS = 2.0
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
    devices: list[int] = field(default_factory=list)  # the GPUs its rounds ran on
    running_on: list[int] = field(default_factory=list)  # the GPUs of the round running now
    #: (a budget in seconds) when the round running now ends; round_ready once its
    #: baseline is measured (lanes that join it wait, then read its tuner's options)
    round_deadline: float | None = None
    round_ready: threading.Event = field(default_factory=threading.Event)
    stopped: str = ""  # why it got no second round
    failed: bool = False  # its tuning raised (stopped says why): no further round
    #: each round's phases (run_phases.py: baseline, search, confirmation, ...), the
    #: worker restarts in it and its trials, in order: where the kernel's time went
    rounds: list[dict] = field(default_factory=list)
    #: tuners that joined its rounds so far (each gets its own seed: joining_options)
    joins: itertools.count = field(default_factory=itertools.count)

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
    #: where the run's time went: building the kernels' tuners, starting the workers, each
    #: round (wall seconds, in order); the CPU seconds of this process (its lanes' threads
    #: share one interpreter: near the wall time, they wait on each other); each lane's
    #: seconds of work (its own kernels and those it joined)
    phases: dict[str, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0
    lane_busy: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Events:
    """What the command shows while the run goes on (all optional)."""

    kernel_starts: Callable[[KernelRun, int, float], None] | None = None  # run, round, amount
    progress: Callable | None = None  # (run, Tuner.run's Progress); from a lane's thread
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
               round_index: int, deadline: float | None = None) -> None:
    """``deadline`` (a budget in seconds): the run's end, monotonic; the round's search
    ends in time for it, or the round is skipped, said in the kernel's row."""
    tuner = run.tuner
    assert tuner is not None
    if deadline is not None:
        left = deadline - time.monotonic() - ROUND_OVERHEAD_SECONDS
        if left < MIN_SECONDS:
            run.round_ready.set()
            if not run.stopped:
                run.stopped = (f"the budget's {budget.describe(budget.total)} were spent before its "
                               f"{'turn' if round_index == 1 else 'second round'}")
            return
        amount = min(amount, left)
    if budget.trials is not None:
        target = run.trials + int(amount)
        tuner.options = dataclasses.replace(tuner.options, trials=max(target, 1), timeout=None)
    else:
        # seconds: as many trials as fit, the study's total far ahead of what is done
        tuner.options = dataclasses.replace(tuner.options, trials=run.trials + 1_000_000, timeout=amount)
    run.round_deadline = time.monotonic() + amount if budget.seconds is not None else None
    run.running_on = list(executor.devices or [])
    run.devices += [d for d in run.running_on if d not in run.devices]
    if events.kernel_starts:
        events.kernel_starts(run, round_index, amount)
    started = time.monotonic()
    progress = events.progress
    try:
        # Lanes may join once its baseline is in the study (on_start), not measured twice.
        run.outcome = tuner.run(on_progress=(lambda p: progress(run, p)) if progress else None,
                                on_start=lambda _: run.round_ready.set(), executor=executor)
    except TuneError as error:
        run.round_ready.set()
        # One kernel that cannot be tuned (no launch shape runs its recorded code, say)
        # costs that kernel, never the application's run: said in its row.
        run.seconds += time.monotonic() - started
        run.stopped = f"tuning failed: {error}"
        run.failed = True
        if events.kernel_done:
            events.kernel_done(run, round_index)
        return
    run.seconds += time.monotonic() - started
    trials_before = run.trials
    run.trials = len([t for t in run.outcome.trials if t.state in ("complete", "failed")])
    run.rounds.append({"round": round_index, "devices": list(run.running_on), "seconds": time.monotonic() - started,
                       "trials": run.trials - trials_before, "ran": run.outcome.ran, "restarts": run.outcome.restarts,
                       "phases": dict(run.outcome.phases)})
    if events.kernel_done:
        events.kernel_done(run, round_index)


def joining_options(goal, joined_before: int):
    """The options of a tuner that joins a kernel's round (``_join``): no probe, no
    confirmation, and a seed of its own (the round's plus one more per tuner that joined
    before), as each task of a job array has: two samplers with one seed on one study, at
    the same point of its history, propose the same point.

    Parameters:
        goal: the round's options (TuneOptions).
        joined_before: how many tuners joined the round before this one.

    Returns:
        The joining tuner's options.
    """
    seed = None if goal.seed is None else goal.seed + 1 + joined_before
    return dataclasses.replace(goal, probe=False, confirm_runs=0, confirm_in_app=0, seed=seed)


def _join(run: KernelRun, lane, budget: Budget) -> None:
    """A lane with no kernel of its own left joins ``run``'s round: a second tuner on the
    same study (the storage shares trials and the budget between them, as tuners of a job
    array do), searching until the round's target or deadline. Its trials count in the
    kernel's study; the kernel's own lane confirms the best on its GPU, so the verdict
    stays like with like. Skipped when little of the round is left."""
    if not run.round_ready.wait(timeout=120) or run.tuner is None or run.failed:
        return
    main = run.tuner
    goal = main.options  # (the round's: its trial target, or its search time)
    if budget.seconds is not None:
        left = (run.round_deadline or 0.0) - time.monotonic()
        if left < JOIN_MIN_SECONDS:
            return
        goal = dataclasses.replace(goal, timeout=left)
    helper_options = joining_options(goal, next(run.joins))  # (atomic: lanes join at once)
    try:
        helper = Tuner(main.db, main.instances, run.spaces, helper_options)
    except TuneError:
        return
    if budget.trials is not None and goal.trials - helper._finished(helper.study) < JOIN_MIN_TRIALS:
        helper.study_storage.close()
        return
    run.devices += [d for d in (lane.devices or []) if d not in run.devices]
    started = time.monotonic()
    try:
        joined = helper.run(executor=lane)
    except TuneError:
        return  # the kernel's own lane goes on (and says what failed, if it fails there too)
    run.rounds.append({"joined": True, "devices": list(lane.devices or []), "seconds": time.monotonic() - started,
                       "trials": joined.ran, "restarts": joined.restarts, "phases": dict(joined.phases)})


def _report_only(run: KernelRun, executor, events: Events) -> None:
    """(--merge-report) The kernel's study as the shared storage holds it: no new trial."""
    tuner = run.tuner
    assert tuner is not None
    run.trials = tuner._finished(tuner.study)
    if run.trials == 0:
        run.stopped = "no trials in its shared study"
        return
    _run_round(run, 0, Budget(trials=run.trials), executor, events, 1)


def _round(jobs: list[tuple[KernelRun, float]], lanes, budget: Budget, events: Events,
           round_index: int, deadline: float | None, busy: _LaneClock) -> float:
    """One round of ``jobs`` ((kernel, amount); amounts <= 0 skipped) on the lanes: the
    trials (or lane-seconds) it spent."""
    jobs = [(run, amount) for run, amount in jobs if amount > 0]
    before = {id(run): (run.trials, run.seconds) for run, _ in jobs}
    for run, _ in jobs:
        run.round_ready.clear()
    run_on_lanes(jobs, lanes, busy.timed(lambda run, amount, lane: _run_round(run, amount, budget, lane,
                                                                            events, round_index, deadline)),
                 join=busy.timed(lambda run, lane: _join(run, lane, budget)))
    if budget.trials is not None:
        return float(sum(run.trials - before[id(run)][0] for run, _ in jobs))
    return sum(run.seconds - before[id(run)][1] for run, _ in jobs)


def tune_application(db: Database, selection: Selection, spaces: str, options: TuneOptions,
                     budget: Budget, events: Events | None = None, *, rotate: int = 0, rounds: int = 2,
                     report_only: bool = False) -> AppTuneResult:
    """``rotate``: start at that kernel (a job array's task index, slurm.py); ``rounds``: 1
    spends the budget at once (tasks sharing the studies); ``report_only``: no new trial."""
    events = events or Events()
    started, cpu_started = time.monotonic(), time.process_time()
    runs = [KernelRun(choice) for choice in selection.kernels]
    result = AppTuneResult(selection, budget, runs)
    mark = _PhaseMarks(result, started, cpu_started)
    for run in runs:
        if run.choice.tunable:
            _build(db, run, spaces, options)
    mark("tuners")
    live = [r for r in runs if r.tuner is not None]
    if not live:
        mark.end()
        return result
    lanes = make_lanes([r.tuner for r in live if r.tuner is not None], options.devices,
                       options.compile_workers, options.workers_per_device)
    mark("workers")
    result.devices = [info for lane in lanes for info in lane.device_info]
    busy = _LaneClock(lanes)
    # A budget in seconds is wall time: with a kernel per GPU, each GPU spends all of it.
    capacity = (budget if budget.seconds is None or len(lanes) == 1
                else dataclasses.replace(budget, seconds=budget.seconds * len(lanes)))
    try:
        shares = [r.choice.share for r in live]
        first = first_round(capacity, shares) if rounds == 2 else one_round(capacity, shares)
        start = rotate % len(live)
        order = list(zip(live[start:] + live[:start], first[start:] + first[:start], strict=True))
        if report_only:
            run_on_lanes([(run, 0.0) for run, _ in order], lanes,
                         lambda run, _, lane: _report_only(run, lane, events))
            mark("report")
            return result
        for run, amount in order:
            if amount <= 0:
                run.stopped = (f"no budget left for it ({capacity.describe(capacity.total)} for "
                               f"{len(live)} kernels)")
        # A budget in seconds is the run's wall time: no round runs past it.
        deadline = started + budget.seconds if budget.seconds is not None else None
        spent = _round(order, lanes, budget, events, 1, deadline, busy)
        mark("round 1")
        if rounds == 1:  # (the second round needs every kernel's first, seen by one process)
            return result
        hopeful = [promising(r.outcome) for r in live]
        for run, hope in zip(live, hopeful, strict=True):
            if run.outcome is not None and not hope and not run.stopped:
                run.stopped = (f"stopped after {run.trials} trials: nothing beyond its noise floor and "
                               "no longer improving")
        second = second_round(capacity, spent, shares, hopeful)
        _round([(run, amount) for run, amount in zip(live, second, strict=True)
                if amount >= 1 or (budget.seconds is not None and amount > 0.5)], lanes, budget, events, 2,
               deadline, busy)
        mark("round 2")
    finally:
        for lane in lanes:
            lane.shutdown(wait=False, cancel_futures=True)
        result.lane_busy = busy.seconds
        mark.end()
    return result


class _PhaseMarks:
    """``mark(name)``: the wall seconds since the previous mark go to phase ``name``;
    ``end()`` sets the run's seconds and CPU seconds."""

    def __init__(self, result: AppTuneResult, started: float, cpu_started: float) -> None:
        self.result, self.started, self.cpu_started = result, started, cpu_started
        self.last = started

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self.result.phases[name] = self.result.phases.get(name, 0.0) + now - self.last
        self.last = now
        self.end()

    def end(self) -> None:
        self.result.seconds = time.monotonic() - self.started
        self.result.cpu_seconds = time.process_time() - self.cpu_started


class _LaneClock:
    """Each lane's seconds of work (its kernels' rounds and the rounds it joined)."""

    def __init__(self, lanes) -> None:
        self.index = {id(lane): n for n, lane in enumerate(lanes)}
        self.seconds = [0.0] * len(lanes)
        self.lock = threading.Lock()

    def timed(self, work: Callable) -> Callable:
        def run(*args):
            lane, began = args[-1], time.monotonic()
            try:
                return work(*args)
            finally:
                with self.lock:
                    self.seconds[self.index[id(lane)]] += time.monotonic() - began
        return run
