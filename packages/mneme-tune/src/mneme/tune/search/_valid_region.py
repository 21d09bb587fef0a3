"""The valid launch region, learned as trials fail, and the sampler that keeps to it.

A launch shape (the values of the launch space's parameters) that breaks the kernel under
the recorded code (a fault, a refused launch, a crash or a result that does not verify,
with every other parameter at a value that leaves the compiled code as recorded) is
invalid for every pipeline and code option: ``ValidRegionSampler`` wraps the study's
sampler (TPE, random, CMA-ES, NSGA-II alike) and draws again whenever it proposes such a
shape. A shape that failed only with other code options stays in the space; only that
(shape, code) pair is known to fail. Shapes with the threads per block, or the dynamic
shared memory, of an invalid shape are *suspect*: a proposal of one is drawn again a few
times first, so they are tried after the others (never excluded: they may well run).

A shape whose validity is not known yet (no verified trial of it under the recorded code,
not proven invalid) and that has a trial in flight is *pending*: its answer is on the way.
A proposal of it is drawn again like a suspect one, so the other shapes go first, and under
the recorded code it is refused until its trial has answered: a second trial of an
invalid shape under the recorded code, started before the first failed, would fail too
and cost the shape two trials. Only when no other shape is left (every other one invalid
or pending too) is it proposed at once, whatever the code: a small space never starves.
In flight means RUNNING in the study the sampler is given: in the tuner that is the
in-memory study its loop asks and tells (over study.MirroredStorage), so exactly the trials it
has in flight; other tuners of a shared study write their trials only once finished, so
across tuners the same unknown shape can still be tried once by each.

What the region knows comes from the study's trials (``LaunchRegion.update``): those a
resumed study loaded and those other tuners of a shared study wrote are read like this
tuner's own, so the knowledge survives a restart and is shared between machines. What
runs before learned of the instance's launches is kept with the recording
(shape_cache.py) and seeds the region (``seed``), so a later run probes nothing known.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from mneme.replay.engine import ReplayConfig, ReplaySettings
from mneme.replay.jit import CompileConfig
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from ..errors import TuneError
from ..space import BoundSpace
from ..space.builtin import LaunchSpace
from ..space.parameters import IntParam, Parameter, Point
from ..study._shape_cache import VALID, launch_key

#: failure kinds that, under the recorded code, prove a launch shape invalid
INVALIDATING = ("context-poisoned", "out-of-bounds", "launch-refused", "unverified", "crashed")
#: proposals drawn from the wrapped sampler before a shape is drawn from the region itself
REDRAWS = 16
#: of those, the first ones that also refuse a suspect shape (later ones accept it)
SUSPECT_REDRAWS = 4
#: launch shapes enumerated to draw from (larger launch spaces are sampled)
ENUMERATE_SHAPES = 4096
#: trial user attribute holding mneme's record of the trial (tune_types.TRIAL_ATTR)
_TRIAL_ATTR = "mneme"
#: the "trial" of a shape an earlier run proved invalid (shape_cache.py)
EARLIER_RUN = -1

Shape = tuple


def _distribution(param: Parameter) -> BaseDistribution:
    if isinstance(param, IntParam):
        return IntDistribution(param.low, param.high, log=param.log, step=param.step)
    return CategoricalDistribution(param.choices)


class LaunchRegion:
    """What the study's trials say about each launch shape.

    Parameters:
        bound: the study's bound space.
        code_of: ``code_of(point)``: a key of the code a point compiles and launches
            (None when it cannot be told).
        recorded_code: that key for the recorded configuration.
    """

    def __init__(self, bound: BoundSpace, code_of: Callable[[Point], Any], recorded_code: Any):
        self.bound = bound
        self.launch_spaces = [s for s in bound.spaces
                              if isinstance(s, LaunchSpace) or getattr(s, "launch_shape", False)]
        names = {p.name for s in self.launch_spaces for p in s.parameters(bound.ctx)}
        self.params = [p for p in bound.params if p.name in names]
        self.names = [p.name for p in self.params]
        self.distributions = {p.name: _distribution(p) for p in self.params}
        self.code_of = code_of
        self.recorded_code = recorded_code
        #: shape -> (trial number, failure kind) of the failure that proved it invalid
        self.invalid: dict[Shape, tuple[int, str]] = {}
        #: (shape, code) pairs that failed with code other than the recorded one
        self.failing_pairs: dict[tuple[Shape, Any], int] = {}
        #: shapes that ran under the recorded code
        self.valid: set[Shape] = set()
        #: shapes some trial ran verified, with whatever code (they do not fault)
        self.ran: set[Shape] = set()
        self._bad_threads: set[int] = set()
        self._bad_shared: set[int] = set()
        self._read = 0  # trials numbered below this are finished and read
        self._unfinished: set[int] = set()
        self._launches: dict[Shape, tuple[tuple, tuple, int]] = {}
        #: shapes of the trials running in the study (trial numbers), as last updated
        self.in_flight: dict[Shape, set[int]] = {}
        self._every: list[Shape] | None = None  # every shape of an enumerable space

    @classmethod
    def for_space(cls, bound: BoundSpace, base: Callable[[], ReplaySettings]) -> LaunchRegion:
        """The region of a tuner's space. A point runs the recorded code when everything but
        its launch shape is as recorded: its settings with the shape reset to the recorded
        one equal the recorded configuration's (so a parameter of another space that moves
        the grid, say, is other code, not evidence against the shape). When the recorded
        launch is not a point of the space, the compiled code alone is compared."""
        region = cls(bound, None, None)  # type: ignore[arg-type]
        recorded = bound.baseline()
        if recorded is None:
            region.code_of = lambda point: code_key(bound.apply(point, base()))
            region.recorded_code = code_key(base())
        else:
            shape = {name: recorded[name] for name in region.names}
            region.code_of = lambda point: code_key(bound.apply({**point, **shape}, base()),
                                                    launch=True)
            region.recorded_code = region.code_of(recorded)
        return region

    @property
    def active(self) -> bool:
        return bool(self.params)

    def shape_of(self, point: Point) -> Shape:
        return tuple(point.get(name) for name in self.names)

    def describe(self, shape: Shape) -> str:
        return ",".join(f"{n}={v}" for n, v in zip(self.names, shape, strict=True))

    def launch_of(self, shape: Shape) -> tuple[tuple, tuple, int]:
        """(grid, block, dynamic shared memory) that a shape launches with."""
        if shape not in self._launches:
            settings = ReplaySettings(CompileConfig(), ReplayConfig())
            point = dict(zip(self.names, shape, strict=True))
            ctx = self.bound.ctx
            for space in self.launch_spaces:
                own = {p.name: point[p.name] for p in space.parameters(ctx)}
                settings = space.apply(own, settings, ctx)
            replay = settings.replay
            self._launches[shape] = (tuple(replay.grid or ctx.grid), tuple(replay.block or ctx.block),
                                     ctx.shared_mem if replay.shared_mem is None else replay.shared_mem)
        return self._launches[shape]

    def _traits_of(self, shape: Shape) -> tuple[int, int | None]:
        """(threads per block, dynamic shared memory when it differs from the recorded)."""
        _, block, shared = self.launch_of(shape)
        return math.prod(block), shared if shared != self.bound.ctx.shared_mem else None

    def _shapes(self, rng: random.Random) -> list[Shape]:
        """Every shape of the space, or a sample of a space too large to enumerate."""
        every = self._enumerated()
        if every is not None:
            return list(every)
        return list({tuple(p.sample(rng) for p in self.params) for _ in range(ENUMERATE_SHAPES)})

    def _enumerated(self) -> list[Shape] | None:
        """Every shape of the space (None: too many to enumerate)."""
        if self._every is None and math.prod(p.size for p in self.params) <= ENUMERATE_SHAPES:
            self._every = list(itertools.product(*(p.values() for p in self.params)))
        return self._every

    # -- what earlier runs learned (shape_cache.py) -------------------------------------------

    def known_shapes(self, known: dict[str, str], rng: random.Random) -> dict[Shape, str]:
        """The shapes of the space that earlier runs' launches under the recorded code
        (launch key -> "valid" or a failure kind) say something of, with what they say."""
        if not self.active or not known:
            return {}
        found = {shape: known.get(launch_key(*self.launch_of(shape))) for shape in self._shapes(rng)}
        return {shape: kind for shape, kind in found.items()
                if kind == VALID or kind in INVALIDATING}

    def seed(self, known: dict[str, str], rng: random.Random) -> int:
        """Take what earlier runs learned of launches under the recorded code (launch key
        -> "valid" or a failure kind); the shapes of the space launching that way are known
        from the start. Returns how many shapes became known."""
        count = 0
        for shape, found in self.known_shapes(known, rng).items():
            if shape in self.valid or shape in self.invalid:
                continue
            if found == VALID:
                self.valid.add(shape)
            else:
                self._invalidate(shape, EARLIER_RUN, found)
            count += 1
        return count

    def known_launches(self) -> dict[str, str]:
        """What this run knows of launches under the recorded code, for shape_cache.store."""
        out = {launch_key(*self.launch_of(s)): VALID for s in self.valid}
        out.update({launch_key(*self.launch_of(s)): kind for s, (_, kind) in self.invalid.items()})
        return out

    # -- learning --------------------------------------------------------------------------

    def update(self, study: optuna.Study) -> None:
        """Read the trials finished since the last update (this tuner's, pulled ones)."""
        trials = study.get_trials(deepcopy=False)
        fresh = trials[self._read:]
        again = [trials[n] for n in sorted(self._unfinished) if n < len(trials)]
        self._read = len(trials)
        trial: FrozenTrial | None
        for trial in again + fresh:
            if trial.state in (TrialState.RUNNING, TrialState.WAITING):
                self._unfinished.add(trial.number)
                continue
            self._unfinished.discard(trial.number)
            self.learn(trial)
        # (read again each time: a running trial's parameters are set after it is asked)
        self.in_flight = {}
        for number in self._unfinished:
            trial = trials[number] if number < len(trials) else None
            if (trial is not None and trial.state == TrialState.RUNNING
                    and all(n in trial.params for n in self.names)):
                self.in_flight.setdefault(self.shape_of(trial.params), set()).add(number)

    def learn(self, trial: FrozenTrial) -> None:
        if not self.active or any(n not in trial.params for n in self.names):
            return
        shape = self.shape_of(trial.params)
        if trial.state == TrialState.COMPLETE:
            self.ran.add(shape)
            if self.runs_recorded_code(trial.params):
                self.valid.add(shape)
            return
        failure = trial.user_attrs.get(_TRIAL_ATTR, {}).get("failure")
        if trial.state != TrialState.FAIL or failure not in INVALIDATING:
            return
        if self.runs_recorded_code(trial.params):
            if shape not in self.invalid:
                self._invalidate(shape, trial.number, failure)
        else:
            self.failing_pairs.setdefault((shape, self._code(trial.params)), trial.number)

    def _invalidate(self, shape: Shape, trial: int, failure: str) -> None:
        self.invalid[shape] = (trial, failure)
        threads, shared = self._traits_of(shape)
        self._bad_threads.add(threads)
        if shared is not None:
            self._bad_shared.add(shared)

    def _code(self, point: Point) -> Any:
        try:
            return self.code_of(point)
        except Exception:  # noqa: BLE001 - a user space's apply(): the code is unknown
            return None

    def runs_recorded_code(self, point: Point) -> bool:
        code = self._code(point)
        return code is not None and code == self.recorded_code

    # -- questions -------------------------------------------------------------------------

    def known_to_run(self, shape: Shape) -> bool:
        """Whether a trial of this shape ran (a shape not known to run may fault: the
        guarded variant tries it first)."""
        return shape in self.valid or shape in self.ran

    def is_invalid(self, shape: Shape) -> bool:
        return shape in self.invalid

    def is_suspect(self, shape: Shape) -> bool:
        if shape in self.invalid or shape in self.valid or not self.invalid:
            return False
        threads, shared = self._traits_of(shape)
        return threads in self._bad_threads or (shared is not None and shared in self._bad_shared)

    def redraws(self) -> int:
        """Proposals to ask the wrapped sampler for before a shape is drawn from the region
        itself: REDRAWS while most shapes may run, one when most are known invalid. A
        model-based sampler's proposal costs milliseconds and then lands on an invalid
        shape nearly every time: with 31 of 32 shapes invalid, 60 TPE asks took 2.6 s (923
        proposals refused), and on an H100 the tuner's loop, not the GPU, bounded the
        search of a kernel that assumes its block size (18 trials/s)."""
        every = self._enumerated()
        return REDRAWS if every is None or 2 * len(self.invalid) <= len(every) else 1

    def is_pending(self, shape: Shape, besides: int | None = None) -> bool:
        """Whether the shape's validity is unknown and a trial of it (other than trial
        ``besides``, the one being proposed) is in flight."""
        numbers = self.in_flight.get(shape)
        return (bool(numbers) and shape not in self.valid and shape not in self.invalid
                and any(n != besides for n in numbers))  # type: ignore[union-attr]

    def other_shape_left(self, shape: Shape, besides: int | None = None) -> bool:
        """Whether a shape other than ``shape`` may be proposed now: not invalid, not
        pending, within the launch constraints (a space too large to enumerate: yes)."""
        every = self._enumerated()
        return every is None or any(
            s != shape and s not in self.invalid and not self.is_pending(s, besides)
            and self._feasible(s) for s in every)

    def other_distributions(self) -> dict[str, BaseDistribution]:
        """The distributions of the parameters outside the launch shape."""
        return {p.name: _distribution(p) for p in self.bound.params
                if p.name not in self.distributions}

    def known_failure(self, point: Point) -> int | None:
        """The trial in which this point's shape, with this point's code, failed already."""
        if not self.failing_pairs:
            return None
        return self.failing_pairs.get((self.shape_of(point), self._code(point)))

    def why_invalid(self, shape: Shape) -> str:
        number, failure = self.invalid[shape]
        when = "an earlier run" if number == EARLIER_RUN else f"trial {number}"
        return f"launch shape {self.describe(shape)} failed under the recorded code ({failure}, {when})"

    def _feasible(self, shape: Shape) -> bool:
        point = dict(zip(self.names, shape, strict=True))
        for space in self.launch_spaces:
            for constraint in space.constraints(self.bound.ctx):
                try:
                    if not constraint(point):
                        return False
                except KeyError:  # a constraint on other parameters too: the tuner checks it
                    continue
        return True

    def probe_points(self, recorded: Point, limit: int, rng: random.Random,
                     queued: Sequence[Point] = ()) -> list[Point]:
        """The probe: the recorded configuration with each launch shape of the space not yet
        known (neither run nor failed under the recorded code, nor ``queued`` to run), at
        most ``limit`` of them, sampled when the space has more. Run before the search,
        each tells once whether its shape is valid, so the sampler never wastes trials on
        an invalid one."""
        if not self.active or limit <= 0:
            return []
        shapes = self._shapes(rng)
        known = (self.valid | set(self.invalid) | {self.shape_of(recorded)}
                 | {self.shape_of(p) for p in queued if self.runs_recorded_code(p)})
        points = []
        for shape in shapes:
            if shape in known:
                continue
            point = {**recorded, **dict(zip(self.names, shape, strict=True))}
            if self.bound.violated(point) is None and self.runs_recorded_code(point):
                points.append(point)
        if len(points) > limit:
            points = rng.sample(points, limit)
        # Shapes no wider than the recorded one first: a kernel sized for its recorded block
        # mostly leaves work undone with fewer threads (a cheap failure) and faults with more
        # (a restart), so the spare workers kept for the probe are ready when faults begin.
        recorded_threads = self._traits_of(self.shape_of(recorded))[0]
        points.sort(key=lambda point: (self._traits_of(self.shape_of(point))[0] > recorded_threads,
                                       self._traits_of(self.shape_of(point))[0]))
        return points

    def draw(self, rng: random.Random, besides: int | None = None) -> Shape:
        """A shape not known invalid (pending ones only when no other is left, suspect
        ones only when no clear one is). ``besides``: the trial it is drawn for."""
        every = self._enumerated()
        whole = every is not None
        if whole:
            shapes = list(every)  # type: ignore[arg-type]
        else:
            shapes = [tuple(p.sample(rng) for p in self.params) for _ in range(ENUMERATE_SHAPES)]
        shapes = [s for s in shapes if s not in self.invalid and self._feasible(s)]
        settled = [s for s in shapes if not self.is_pending(s, besides)]
        clear = [s for s in settled if not self.is_suspect(s)]
        if shapes:
            return rng.choice(clear or settled or shapes)
        if whole:
            tried = "; ".join(
                f"{self.describe(s)}: {kind} ({'an earlier run' if n == EARLIER_RUN else f'trial {n}'})"
                for s, (n, kind) in sorted(self.invalid.items(), key=lambda i: i[1]))
            raise TuneError(f"no launch shape of space {self.bound.names} runs the recorded code: "
                            f"{tried}")
        return tuple(p.sample(rng) for p in self.params)  # sampled: keep looking


class ValidRegionSampler(optuna.samplers.BaseSampler):
    """Wraps a sampler so that it proposes no launch shape the region knows invalid, and no
    pending one under the recorded code while another shape is left.

    Relative samplers (TPE multivariate, CMA-ES) propose the launch parameters together:
    a refused proposal is asked for again. Independent ones propose one parameter at a
    time: at the first launch parameter of a trial, the whole shape is proposed (each
    parameter from the wrapped sampler) and checked, then kept for the trial. After
    ``REDRAWS`` refused proposals the shape is drawn from the region itself. Whether a
    pending shape would run the recorded code depends on the trial's other parameters:
    those neither suggested nor proposed yet are proposed with the shape (each from the
    wrapped sampler, as it would have been asked for them) and kept for the trial too.

    Parameters:
        base: the wrapped sampler.
        region: the study's launch region.
        seed: the seed of the draws from the region.
    """

    def __init__(self, base: optuna.samplers.BaseSampler, region: LaunchRegion,
                 seed: int | None = None):
        self.base = base
        self.region = region
        self._rng = random.Random(seed)
        #: trial number -> values chosen ahead for it (its launch shape, when proposed one
        #: parameter at a time; the parameters proposed with a pending shape)
        self._chosen: dict[int, dict[str, Any]] = {}
        self._relative: dict[int, dict[str, Any]] = {}  # trial number -> its relative proposal
        self.redrawn = 0  # proposals refused (for reports and tests)

    def __getattr__(self, name: str):  # what Optuna or reports ask of the wrapped sampler
        return getattr(self.base, name)

    def _constrained(self) -> bool:
        """Whether the region refuses anything now (a shape known invalid, one in flight)."""
        region = self.region
        return region.active and bool(region.invalid or region.in_flight)

    def _accept(self, study, trial, values: dict[str, Any], attempt: int) -> dict[str, Any] | None:
        """The ``attempt``-th proposal of launch ``values`` for ``trial``: None when it is
        refused, else the trial's parameters proposed here with it (to keep for the trial)."""
        region = self.region
        shape = region.shape_of(values)
        if region.is_invalid(shape):
            return None
        if not region.is_pending(shape, trial.number):
            return {} if attempt >= SUSPECT_REDRAWS or not region.is_suspect(shape) else None
        if not region.other_shape_left(shape, trial.number):
            return {}  # no other shape to propose: this one, whatever the code
        if attempt < SUSPECT_REDRAWS:
            return None  # like a suspect shape: the others first
        point, proposed = self._whole_point(study, trial, values)
        return None if region.runs_recorded_code(point) else proposed

    def _whole_point(self, study, trial, values: dict[str, Any]) -> tuple[dict, dict]:
        """The trial's point with the proposal ``values``: its parameters suggested already,
        queued or proposed relatively, and the others proposed now (also returned apart)."""
        point = {**self._relative.get(trial.number, {}),
                 **trial.system_attrs.get("fixed_params", {}), **trial.params, **values}
        proposed = {}
        for name, distribution in self.region.other_distributions().items():
            if name in point:
                continue
            if distribution.single():  # (Optuna asks no sampler for it)
                point[name] = (distribution.choices[0] if isinstance(distribution, CategoricalDistribution)
                               else distribution.low)  # type: ignore[attr-defined]
                continue
            proposed[name] = self.base.sample_independent(study, trial, name, distribution)
        return {**point, **proposed}, proposed

    def _keep(self, trial, values: dict[str, Any]) -> None:
        if values:
            self._chosen.setdefault(trial.number, {}).update(values)

    def infer_relative_search_space(self, study, trial):
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space: dict[str, BaseDistribution]):
        region = self.region
        region.update(study)
        params = self.base.sample_relative(study, trial, search_space)
        if not self._constrained():
            return params
        held = [n for n in region.names if n in params]
        if len(held) < len(region.names):
            # None or part of the shape (CMA-ES with categorical block axes): the launch
            # parameters are then proposed together in sample_independent.
            params = {k: v for k, v in params.items() if k not in region.names}
            self._relative[trial.number] = params
            return params
        for attempt in range(region.redraws()):
            proposed = self._accept(study, trial, params, attempt)
            if proposed is not None:
                self._keep(trial, proposed)
                return params
            self.redrawn += 1
            params = self.base.sample_relative(study, trial, search_space)
        shape = region.draw(self._rng, trial.number)
        return {**params, **dict(zip(region.names, shape, strict=True))}

    def sample_independent(self, study, trial, param_name, param_distribution):
        chosen = self._chosen.get(trial.number, {})
        if param_name in chosen:
            return chosen[param_name]
        if param_name not in self.region.distributions or not self._constrained():
            return self.base.sample_independent(study, trial, param_name, param_distribution)
        chosen = self._propose_shape(study, trial)
        self._keep(trial, chosen)
        return chosen[param_name]

    def _propose_shape(self, study, trial) -> dict[str, Any]:
        region = self.region
        for attempt in range(region.redraws()):
            values = {n: trial.params[n] if n in trial.params else
                      self.base.sample_independent(study, trial, n, region.distributions[n])
                      for n in region.names}
            proposed = self._accept(study, trial, values, attempt)
            if proposed is not None:
                return {**values, **proposed}
            self.redrawn += 1
        return dict(zip(region.names, region.draw(self._rng, trial.number), strict=True))

    def before_trial(self, study, trial):
        self.base.before_trial(study, trial)

    def after_trial(self, study, trial, state, values):
        self._chosen.pop(trial.number, None)
        self._relative.pop(trial.number, None)
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()
        self._rng = random.Random()


def code_key(settings, launch: bool = False) -> str:
    """What of a replay's settings is code (the compile options, specialization, launch
    bounds), the timing settings left out. ``launch``: the grid, block and dynamic shared
    memory too (for settings whose launch shape was reset to the recorded one, where any
    launch left different was changed by a parameter outside the launch spaces).

    Parameters:
        settings: the replay settings.
        launch: include the launch.

    Returns:
        The key, as canonical JSON.
    """
    replay = settings.replay
    key = {"compile": settings.compile.to_dict(), "specialize": replay.specialize,
           "specialize_dims": replay.specialize_dims, "set_launch_bounds": replay.set_launch_bounds}
    if launch:
        key.update(grid=replay.grid, block=replay.block, shared_mem=replay.shared_mem)
    return json.dumps(key, sort_keys=True)
