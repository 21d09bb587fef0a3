"""What a tuning run is given and what it gives back: TuneOptions, TrialRecord, TuneOutcome,
Progress, and the names of the user attributes a study keeps them under.

Kept apart from the Tuner (tuner.py) so the report, the command and tests read these
records without the search; tuner.py and mneme.tune re-export them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from mneme.replay.engine import ReplaySettings
from optuna.trial import TrialState

__all__ = [
    "BASELINE_ATTR",
    "CONFIRM_RUNS",
    "DEFAULT_CANDIDATES",
    "PROBE_WORKERS",
    "TRIAL_ATTR",
    "Progress",
    "TrialRecord",
    "TuneOptions",
    "TuneOutcome",
]

#: user attribute of each trial: what mneme knows about it (one write per trial)
TRIAL_ATTR = "mneme"
#: user attribute of the study: the baseline's measurements
BASELINE_ATTR = "mneme.baseline"
#: extra timings of the recorded configuration and of the best after the search (GPU)
CONFIRM_RUNS = 5
#: spare workers per device lent to try the probe's shapes beside each other (a shape that
#: runs is replayed again alone for its times). 0: on an H200, 4 of them did not raise
#: trials/s on the faulting kernels (the driver's handling of each fault is the floor, and
#: faults in parallel processes on one GPU did not overlap usefully) and delayed the slot's
#: next task after a failure from 2.4 ms to 1.7 s (docs/tune.md)
PROBE_WORKERS = 0
#: configurations run in the application when --confirm-in-app is given without a number
#: (app_confirm.py; here so that the command reads it without importing that module)
DEFAULT_CANDIDATES = 5


@dataclass
class TuneOptions:
    trials: int = 100
    timeout: float | None = None
    devices: Sequence[int] | None = None  # None: compile-only on the CPUs
    #: what the command's clock control did (mneme.runtime.clock_control.ClockLock.describe),
    #: written into reports; None where nothing is measured or from the library alone
    clock_control: dict | None = None
    workers_per_device: int = 1
    cpu_workers: int | None = None
    compile_workers: int | None = None
    objectives: str | Sequence[str] | None = None
    sampler: str | None = None
    seed: int | None = None
    storage: str | None = None
    storage_dir: Path | None = None
    study: str | None = None
    grid_mode: str = "cover"
    iterations: int = 5
    warmup: int = 1
    #: cache state of the timed iterations (warm, cold, app, auto): auto resolves per
    #: instance at the baseline, and every trial is measured in that mode
    #: (timing_report.py)
    cache: str = "auto"
    trial_timeout: float = 60.0
    #: times the recorded configuration and the best are replayed again after the search
    #: (interleaved) to tell a speedup from noise
    confirm_runs: int = CONFIRM_RUNS
    #: multi-fidelity (GPU, time): timed iterations of a first, screening replay of each
    #: point (0: off); only points within ``screen_margin`` of the best time so far are
    #: replayed again with ``iterations``, the others keep their screening time
    screen: int = 0
    screen_margin: float = 1.25
    #: a point sampled again reuses its measurement instead of replaying it
    reuse_repeats: bool = True
    #: before the search, run the recorded code with each launch shape not yet known (at
    #: most launch_probe.PROBE_SHARE of the budget): the shapes that break it leave the
    #: space at once
    probe: bool = True
    #: processes per device that try the probe's shapes beside each other (spares lent
    #: while the probe runs; a shape that runs is replayed again alone): 0 (the default,
    #: PROBE_WORKERS), one at a time
    probe_workers: int = PROBE_WORKERS
    before_run: Callable[[ReplaySettings], None] | None = None
    #: after the search (GPU): the recorded configuration and the best ``confirm_in_app``
    #: distinct configurations run in the application ``app_command`` (argv), one run each
    #: (app_confirm.py; 0: off)
    confirm_in_app: int = 0
    app_command: Sequence[str] | None = None

    @property
    def compile_only(self) -> bool:
        return self.devices is None


@dataclass
class TrialRecord:
    """One finished trial as mneme sees it."""

    number: int
    state: str  # complete | failed
    params: dict[str, Any]
    values: list[float] | None
    settings: dict | None
    verified: bool | None = None
    failure: str | None = None
    reason: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    #: the baseline's first objective over this trial's (for time: the speedup)
    speedup: float | None = None
    #: how this trial was timed, when not as the baseline was (None: the same)
    timing_method: str | None = None

    @classmethod
    def from_frozen(cls, trial: optuna.trial.FrozenTrial, baseline_value: float | None):
        attrs = trial.user_attrs.get(TRIAL_ATTR, {})
        values = list(trial.values) if trial.values is not None else None
        speedup = baseline_value / values[0] if baseline_value and values and values[0] else None
        return cls(
            number=trial.number,
            state="complete" if trial.state == TrialState.COMPLETE else "failed",
            params=dict(trial.params),
            values=values,
            settings=attrs.get("settings"),
            verified=attrs.get("verified"),
            failure=attrs.get("failure"),
            reason=attrs.get("reason"),
            metrics=attrs.get("metrics", {}),
            speedup=speedup,
            timing_method=attrs.get("timing_method"),
        )


@dataclass
class TuneOutcome:
    study: optuna.Study
    objectives: list[str]
    baseline: dict[str, Any]
    trials: list[TrialRecord]
    best: list[TrialRecord]
    ran: int
    failed: int
    #: seconds of the whole run: workers starting, the baseline, the search
    elapsed: float
    #: seconds of the search alone (what trials per second are measured over)
    search_seconds: float = 0.0
    #: workers replaced during this run (only failures that poison a CUDA context, or a
    #: dead or hung worker, cost one)
    restarts: int = 0
    #: each worker restart (worker_records.Restart: by a spare, was it prepared, hand-over seconds)
    restart_log: list = field(default_factory=list)
    #: launch shapes known valid or invalid from earlier runs when this one began
    shapes_known: int = 0
    #: each pool's use over the search and which bounded it (pool_use.py)
    pool_use: dict = field(default_factory=dict)
    #: what the configurations were tuned on (database, kernel, instances, code)
    identity: dict[str, Any] = field(default_factory=dict)
    #: the best against the recorded configuration, each measured again (see confirmation.confirm)
    confirmation: dict[str, Any] = field(default_factory=dict)
    #: the best configurations run in the application (app_confirm.in_app_summary), or
    #: ``{"skipped": why}``; empty when not asked for
    in_app: dict[str, Any] = field(default_factory=dict)
    #: the clocks the run measured at (TuneOptions.clock_control)
    clock_control: dict | None = None
    #: seconds per phase, in the order they ran (run_phases.py): building the tuner
    #: (setup, study), then the run (workers, baseline, search, confirmation, teardown...);
    #: ``mneme tune`` adds the time before the tuner (start) and the report's
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def trials_per_second(self) -> float:
        return self.ran / self.search_seconds if self.search_seconds > 0 else 0.0


@dataclass
class Progress:
    """What the command shows while tuning."""

    done: int
    total: int
    failed: int
    best: float | None
    rate: float
    last_failure: str | None = None

