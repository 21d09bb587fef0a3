"""The valid launch region (valid_region.py), driven through the real tuner and Optuna study
without a GPU: compile-only trials whose kernel outcome a worker hook decides, as a GPU
would (blocks wider than 512 threads are refused under any code; 128 threads fail only
with the O1 pipeline)."""

import datetime

import optuna
import pytest
from mneme.replay.engine import ReplaySettings
from mneme.tune import TuneOptions, Tuner
from mneme.tune.search import TRIAL_ATTR, LaunchRegion, code_key
from mneme.tune.search import _launch_probe as launch_probe
from mneme.tune.space import Categorical, SpaceContext, space
from mneme.tune.space.base import settings_with
from mneme.tune.space.bound import BoundSpace
from mneme.tune.space.builtin import LaunchSpace
from optuna.trial import TrialState
from tune_support import GOLDEN, SAXPY

#: saxpy's launch space: blocks of 32..1024 threads in warp steps; these 16 break it
INVALID_BLOCKS = tuple(range(544, 1025, 32))


def _levels(params, settings, ctx) -> ReplaySettings:
    return settings_with(settings, compile={"pipeline": f"default<{params['opt_level']}>"})


#: the code options of these tests: the recorded pipeline (O3) or O1
LEVELS = space(Categorical("opt_level", ("O3", "O1")), name="levels",
               baseline={"opt_level": "O3"})(_levels)


def refuse_wide_blocks(settings) -> None:
    """Worker hook: the kernel's outcome for a launch shape, as a GPU would give it."""
    from mneme.replay.engine import KernelFailedError

    block = settings.replay.block[0]
    if block in INVALID_BLOCKS:
        raise KernelFailedError(f"the launch was refused: block {block}", kind="launch-refused")
    if block == 128 and settings.compile.pipeline == "default<O1>":
        raise KernelFailedError("the kernel failed on the device (O1 only)",
                                kind="context-poisoned")


def _tuner(tmp_path, sampler: str, trials: int, probes=(), name="region") -> Tuner:
    options = TuneOptions(trials=trials, devices=None, cpu_workers=2, sampler=sampler, seed=11,
                          storage=f"sqlite:///{tmp_path / 's.db'}", study=name,
                          before_run=refuse_wide_blocks)
    tuner = Tuner(GOLDEN, [SAXPY], ["launch", LEVELS], options)
    for point in probes:  # what a probe of the recorded code would try first
        tuner.study.enqueue_trial(point)
    return tuner


def _stored(tmp_path, name="region"):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 's.db'}")
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def _proposed_after_failure(trials, sampler: str) -> list:
    """Trials started after their shape failed under the recorded code (O3)."""
    failed_at: dict[int, datetime.datetime] = {}
    for t in trials:
        if t.state == TrialState.FAIL and t.params["opt_level"] == "O3":
            block = t.params["block_x"]
            failed_at[block] = min(failed_at.get(block, t.datetime_complete), t.datetime_complete)
    proposed = (TrialState.COMPLETE, TrialState.FAIL) + (() if sampler == "grid"
                                                         else (TrialState.PRUNED,))
    return [t for t in trials if t.state in proposed and t.params.get("block_x") in failed_at
            and t.datetime_start > failed_at[t.params["block_x"]]]


@pytest.mark.parametrize("sampler", ["tpe", "random", "cmaes", "nsga2"])
def test_a_shape_that_fails_the_recorded_code_is_never_proposed_again(tmp_path, sampler):
    probes = [{"block_x": b, "opt_level": "O3"} for b in INVALID_BLOCKS]
    tuner = _tuner(tmp_path, sampler, trials=40, probes=probes)
    outcome = tuner.run()
    trials = _stored(tmp_path)
    assert len(outcome.trials) == 40
    assert _proposed_after_failure(trials, sampler) == []
    assert set(tuner.region.invalid) == {(b,) for b in INVALID_BLOCKS}
    # Half the shapes are invalid: a sampler left alone proposes them again and again.
    wide = [t for t in outcome.trials if t.params["block_x"] in INVALID_BLOCKS]
    assert len(wide) == len(INVALID_BLOCKS) and all(t.failure == "launch-refused" for t in wide)
    assert tuner.study.sampler.redrawn > 0


