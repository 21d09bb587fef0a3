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

from ._option_values import DEFAULT_CANDIDATES, PROBE_WORKERS

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


@dataclass
class TuneOptions:
    """How a study runs: the options of ``mneme tune`` (docs/cli.md), field by field.

    Attributes:
        trials: the trial budget.
        timeout: seconds after which the search stops; None for none.
        devices: the GPUs to replay on (ordinals); None: compile-only on the CPUs.
        clock_control: what the command's clock control did
            (mneme.runtime.clock_control.ClockLock.describe), written into reports; None where
            nothing is measured or from the library alone
        workers_per_device: worker processes per GPU.
        cpu_workers: compile-only worker processes; None for one per core.
        compile_workers: processes that compile ahead of the GPU workers; None for the
            default.
        objectives: what to minimize (``time``, ``registers,binary_size``, ...); None for
            time on a GPU, else registers.
        sampler: tpe, random, grid, cmaes or nsga2; None picks one by the number of
            objectives.
        seed: the sampler's seed.
        storage: the study storage URL (sqlite://, a journal file, postgresql://); None for
            the default file (study.default_storage_url).
        storage_dir: where the default file lives; None for the current folder.
        study: the study's name; None for one made of the instance and the space.
        grid_mode: the launch space's grid mode (cover, keep, free).
        iterations: timed iterations per trial.
        warmup: untimed iterations before them.
        cache: cache state of the timed iterations (warm, cold, app, auto): auto resolves
            per instance at the baseline, and every trial is measured in that mode
            (timing_report.py)
        trial_timeout: seconds a trial may take before its worker is killed (a hang).
        confirm_runs: times the recorded configuration and the best are replayed again after
            the search (interleaved) to tell a speedup from noise
        screen: multi-fidelity (GPU, time): timed iterations of a first, screening replay of
            each point (0: off); only points within ``screen_margin`` of the best time so far
            are replayed again with ``iterations``, the others keep their screening time
        screen_margin: see ``screen``.
        reuse_repeats: a point sampled again reuses its measurement instead of replaying it
        probe: before the search, run the recorded code with each launch shape not yet known
            (at most launch_probe.PROBE_SHARE of the budget): the shapes that break it leave the
            space at once
        probe_workers: processes per device that try the probe's shapes beside each other
            (spares lent while the probe runs; a shape that runs is replayed again alone): 0
            (the default, PROBE_WORKERS), one at a time
        before_run: called with each trial's settings in the worker before it replays (a
            hook for tests and tools).
        confirm_in_app: after the search (GPU): the recorded configuration and the best
            ``confirm_in_app`` distinct configurations run in the application ``app_command``
            (argv), one run each (app_confirm.py; 0: off)
        app_command: the application's command line, for ``confirm_in_app``.
    """

    trials: int = 100
    timeout: float | None = None
    devices: Sequence[int] | None = None  # None: compile-only on the CPUs
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
    cache: str = "auto"
    trial_timeout: float = 60.0
    confirm_runs: int = CONFIRM_RUNS
    screen: int = 0
    screen_margin: float = 1.25
    reuse_repeats: bool = True
    probe: bool = True
    probe_workers: int = PROBE_WORKERS
    before_run: Callable[[ReplaySettings], None] | None = None
    confirm_in_app: int = 0
    app_command: Sequence[str] | None = None

    @property
    def compile_only(self) -> bool:
        """Whether the run replays nothing on a GPU (no devices)."""
        return self.devices is None


@dataclass
class TrialRecord:
    """One finished trial as mneme sees it.

    Attributes:
        number: the trial's number in the study.
        state: complete or failed.
        params: its point.
        values: its objectives' values; None when it failed.
        settings: the configuration it ran (ReplaySettings as JSON data).
        verified: whether its replay verified; None when not checked.
        failure: why it failed: the failure kind (docs/tune.md, Why a trial fails).
        reason: the failure's one line.
        metrics: every metric it measured (METRICS).
        speedup: the baseline's first objective over this trial's (for time: the speedup)
        timing_method: how this trial was timed, when not as the baseline was (None: the
            same)
    """

    number: int
    state: str  # complete | failed
    params: dict[str, Any]
    values: list[float] | None
    settings: dict | None
    verified: bool | None = None
    failure: str | None = None
    reason: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    speedup: float | None = None
    timing_method: str | None = None

    @classmethod
    def from_frozen(cls, trial: optuna.trial.FrozenTrial, baseline_value: float | None):
        """The record of a finished Optuna trial.

        Parameters:
            trial: the trial, with mneme's user attribute.
            baseline_value: the baseline's first objective (for the speedup); None when
                not measured.

        Returns:
            The record.
        """
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
    """What a tuning run gives back (:meth:`Tuner.run`); ``write_report`` writes it out.

    Attributes:
        study: the Optuna study.
        objectives: the objectives minimized.
        baseline: the recorded configuration's measurements.
        trials: every finished trial of the study.
        best: the best trials (the Pareto front for several objectives).
        ran: trials this run ran.
        failed: of them, the failed ones.
        elapsed: seconds of the whole run: workers starting, the baseline, the search
        search_seconds: seconds of the search alone (what trials per second are measured
            over)
        restarts: workers replaced during this run (only failures that poison a CUDA
            context, or a dead or hung worker, cost one)
        restart_log: each worker restart (worker_records.Restart: by a spare, was it
            prepared, hand-over seconds)
        shapes_known: launch shapes known valid or invalid from earlier runs when this one
            began
        pool_use: each pool's use over the search and which bounded it (pool_use.py)
        identity: what the configurations were tuned on (database, kernel, instances, code)
        confirmation: the best against the recorded configuration, each measured again (see
            confirmation.confirm)
        in_app: the best configurations run in the application (app_confirm.in_app_summary),
            or ``{"skipped": why}``; empty when not asked for
        clock_control: the clocks the run measured at (TuneOptions.clock_control)
        phases: seconds per phase, in the order they ran (run_phases.py): building the tuner
            (setup, study), then the run (workers, baseline, search, confirmation, teardown...);
            ``mneme tune`` adds the time before the tuner (start) and the report's
    """

    study: optuna.Study
    objectives: list[str]
    baseline: dict[str, Any]
    trials: list[TrialRecord]
    best: list[TrialRecord]
    ran: int
    failed: int
    elapsed: float
    search_seconds: float = 0.0
    restarts: int = 0
    restart_log: list = field(default_factory=list)
    shapes_known: int = 0
    pool_use: dict = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)
    confirmation: dict[str, Any] = field(default_factory=dict)
    in_app: dict[str, Any] = field(default_factory=dict)
    clock_control: dict | None = None
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def trials_per_second(self) -> float:
        """Trials run per second of the search (0 without a search)."""
        return self.ran / self.search_seconds if self.search_seconds > 0 else 0.0


@dataclass
class Progress:
    """What the command shows while tuning.

    Attributes:
        done: trials finished.
        total: the budget.
        failed: of them, failed.
        best: the best first objective so far; None before one.
        rate: trials per second.
        last_failure: the last failure's line.
    """

    done: int
    total: int
    failed: int
    best: float | None
    rate: float
    last_failure: str | None = None

