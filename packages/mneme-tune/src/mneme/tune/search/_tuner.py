"""Tuner: an Optuna study over a search space, its trials replayed by a ReplayExecutor.

    tuner = Tuner("app.rdb", ["KERNEL/INSTANCE"], spaces=["launch", "pipeline"],
                  options=TuneOptions(trials=200, devices=[0]))
    outcome = tuner.run()          # TuneOutcome: baseline, trials, best
    outcome.best[0].speedup

The recorded configuration (``default<O3>``, the recorded launch) runs first as the
baseline; when the space holds it, it is also the study's first trial. A trial counts
as a success only with every replay verified (or, compile-only, compiled). ``trials`` is
the study's total: a resumed study runs only the missing ones, and trials a killed
tuner left running are marked failed (``interrupted``) and run again.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
from mneme.replay.db import Database, Instance
from mneme.replay.engine import ReplayConfig, ReplaySettings
from mneme.replay.jit import CompileConfig
from optuna.trial import TrialState

from ..errors import StudyError, TuneError
from ..space import BoundSpace, Space, SpaceContext, resolve_spaces
from ..study._interrupted_trials import ABANDONED_AFTER, TUNER_ATTR, recover_interrupted
from ..study._mirrored_storage import MirroredStorage
from ..study._study import (
    default_sampler,
    make_sampler,
    open_storage,
    open_study,
    tuner_owner,
)
from ..study._study_open import StudyOpening, fresh_study
from ..tune_types import (
    BASELINE_ATTR,
    CONFIRM_RUNS,
    PROBE_WORKERS,
    TRIAL_ATTR,
    Progress,
    TrialRecord,
    TuneOptions,
    TuneOutcome,
)
from ..workers._executor import ReplayExecutor
from ..workers._pool_use import pool_use
from ..workers._worker_start import WorkerStart, executor_factory, prepare_baseline
from . import _confirmation as confirmation
from . import _launch_probe as launch_probe
from . import _objective as objectives_mod
from . import _timing_report as timing_report
from ._baseline import measure_baseline, submit_baseline
from ._confirmation import CONFIRMATION_ATTR
from ._launch_probe import PROBE_SHARE
from ._run_phases import PhaseClock
from ._trial_loop import TrialLoop
from ._valid_region import LaunchRegion, ValidRegionSampler

# The run's options and records are in tune_types.py, the confirmation after the search in
# confirmation.py, the launch-shape probe in launch_probe.py, the recovery of interrupted
# trials in interrupted_trials.py: their names stay importable here.
__all__ = [
    "ABANDONED_AFTER", "BASELINE_ATTR", "CONFIRMATION_ATTR", "CONFIRM_RUNS", "PROBE_SHARE",
    "PROBE_WORKERS", "TRIAL_ATTR", "TUNER_ATTR", "Progress", "TrialRecord", "TuneOptions",
    "TuneOutcome", "Tuner", "make_executor",
]


def make_executor(tuner: Tuner, **overrides) -> ReplayExecutor:
    """The executor of a tuner's run (its workers started: returns once they answered).
    ``overrides``: ReplayExecutor arguments other than the tuner's options give (one GPU
    of several, as ``mneme tune --app`` runs a kernel per GPU).

    Parameters:
        tuner: the tuner.
        **overrides: ReplayExecutor arguments over the tuner's.

    Returns:
        The executor.
    """
    return _executor_factory(tuner, overrides)()


def _executor_factory(tuner: Tuner, overrides: dict | None = None):
    """A function that makes the tuner's executor, its arguments read now (on the caller's
    thread: the tuner is not read from the starting thread)."""
    o = tuner.options
    kwargs = dict(devices=o.devices, workers_per_device=o.workers_per_device,
                  cpu_workers=o.cpu_workers, compile_workers=o.compile_workers,
                  timeout=o.trial_timeout, before_run=o.before_run,
                  expect_failures=launch_probe.probe_estimate(tuner),
                  probe_workers=o.probe_workers if o.probe else 0)
    kwargs.update(overrides or {})
    # GPU workers get the recorded configuration ready (compiled, loaded, restored, the
    # clock started) while the study opens: the baseline then pays only its launches.
    baseline = ([(i, tuner.base_settings(n)) for n, i in enumerate(tuner.instances)]
                if kwargs["devices"] else [])
    return executor_factory(tuner.db, baseline, **kwargs)


class Tuner(TrialLoop):
    """Tunes the configuration of one instance, or of a kernel across several instances
    (one configuration, objectives summed over them). Building it checks the spaces and
    opens (or creates) the study; :meth:`run` searches.

    Parameters:
        database: a path or an opened Database.
        instances: Instance objects of it (as ``mneme tune`` passes them, resolved once)
            or ids, looked up here once. The executor's workers get the objects
            themselves and look nothing up again.
        spaces: space names (``"launch,pipeline"``), or names and Space objects.
        options: how the study runs; None for the defaults.
        start_workers: start the workers here, while the study opens (worker_start.py;
            ``run`` takes them, or ``close`` stops them), instead of in ``run``.
        defer_study: a study that is surely not in its storage yet (a local file:
            study_open.py) opens on a thread that ``run`` joins after submitting the
            baseline, instead of here; ``storage``, ``study`` and ``study_storage`` are
            set once joined (a StudyError is then raised by ``run``). Any other study
            opens here.

    Raises:
        TuneError: a bad option, no instance, or an application to confirm in that
            cannot be found.
        SpaceError: a space that is unknown, empty, or rules out every point.
        StudyError: the study storage cannot be reached, or holds a study of that name
            made for another space or objectives.
        DatabaseError: the database or an instance cannot be read.
    """

    def __init__(self, database: str | os.PathLike | Database,
                 instances: Sequence[str | Instance],
                 spaces: str | Sequence[str | Space], options: TuneOptions | None = None,
                 *, start_workers: bool = False, defer_study: bool = False):
        #: seconds per phase of the tuner's life (run_phases.py): building it, then run()
        self.clock = PhaseClock()
        self._phases_reported = False  # (building it counts with the first run)
        self.options = options or TuneOptions()
        if self.options.trials < 1:
            raise TuneError("--trials must be at least 1")
        #: the application to confirm the best configurations in (its executable found)
        self.app_command: list[str] | None = None
        if self.options.confirm_in_app:
            from ..apply._app_confirm import application_command

            self.app_command = application_command(self.options.app_command)
        self.db = (database if isinstance(database, Database)
                   else Database.open(Path(database).absolute()))  # workers start anywhere
        self.database = Path(self.db.root)
        self.instances = [self.db.instance(i) if isinstance(i, str) else i for i in instances]
        if not self.instances:
            raise TuneError("no instance to tune")
        self.instance_ids = [i.id for i in self.instances]
        self.spaces = resolve_spaces(spaces, self.options.grid_mode)
        timing_report.check_cache_mode(self.options.cache)
        #: each instance's cache mode, once the baseline resolved it (None before)
        self.cache_modes: list[str] | None = None
        #: how the baseline was timed ("cupti", "events (...)"); trials timed otherwise say so
        self._baseline_method: str | None = None
        self.objectives = objectives_mod.parse_objectives(
            self.options.objectives, gpu=not self.options.compile_only)
        # Spaces are checked before any worker starts: bad input fails fast.
        self.bound = [BoundSpace(self.spaces, SpaceContext.from_instance(i)) for i in self.instances]
        self._check_spaces()
        self.sampler_name = self.options.sampler or default_sampler(len(self.objectives))
        self.grid_points = self._walk()
        self._bind_region()
        self.clock.mark("setup")
        self._workers = WorkerStart(_executor_factory(self)) if start_workers else None
        self._probe_keys: set[str] = set()  # this run's probe points (json), set by run()
        #: launch shapes this run knew from earlier runs of the instance (shape_cache.py)
        self.shapes_known = 0
        #: a seeded run's shapes that earlier runs found invalid, with the failure kind
        #: (launch_probe.earlier_failure)
        self.earlier_invalid: dict[tuple, str] = {}
        #: a fresh study being opened on its thread (defer_study), until run() joins it
        self._study_opening: StudyOpening | None = None
        try:
            if defer_study and fresh_study(self.options.storage, self.options.storage_dir,
                                           self.study_name):
                self._study_opening = StudyOpening(self._study_opener(None))
            else:
                self._set_study(self._study_opener(None)())
        except BaseException:
            self.close()
            raise
        self.clock.mark("study")

    def close(self) -> None:
        """Stop the workers ``start_workers`` started, when ``run`` will not take them."""
        self._study_opening = None  # (its thread ends by itself; nothing waits for it)
        if self._workers is not None:
            self._workers.close()
            self._workers = None

    def _walk(self) -> list[dict[str, Any]] | None:
        """Exhaustive search: every feasible point, enumerated once (refuses spaces too
        large to walk before any worker starts)."""
        return self.bound[0].feasible_points() if self.sampler_name == "grid" else None

    def _bind_region(self) -> None:
        #: the launch shapes the study's trials proved invalid (valid_region.py)
        self.region = LaunchRegion.for_space(self.bound[0], self.base_settings)

    def _open_study(self) -> optuna.Study:
        """The study, kept in memory over the storage (``self.study_storage``, which closes
        the one opened before)."""
        self._set_study(self._study_opener(self.storage)())
        return self.study

    def _study_opener(self, storage) -> Callable[[], tuple[Any, MirroredStorage, optuna.Study]]:
        """A function that opens the storage (``storage``: the one already open, else
        None) and the study over it. What it reads of the tuner is read now, on the
        caller's thread: it may run on the study's own (StudyOpening)."""
        o, name, bound = self.options, self.study_name, self.bound[0]
        objectives, instance_ids = list(self.objectives), list(self.instance_ids)
        sampler = ValidRegionSampler(make_sampler(self.sampler_name, len(objectives), o.seed),
                                     self.region, o.seed)

        def opened():
            backing = storage if storage is not None else open_storage(o.storage, o.storage_dir)
            open_study(backing, name, bound, objectives, sampler, instance_ids)
            mirrored = MirroredStorage(backing, name, tuner_owner())
            return backing, mirrored, optuna.Study(name, mirrored, sampler=sampler)
        return opened

    def _set_study(self, opened: tuple[Any, MirroredStorage, optuna.Study]) -> None:
        old = getattr(self, "study_storage", None)
        if old is not None:
            old.close()
        self.storage, study_storage, self.study = opened
        #: the study's storage: in memory, written behind to ``self.storage``
        self.study_storage = study_storage

    def _join_study(self) -> None:
        """The study opened on its thread (defer_study), once it has: the time waited
        for it is the ``study`` phase's, the time it took there its part ``in background``."""
        if self._study_opening is None:
            return
        self._set_study(self._study_opening.result())  # (failed: left set, run() closes nothing)
        self.clock.mark("study")
        self.clock.add("study.in background", self._study_opening.seconds)
        self._study_opening = None

    def _check_spaces(self) -> None:
        first = self.bound[0]
        for other, instance in zip(self.bound[1:], self.instances[1:], strict=True):
            if other.describe() != first.describe():
                raise TuneError(
                    f"instance {instance.id} gives the space other parameters than "
                    f"{self.instances[0].id}; tune these instances one at a time"
                )
        first.check_feasible()
        self._check_code()

    def _check_code(self) -> None:
        """Kernels recorded from nvcc builds (PTX/cubin, no LLVM IR) take launch
        configurations and ptxas options only: a space that changes anything else is
        refused before the search, in one line."""
        from mneme.replay.jit.ptx import ptx_config_problems

        kernel = self.instances[0].kernel
        if getattr(kernel, "has_ir", True):
            return
        bound = self.bound[0]
        start = bound.baseline() or {p.name: next(iter(p.values())) for p in bound.params}
        needs: set[str] = set()
        for param in bound.params:
            values = list(param.values()) if not isinstance(param.values(), range) else param.values()
            for value in values[:: max(1, len(values) // 16)]:  # enough to see what it changes
                settings = bound.apply({**start, param.name: value}, self.base_settings())
                replay = settings.replay
                if (ptx_config_problems(settings.compile) or replay.specialize
                        or replay.specialize_dims):
                    needs.add(param.name)
                    break
        if needs:
            raise TuneError(
                f"kernel {kernel.demangled_name} was recorded from an nvcc build (code: "
                f"{', '.join(kernel.code_kinds) or 'none'}, no LLVM IR): parameter(s) "
                f"{', '.join(sorted(needs))} of space {bound.names} need its IR; tune it with "
                "launch and bounds (ptxas options)"
            )

    @property
    def study_name(self) -> str:
        """The study's name: the option's, else the kernel, instance, space and
        objectives."""
        if self.options.study:
            return self.options.study
        kernel = self.instances[0].kernel
        what = kernel.static_hash if len(self.instances) > 1 else self.instances[0].id
        return f"{kernel.name}@{what}:{self.bound[0].names}:{','.join(self.objectives)}"

    def base_settings(self, instance_index: int = 0) -> ReplaySettings:
        """The recorded configuration as replayed: in the instance's resolved cache mode
        once the baseline has run, in the one asked for before.

        Parameters:
            instance_index: which of the tuner's instances.

        Returns:
            The settings.
        """
        o = self.options
        cache = self.cache_modes[instance_index] if self.cache_modes else o.cache
        return ReplaySettings(
            CompileConfig(),
            ReplayConfig(iterations=o.iterations, warmup=o.warmup, compile_only=o.compile_only,
                         cache=cache, energy_window_ms=objectives_mod.ENERGY_WINDOW_MS
                         if "energy" in self.objectives and not o.compile_only else 0.0),
        )

    @property
    def _screening(self) -> bool:
        o = self.options
        return (o.screen > 0 and not o.compile_only and self.objectives[0] == "time"
                and len(self.objectives) == 1 and o.screen < o.iterations)

    # -- pieces of a run ---------------------------------------------------------------

    def settings_of(self, point: dict[str, Any]) -> list[ReplaySettings]:
        """The configuration a point stands for.

        Parameters:
            point: parameter name -> value.

        Returns:
            Its replay settings, one per instance.
        """
        return [bound.apply(point, self.base_settings(i)) for i, bound in enumerate(self.bound)]

    def _rebind(self, executor: ReplayExecutor) -> None:
        """Re-derive the spaces with the limits of the GPU the workers found."""
        info = executor.device_info[0] if executor.device_info else {}
        if "max_threads_per_block" not in info:
            return
        props = type("Props", (), info)
        self.bound = [BoundSpace(self.spaces, SpaceContext.from_instance(i, props))
                      for i in self.instances]
        self._check_spaces()

    def identity(self) -> dict[str, Any]:
        """What this study tunes (for best.json).

        Returns:
            The database, kernel, instances and code (mneme.replay.identity).
        """
        from mneme.replay.identity import make_identity

        return make_identity(self.database, self.instances, study=self.study.study_name,
                             objectives=list(self.objectives))

    @staticmethod
    def _counted(trial: optuna.trial.FrozenTrial) -> bool:
        if trial.state == TrialState.COMPLETE:
            return True
        if trial.state == TrialState.FAIL:
            return trial.user_attrs.get(TRIAL_ATTR, {}).get("failure") != "interrupted"
        return False

    def _finished(self, study: optuna.Study) -> int:
        """Finished trials that count against the budget (this tuner's and pulled ones)."""
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        return sum(1 for t in trials if self._counted(t))

    # -- the run -------------------------------------------------------------------------------

    def check_application(self) -> float | None:
        """(--confirm-in-app, GPU) Runs the application once plain, once per command in
        this process.

        Returns:
            Its wall time in seconds; None when nothing is confirmed in the application.

        Raises:
            TuneError: the application fails (one line).
        """
        if not self.options.confirm_in_app or self.options.compile_only:
            return None
        from ..apply._app_confirm import check_application

        return check_application(self.app_command)  # type: ignore[arg-type]

    def run(self, on_progress: Callable[[Progress], None] | None = None,
            on_start: Callable[[dict], None] | None = None,
            on_in_app: Callable[[int, int, str], None] | None = None,
            executor: ReplayExecutor | None = None) -> TuneOutcome:
        """The search: the workers, the baseline, the probe of launch shapes, the trials
        up to the budget, the confirmation of the best.

        Parameters:
            on_progress: called after each trial with the run's progress.
            on_start: called once the baseline is measured, with what the run starts
                from (study, sampler, workers, devices, baseline, space size, probe).
            on_in_app: called for each run in the application (--confirm-in-app):
                index, count, what runs.
            executor: workers to run on that outlive this run (several tuners in turn on
                one pool, as ``mneme tune --app`` does); None for the tuner's own,
                stopped at the end.

        Returns:
            The outcome: every trial, the best, the baseline, the confirmation.

        Raises:
            TuneError: the recorded configuration fails, or another condition stops
                the run (StudyError: the storage).
        """
        o = self.options
        start = time.monotonic()
        self._begin_phases(start)
        plain_seconds = self.check_application()  # (--confirm-in-app) before any trial
        if plain_seconds is not None:
            self.clock.mark("app check")
        shared = executor is not None
        if executor is not None:  # (shared)
            self.close()
            prepare_baseline(executor, [(i, self.base_settings(n)) for n, i in enumerate(self.instances)]
                             if o.devices else [])
        else:  # started with the tuner (start_workers), or now
            executor = self._workers.result() if self._workers is not None else make_executor(self)
        self._workers = None
        self.clock.mark("workers")
        if not shared:  # (its parts: spent on the executor's start, waited for or not)
            for part, seconds in executor.start_seconds.items():
                self.clock.add(f"workers.{part}", seconds)
        try:
            signature = self.bound[0].signature()
            self._rebind(executor)
            if self.bound[0].signature() != signature:  # this GPU's limits change the space
                self._join_study()
                self.grid_points = self._walk()
                self._bind_region()
                self.study = self._open_study()
            self.region.bound = self.bound[0]  # (the shapes' limits as this GPU has them)
            # A fresh study still opening: the baseline runs while it opens (it cannot
            # hold a stored one to use instead).
            ahead = submit_baseline(self, executor) if self._study_opening is not None else None
            self._join_study()
            self.shapes_known = launch_probe.seed_region(self)
            study, sampler_name = self.study, self.sampler_name
            recover_interrupted(study, self.study_storage, o.trial_timeout)
            self.clock.mark("prepare")
            baseline = measure_baseline(self, executor, study, ahead)
            self.clock.mark("baseline")
            point = self.bound[0].baseline()
            budget = o.trials
            probes = launch_probe.probe_points(self, study, point, budget - self._finished(study))
            if on_start:
                on_start({"study": study.study_name, "sampler": sampler_name,
                          "workers": executor.worker_count, "devices": executor.device_info,
                          "baseline": baseline, "space_size": self.bound[0].size,
                          "probes": len(probes), "shapes_known": self.shapes_known})
            if sampler_name == "grid":
                points = list(self.grid_points)  # type: ignore[arg-type]
                budget = min(budget, len(points))
                # Queued in memory: a resumed walk queues the points not tried yet.
                tried = {json.dumps(t.params, sort_keys=True) for t in study.get_trials(deepcopy=False)
                         if self._counted(t)}
                # The recorded configuration first, then every launch shape with the recorded
                # code (a shape that breaks it is invalid: its other points are skipped).
                points.sort(key=lambda p: (p != point, not self.region.runs_recorded_code(p)))
                for p in points:
                    if json.dumps(p, sort_keys=True) not in tried:
                        study.enqueue_trial(p)
            else:
                if point is not None and not study.trials:
                    study.enqueue_trial(point)
                for p in probes:
                    study.enqueue_trial(p)
            self.clock.mark("prepare")
            search_start = time.monotonic()
            self._probe_keys = {json.dumps(p, sort_keys=True) for p in probes}
            # Most probe trials may fault (a kernel that assumes its block size): spares
            # for them are kept ready until the probe has answered.
            executor.expect_failures(len(probes))
            busy_before = executor.busy.copy()
            ran, failed = self._loop(study, executor, on_progress, search_start, budget)
            use = pool_use(busy_before, executor.busy.copy(), time.monotonic() - search_start,
                           executor.compile_workers, executor.worker_count)
            self.study_storage.flush()  # every trial in the storage before the results are read
            self.study_storage.pull()
            self.region.update(study)  # (the region knows every trial of the run)
            search = self.clock.mark("search")
            outcome = self.outcome(study, baseline, ran, failed, 0.0)
            outcome.confirmation = confirmation.confirm(self, executor, study, outcome)
            self.clock.mark("confirmation")
            baseline = study.user_attrs.get(BASELINE_ATTR, baseline)
            launch_probe.keep_shapes(self)
            restarts = executor.restarts
            restart_log = list(executor.restart_log)
        finally:
            if not shared:
                executor.shutdown(wait=False, cancel_futures=True)
            if self._study_opening is None:  # (else it failed to open: nothing to close)
                with contextlib.suppress(StudyError):  # (raised above, when it is not a failure already)
                    self.study_storage.flush()  # an interrupted search keeps what finished
                self.study_storage.close()  # no idle writer thread per finished run
        self.clock.mark("teardown")
        elapsed = time.monotonic() - start
        confirmed = outcome.confirmation
        outcome = self.outcome(study, baseline, ran, failed, elapsed)
        outcome.search_seconds = search
        outcome.restarts = restarts
        outcome.restart_log = restart_log
        outcome.shapes_known = self.shapes_known
        outcome.pool_use = use
        outcome.confirmation = confirmed
        outcome.identity = self.identity()
        self.clock.mark("results")
        if o.confirm_in_app:  # the workers are gone: the application has the GPU to itself
            outcome.in_app = confirmation.in_app(self, outcome, plain_seconds, on_in_app)
            self.clock.mark("in-app")
        outcome.phases = dict(self.clock.phases)
        outcome.clock_control = self.options.clock_control
        return outcome

    def _begin_phases(self, start: float) -> None:
        """This run's phases from ``start``, after those of building the tuner (counted
        with its first run only)."""
        built = {} if self._phases_reported else self.clock.phases
        self._phases_reported = True
        self.clock = PhaseClock()
        self.clock.phases.update(built)
        self.clock.begin(start)

    # -- results -------------------------------------------------------------------------------

    def outcome(self, study, baseline, ran, failed, elapsed) -> TuneOutcome:
        """The outcome of a study as it stands.

        Parameters:
            study: the study.
            baseline: the baseline's measurements.
            ran: trials this run ran.
            failed: of them, the failed ones.
            elapsed: seconds of the run.

        Returns:
            The outcome (its best: sorted by the objective, or the Pareto front).
        """
        base_value = (baseline.get("values") or [None])[0]
        records = [TrialRecord.from_frozen(t, base_value)
                   for t in study.get_trials(deepcopy=False)
                   if t.state in (TrialState.COMPLETE, TrialState.FAIL)]
        complete = [r for r in records if r.state == "complete" and r.values is not None]
        if len(self.objectives) == 1:
            best = sorted(complete, key=lambda r: (r.values[0], r.number))
        else:
            front = {t.number for t in study.best_trials}
            best = sorted((r for r in complete if r.number in front), key=lambda r: r.values)
        return TuneOutcome(study, self.objectives, baseline, records, best, ran, failed, elapsed)