def test_the_grid_walk_skips_the_points_of_an_invalid_shape(tmp_path):
    tuner = _tuner(tmp_path, "grid", trials=100)
    outcome = tuner.run()
    trials = _stored(tmp_path)
    assert _proposed_after_failure(trials, "grid") == []
    wide = [t for t in outcome.trials if t.params["block_x"] in INVALID_BLOCKS]
    # The walk tries every shape with the recorded code (O3) first: each invalid shape
    # costs one trial, and its O1 point is skipped.
    assert len(wide) == 16 and {t.params["opt_level"] for t in wide} == {"O3"}
    skipped = [t for t in trials if t.state == TrialState.PRUNED]
    assert len(skipped) == 16
    assert all(t.user_attrs[TRIAL_ATTR]["failure"] == "invalid-launch" for t in skipped)
    assert len(outcome.trials) == 64 - 16


def test_a_shape_that_fails_only_with_other_code_stays(tmp_path):
    probes = [{"block_x": 128, "opt_level": "O1"}, {"block_x": 128, "opt_level": "O3"}]
    tuner = _tuner(tmp_path, "random", trials=12, probes=probes)
    outcome = tuner.run()
    by_number = {t.number: t for t in outcome.trials}
    assert by_number[0].state == "failed" and by_number[0].failure == "context-poisoned"
    assert by_number[1].state == "complete"  # the shape stays in the space
    assert (128,) not in tuner.region.invalid and (128,) in tuner.region.valid
    # Resumed, the same pair again is answered with its failure, not replayed.
    resumed = _tuner(tmp_path, "random", trials=13, probes=probes[:1])
    again = resumed.run()
    last = max(again.trials, key=lambda t: t.number)
    assert last.params == probes[0] and last.failure == "context-poisoned"
    assert again.restarts == 0 and (128,) not in resumed.region.invalid


def test_what_the_region_learned_survives_a_resume(tmp_path):
    probes = [{"block_x": b, "opt_level": "O3"} for b in INVALID_BLOCKS]
    first = _tuner(tmp_path, "random", trials=len(INVALID_BLOCKS), probes=probes)
    first.run()
    resumed = _tuner(tmp_path, "random", trials=60)
    started = datetime.datetime.now()
    outcome = resumed.run()
    new = [t for t in _stored(tmp_path) if t.datetime_start > started]
    assert len(outcome.trials) == 60 and len(new) == 60 - len(INVALID_BLOCKS)
    assert set(resumed.region.invalid) == {(b,) for b in INVALID_BLOCKS}
    assert not [t for t in new if t.params["block_x"] in INVALID_BLOCKS]


def _frozen(block: tuple[int, int], state, failure=None):
    attrs = {TRIAL_ATTR: {"failure": failure}} if failure else {}
    return optuna.trial.create_trial(
        params={"block_x": block[0], "block_y": block[1]},
        distributions={n: optuna.distributions.CategoricalDistribution(tuple(2**i for i in range(11)))
                       for n in ("block_x", "block_y")},
        state=state, values=[1.0] if state == TrialState.COMPLETE else None, user_attrs=attrs)


def test_shapes_with_the_threads_of_an_invalid_one_are_suspect():
    ctx = SpaceContext(grid=(8, 8, 1), block=(16, 16, 1))
    bound = BoundSpace([LaunchSpace()], ctx)
    base = code_key(bound.apply({"block_x": 16, "block_y": 16},
                                ReplaySettings.from_dict({"compile": {}, "replay": {}})))
    region = LaunchRegion(bound, lambda _point: base, base)
    region.learn(_frozen((32, 16), TrialState.FAIL, "unverified"))
    region.learn(_frozen((16, 32), TrialState.COMPLETE))
    region.learn(_frozen((32, 32), TrialState.FAIL, "error"))  # not the shape's fault
    assert region.is_invalid((32, 16)) and not region.is_invalid((32, 32))
    assert region.is_suspect((64, 8)) and region.is_suspect((512, 1))  # 512 threads too
    assert not region.is_suspect((16, 32))  # ran with 512 threads: known valid
    assert not region.is_suspect((16, 16))


def test_the_probe_tries_each_shape_once_before_the_search(tmp_path):
    """No explicit probes: the tuner runs the recorded code (O3) with every launch shape
    first, so each invalid shape costs one trial and the search never proposes it."""
    tuner = _tuner(tmp_path, "tpe", trials=80)
    outcome = tuner.run()
    trials = _stored(tmp_path)
    assert len(outcome.trials) == 80
    first = sorted(outcome.trials, key=lambda t: t.number)[:32]
    assert {t.params["block_x"] for t in first} == set(range(32, 1025, 32)), "every shape probed"
    assert {t.params["opt_level"] for t in first} == {"O3"}
    wide = [t for t in outcome.trials if t.params["block_x"] in INVALID_BLOCKS]
    assert len(wide) == len(INVALID_BLOCKS) and {t.number for t in wide} <= {t.number for t in first}
    assert _proposed_after_failure(trials, "tpe") == []
    assert set(tuner.region.invalid) == {(b,) for b in INVALID_BLOCKS}
    # the search begins once every probe trial has answered (none beside them)
    stored = sorted(trials, key=lambda t: t.number)
    probe_done = max(t.datetime_complete for t in stored[:32])
    assert all(t.datetime_start >= probe_done for t in stored[32:])


