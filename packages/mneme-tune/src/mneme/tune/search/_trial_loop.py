"""The search's trial loop, a part of the Tuner (_tuner.py): trials asked of the study
(claimed from its budget, which tuners sharing the study divide), checked against the
constraints and the valid launch region, submitted to the executor (probe trials beside
each other, shapes not known to run through the guarded variant), and told back as their
replays finish (with a seed: in the order they were asked, trial_order.py); screened
trials that promise are measured again in full, and a point seen before takes its
measurement (``reuse_repeats``)."""

from __future__ import annotations

import concurrent.futures
import json
import time
from typing import TYPE_CHECKING, Any

from mneme.replay.engine import ReplaySettings
from optuna.trial import TrialState

from ..errors import TrialFailedError, TuneError
from ..study._study import tuner_owner
from ..tune_types import TRIAL_ATTR, Progress
from ..workers import _in_flight as in_flight
from ..workers._worker import failure_kind
from . import _launch_probe as launch_probe
from . import _objective as objectives_mod
from . import _timing_report as timing_report
from ._trial_order import TrialOrder

if TYPE_CHECKING:
    import optuna
    from mneme.replay.db import Instance

    from ..space import BoundSpace
    from ..study._mirrored_storage import MirroredStorage
    from ..tune_types import TuneOptions
    from ._valid_region import LaunchRegion

#: consecutive infeasible samples after which the search gives up
MAX_INFEASIBLE = 2000
#: longest time between reading the study's counts (other tuners may share it)
RECOUNT_SECONDS = 0.25
#: a claim on a shared budget takes about this many seconds of the tuner's trials
CLAIM_SECONDS = 0.5
#: seconds between looks while other tuners hold the rest of a shared budget
CLAIM_WAIT_SECONDS = 0.2