def test_the_probe_takes_at_most_half_the_budget_and_can_be_turned_off(tmp_path):
    tuner = _tuner(tmp_path, "random", trials=60)
    point = tuner.bound[0].baseline()
    probes = launch_probe.probe_points(tuner, tuner.study, point, 60)
    # 31 shapes besides the recorded one, 30 trials for the probe: a sample of them
    assert len(probes) == 30 and len({p["block_x"] for p in probes}) == 30
    assert all(p["opt_level"] == "O3" and p["block_x"] != point["block_x"] for p in probes)
    tuner.options.probe = False
    assert launch_probe.probe_points(tuner, tuner.study, point, 60) == []


def test_the_probe_runs_shapes_no_wider_than_the_recorded_one_first(tmp_path):
    """Narrower blocks mostly fail cheaply (work left undone), wider ones fault: the
    faults come last, when the spare workers kept for them are ready."""
    tuner = _tuner(tmp_path, "random", trials=80)
    point = tuner.bound[0].baseline()
    blocks = [p["block_x"] for p in launch_probe.probe_points(tuner, tuner.study, point, 80)]
    recorded = point["block_x"]
    assert len(blocks) == 31 and any(b < recorded for b in blocks)
    assert blocks == sorted(b for b in blocks if b <= recorded) + sorted(b for b in blocks if b > recorded)


def _halve_grid(params, settings, ctx) -> ReplaySettings:
    if not params["half"]:
        return settings
    grid = settings.replay.grid or ctx.grid
    return settings_with(settings, replay={"grid": (max(1, grid[0] // 2), *grid[1:])})


#: a space outside the launch spaces that moves the grid (a half grid leaves work undone)
HALF = space(Categorical("half", (False, True)), name="half", baseline={"half": False})(_halve_grid)


def unverified_on_half_grids(settings) -> None:
    from mneme.replay.engine import KernelFailedError

    block = (settings.replay.block or (256, 1, 1))[0]  # (None: as recorded, 2 x 256)
    if (settings.replay.grid or (2, 1, 1))[0] * block < 512:  # fewer threads than recorded
        raise KernelFailedError("the result differs from the recording", kind="unverified")


def test_a_parameter_outside_the_launch_spaces_that_moves_the_grid_is_not_the_shapes_fault(tmp_path):
    options = TuneOptions(trials=60, devices=None, cpu_workers=2, sampler="random", seed=3,
                          storage=f"sqlite:///{tmp_path / 's.db'}", study="half",
                          before_run=unverified_on_half_grids, probe=False)
    tuner = Tuner(GOLDEN, [SAXPY], ["launch", HALF], options)
    outcome = tuner.run()
    failed = [t for t in outcome.trials if t.state == "failed"]
    assert len(failed) >= 10 and all(t.params["half"] for t in failed), [t.params for t in failed]
    tuner.region.update(tuner.study)  # (the last trials too)
    assert tuner.region.invalid == {}, "no launch shape is blamed for the half grid"
    # The same shape with the whole grid still runs (not answered from the half grid's failure).
    shapes_failed = {t.params["block_x"] for t in failed}
    assert any(t.state == "complete" and t.params["block_x"] in shapes_failed and not t.params["half"]
               for t in outcome.trials)



def _golden_copy(tmp_path):
    import shutil

    copy = tmp_path / "golden.rdb"
    shutil.copytree(GOLDEN, copy)
    return copy


def test_a_later_run_starts_knowing_the_shapes_an_earlier_run_proved(tmp_path, monkeypatch):
    """The probe's answers are kept with the recording (shape_cache.py): a second run of
    the same instance, in another study, probes nothing and never launches an invalid
    shape under the recorded code (an unseeded run: a seeded one repeats the first's
    path, below)."""
    from mneme.tune.study import _shape_cache as shape_cache

    db = _golden_copy(tmp_path)
    # compile-only workers with a hook stand in for a GPU here (both are excluded in real runs)
    monkeypatch.setattr(launch_probe, "shape_cache_applies", lambda tuner: True)

    def run(name, trials, seed=11):
        options = TuneOptions(trials=trials, devices=None, cpu_workers=2, sampler="tpe", seed=seed,
                              storage=f"sqlite:///{tmp_path / 's.db'}", study=name,
                              before_run=refuse_wide_blocks)
        return Tuner(db, [SAXPY], ["launch", LEVELS], options).run()

    first = run("first", 80)  # (the probe takes at most half the budget: 80 covers 31 shapes)
    assert first.shapes_known == 0
    instance = __import__("mneme.replay.db", fromlist=["Database"]).Database.open(db).instance(SAXPY)
    kept = shape_cache.load(instance, Tuner(db, [SAXPY], ["launch", LEVELS], TuneOptions(
        devices=None, storage=f"sqlite:///{tmp_path / 'x.db'}", study="x")).region.recorded_code)
    assert sorted(k for k, v in kept.items() if v != shape_cache.VALID) == sorted(
        shape_cache.launch_key(*_launch(b)) for b in INVALID_BLOCKS)
    assert sum(v == shape_cache.VALID for v in kept.values()) == 32 - len(INVALID_BLOCKS)

    second = run("second", 20, seed=None)
    assert second.shapes_known == 32
    assert not [t for t in second.trials if t.params["block_x"] in INVALID_BLOCKS]
    # no probe: after the recorded configuration, the search's own proposals (both levels)
    assert {t.params["opt_level"] for t in second.trials} == {"O3", "O1"}


def test_a_seeded_later_run_repeats_the_first_runs_trials_without_launching_invalid_shapes(
        tmp_path, monkeypatch):
    """A seeded run repeats its search (trial_order.py): run again on the same recording,
    where the first run's shapes are kept, it asks the same trials in the same order; those
    of shapes the first run found invalid are answered with that failure, in their place,
    and never launched."""
    db = _golden_copy(tmp_path)
    monkeypatch.setattr(launch_probe, "shape_cache_applies", lambda tuner: True)

    def run(name):
        options = TuneOptions(trials=48, devices=None, cpu_workers=2, sampler="tpe", seed=11,
                              storage=f"sqlite:///{tmp_path / 's.db'}", study=name,
                              before_run=refuse_wide_blocks)
        return Tuner(db, [SAXPY], ["launch", LEVELS], options).run()

    first, second = run("first"), run("second")
    assert second.shapes_known > 0  # (what the first run learned, kept)
    assert [(t.number, t.state, t.params) for t in second.trials] == \
        [(t.number, t.state, t.params) for t in first.trials]
    refused = [t for t in first.trials if t.state == "failed" and t.params["block_x"] in INVALID_BLOCKS
               and t.params["opt_level"] == "O3"]
    assert refused, "the first run met no invalid shape: the test proves nothing"
    answered = {t.number: t for t in second.trials}
    for t in refused:  # the first run launched them; the second took the first's answer
        assert "block" in t.reason and "earlier run" not in t.reason, t.reason
        assert answered[t.number].failure == t.failure
        assert "earlier run" in answered[t.number].reason, answered[t.number].reason


def _launch(block_x: int):
    """saxpy's launch with ``block_x`` threads covering the recorded grid (golden: 4096
    elements, recorded 256 threads x 16 blocks), as the launch space resolves it."""
    from mneme.replay.db import Database

    instance = Database.open(GOLDEN).instance(SAXPY)
    bound = BoundSpace([LaunchSpace()], SpaceContext.from_instance(instance))
    region = LaunchRegion.for_space(bound, lambda: ReplaySettings())
    return region.launch_of((block_x,))


def test_compile_only_runs_and_hooked_runs_keep_nothing(tmp_path):
    from mneme.tune.study import _shape_cache as shape_cache

    db = _golden_copy(tmp_path)
    options = TuneOptions(trials=12, devices=None, cpu_workers=2, seed=11,
                          storage=f"sqlite:///{tmp_path / 's.db'}", study="c")
    tuner = Tuner(db, [SAXPY], ["launch"], options)
    tuner.run()
    assert not launch_probe.shape_cache_applies(tuner)
    assert not shape_cache.cache_path(tuner.instances[0]).exists()


def test_kept_shapes_learned_with_other_code_or_damaged_are_ignored(tmp_path):
    from mneme.replay.db import Database
    from mneme.tune.study import _shape_cache as shape_cache

    instance = Database.open(_golden_copy(tmp_path)).instance(SAXPY)
    assert shape_cache.store(instance, "code A", {"grid 1x1x1 block 64x1x1 shared 0": "context-poisoned"})
    assert shape_cache.store(instance, "code A", {"grid 1x1x1 block 32x1x1 shared 0": "valid"})
    assert shape_cache.load(instance, "code A") == {"grid 1x1x1 block 64x1x1 shared 0": "context-poisoned",
                                                    "grid 1x1x1 block 32x1x1 shared 0": "valid"}
    assert shape_cache.load(instance, "code B") == {}
    shape_cache.cache_path(instance).write_text("{not json")
    assert shape_cache.load(instance, "code A") == {}