def _failed(kind: str, message: str) -> concurrent.futures.Future:
    """A replay's future that has failed already, with ``kind``."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_exception(TrialFailedError(kind, message))
    return future


class TrialLoop:
    """The part of Tuner (_tuner.py) that runs the search's trials, ``_loop``. It works on
    the tuner's options, spaces, instances, objectives and valid region, which the tuner
    creates."""

    if TYPE_CHECKING:  # the tuner's, which the loop uses
        options: TuneOptions
        bound: list[BoundSpace]
        instances: list[Instance]
        objectives: list[str]
        region: LaunchRegion
        sampler_name: str
        _probe_keys: set[str]
        earlier_invalid: dict[tuple, str]
        _baseline_method: str | None
        study_storage: MirroredStorage

        @property
        def _screening(self) -> bool: ...
        def _finished(self, study: optuna.Study) -> int: ...
        def settings_of(self, point: dict[str, Any]) -> list[ReplaySettings]: ...

    def _loop(self, study, executor, on_progress, start, budget) -> tuple[int, int]:
        o = self.options
        owner = tuner_owner()
        shared = self.study_storage  # the study's storage: pulls, claims, counts
        shared.pull()  # what other tuners did while this one measured its baseline
        depth = in_flight.depth(executor.worker_count, executor.compile_workers, budget)
        finished = self._finished(study)
        # Trials taken from the shared budget and not launched yet (shared.claim): every
        # trial that counts is launched on one, so tuners sharing the study never overrun it.
        claimed = 0
        # With a seed, trials are told in the order asked: the search repeats (trial_order.py).
        order = TrialOrder(repeatable=o.seed is not None)
        trials_of: dict[int, list] = {}  # trial number -> trial, point, settings, screening
        seen: dict[str, tuple[int, list[float] | None, dict]] = {}
        attrs: dict[str, Any]
        ran = failed = infeasible = 0
        best: float | None = None
        last_failure: str | None = None
        deadline = start + o.timeout if o.timeout else None
        last_count = time.monotonic()
        bound = self.bound[0]
        # The probe answers before the search begins: a search trial beside a probe trial
        # whose shape has not answered yet may try that (invalid) shape again (seen on two
        # H200s: 8-15 extra failures for ~30 invalid shapes while the probe ran).
        probe_keys = set(self._probe_keys)  # probe points not asked yet
        probing: set[int] = set()  # probe trials in flight

        def report() -> None:
            if on_progress:
                elapsed = time.monotonic() - start
                on_progress(Progress(finished, budget, failed, best,
                                     ran / elapsed if elapsed > 0 else 0.0, last_failure))

        def tell(trial, values, attrs, state=TrialState.COMPLETE) -> None:
            nonlocal finished, ran, failed, best, last_failure
            trial.set_user_attr(TRIAL_ATTR, {**attrs, "owner": owner})
            if state == TrialState.COMPLETE:
                study.tell(trial, values)
                if len(values) == 1 and (best is None or values[0] < best):
                    best = values[0]
            else:
                study.tell(trial, state=state)
                failed += 1
                last_failure = f"{attrs.get('failure')}: {attrs.get('reason')}"
            finished += 1
            ran += 1
            report()

        while True:
            now = time.monotonic()
            # Other tuners may share the study: as often as pulling costs at most ~5 %.
            if now - last_count > min(RECOUNT_SECONDS, shared.pull_interval):
                shared.pull()
                finished = self._finished(study)
                last_count = now
            out_of_time = deadline is not None and now >= deadline
            # While the probe runs, enough in flight for the probe workers too.
            limit = depth + (executor.probe_capacity if probe_keys else 0)
            while not out_of_time and len(trials_of) < limit:
                if probing and not probe_keys:
                    break  # every probe point is out: the search waits for their answers
                if claimed == 0:
                    # About CLAIM_SECONDS of trials at once: a claim costs a pull and a write.
                    elapsed = time.monotonic() - start
                    rate = ran / elapsed if elapsed > 1.0 else 0.0
                    want = max(limit - len(trials_of), int(rate * CLAIM_SECONDS))
                    claimed = shared.claim(want, budget, lambda: self._finished(study),
                                           len(trials_of))
                    finished = self._finished(study)
                    last_count = time.monotonic()
                    if claimed == 0:
                        break
                trial = study.ask()
                point = bound.suggest(trial)
                key = json.dumps(point, sort_keys=True)
                is_probe = key in probe_keys
                probe_keys.discard(key)
                reason = bound.violated(point)
                if reason is not None:
                    trial.set_user_attr(TRIAL_ATTR, {"failure": "infeasible", "reason": reason})
                    study.tell(trial, state=TrialState.PRUNED)
                    infeasible += 1
                    if infeasible > MAX_INFEASIBLE:
                        raise TuneError(
                            f"the sampler proposed {MAX_INFEASIBLE} points in a row that break "
                            f"the constraints (last: {reason}); try --sampler random or widen the space"
                        )
                    continue
                self.region.update(study)  # (enqueued points bypass the sampler)
                shape = self.region.shape_of(point)
                if self.region.active and self.region.is_invalid(shape):
                    trial.set_user_attr(TRIAL_ATTR, {"failure": "invalid-launch",
                                                     "reason": self.region.why_invalid(shape)})
                    study.tell(trial, state=TrialState.PRUNED)
                    if self.sampler_name == "grid":
                        budget -= 1  # a point of the walk that needs no trial (nor its claim)
                        claimed = max(0, claimed - 1)
                    continue
                infeasible = 0
                if o.reuse_repeats and key in seen and seen[key][1] is not None:
                    # The same point again (small discrete spaces): reuse its measurement.
                    number, values, attrs = seen[key]
                    claimed -= 1
                    tell(trial, values, {**attrs, "same_as": number})
                    continue
                failed_before = self.region.known_failure(point) if o.reuse_repeats else None
                if failed_before is not None:
                    # This shape with this code failed already (not the recorded code's
                    # failure, so the shape stays): its failure again, not a replay.
                    old = study.get_trials(deepcopy=False)[failed_before].user_attrs[TRIAL_ATTR]
                    claimed -= 1
                    tell(trial, None, {k: v for k, v in old.items() if k != "owner"}
                         | {"same_as": failed_before}, TrialState.FAIL)
                    continue
                try:
                    settings = self.settings_of(point)
                except Exception as error:  # noqa: BLE001 - a user space's apply()
                    claimed -= 1
                    tell(trial, None, {"failure": "error", "reason":
                                       f"the space's apply() raised {type(error).__name__}: {error}"},
                         TrialState.FAIL)
                    continue
                first = settings
                if self._screening:
                    first = [ReplaySettings(x.compile, x.replay.with_(iterations=o.screen))
                             for x in settings]
                # A shape not known to run may fault: the guarded variant answers first.
                unknown = self.region.active and not self.region.known_to_run(shape)
                # (a seeded run: trial_order.py)
                earlier = launch_probe.earlier_failure(self.region, self.earlier_invalid, point)
                if earlier is not None:  # answered as that run's was, in its place in the order
                    futures = [_failed(earlier, "this launch shape failed under the recorded code "
                                                "in an earlier run of the instance (a seeded run "
                                                "takes that answer instead of replaying it)")]
                else:
                    futures = [executor.submit(s, i, probe=is_probe, guard=unknown)
                               for s, i in zip(first, self.instances, strict=True)]
                trials_of[trial.number] = [trial, point, settings, self._screening]
                order.submitted(trial.number, futures)
                if is_probe:
                    probing.add(trial.number)
                claimed -= 1
            if out_of_time and claimed:
                claimed = 0  # given back: the others may run them
            shared.announce(len(trials_of) + claimed)
            if not trials_of:
                if out_of_time or shared.others_running == 0:
                    break  # (the last claim's look: nothing left, and nobody holds any)
                # The rest of the budget is held by other tuners: wait until they run it, or
                # until some comes free (a tuner that stops early or dies gives its part back).
                time.sleep(CLAIM_WAIT_SECONDS)
                continue
            order.wait(timeout=1.0)
            # (in repeatable order the oldest trial alone: the loop asks again before the next)
            for number in order.finished():
                trial, point, all_settings, screening = trials_of.pop(number)
                futures = order.take(number)
                if number in probing:
                    probing.discard(number)
                    if not probing and not probe_keys:
                        executor.expect_failures(0)  # the probe has answered: one spare
                settings = all_settings[0]
                attrs = {"settings": settings.to_dict()}
                errors = [e for e in (f.exception() for f in futures) if e is not None]
                if errors:
                    raised = errors[0]  # (a TrialFailedError: the kind its raiser set)
                    attrs.update(failure=failure_kind(raised),
                                 reason=getattr(raised, "message", str(raised)))
                    if isinstance(raised, TrialFailedError) and raised.result is not None:
                        attrs["verified"] = False
                    tell(trial, None, attrs, TrialState.FAIL)
                    continue
                results = [f.result() for f in futures]
                values = objectives_mod.evaluate(self.objectives, results)
                if screening:
                    if best is None or values[0] <= best * o.screen_margin:
                        # Promising: measured again with every iteration (verified already).
                        again = [ReplaySettings(x.compile, x.replay.with_(verify=False))
                                 for x in all_settings]
                        futures = [executor.submit(x, i)
                                   for x, i in zip(again, self.instances, strict=True)]
                        trials_of[number] = [trial, point, all_settings, False]
                        order.submitted(number, futures)  # (in its place in the order)
                        continue
                    attrs["fidelity"] = f"screened: {o.screen} iteration(s), not promising"
                attrs.update(metrics=objectives_mod.metrics(results),
                             verified=None if o.compile_only else True)
                method = timing_report.method_label(results[0]) if results[0].times else None
                if method and self._baseline_method and method != self._baseline_method:
                    attrs["timing_method"] = method  # not as the baseline was timed
                seen[json.dumps(point, sort_keys=True)] = (number, values, attrs)
                tell(trial, values, attrs)
        return ran, failed
