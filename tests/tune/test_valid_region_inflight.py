"""Launch shapes with a trial in flight (valid_region.py), without a GPU. A shape whose
validity is unknown and that has a trial running is *pending*: it is not proposed again
under the recorded code while another shape can be, is proposed once its trial answered,
and is still proposed when it is the only shape left (a small space never starves).

ValidRegionSampler is driven through real Optuna studies and samplers on a space of blocks
of 32, 64 (recorded), 96 and 128 threads, with the recorded pipeline (O3) or O1; trials
are asked and told here as the tuner's loop does, and one left running is what the tuner
has in flight. The last test runs the tuner itself, with compile-only workers."""

import optuna
import pytest
from mneme.replay.engine import ReplayConfig, ReplaySettings
from mneme.replay.jit import CompileConfig
from mneme.tune import TuneOptions, Tuner
from mneme.tune.search import TRIAL_ATTR, LaunchRegion, ValidRegionSampler
from mneme.tune.search._valid_region import _distribution
from mneme.tune.space import SpaceContext
from mneme.tune.space.bound import BoundSpace
from mneme.tune.space.builtin import LaunchSpace
from mneme.tune.study import make_sampler
from optuna.trial import TrialState
from test_valid_region import INVALID_BLOCKS, LEVELS, refuse_wide_blocks
from tune_support import GOLDEN, SAXPY

SAMPLERS = ["tpe", "random", "cmaes", "nsga2"]
PENDING = {"block_x": 96, "opt_level": "O3"}  # an unknown shape, under the recorded code


def _study(sampler: str, seed: int = 7):
    ctx = SpaceContext(grid=(64, 1, 1), block=(64, 1, 1), max_threads_per_block=128)
    bound = BoundSpace([LaunchSpace(), LEVELS], ctx)
    region = LaunchRegion.for_space(bound, lambda: ReplaySettings(CompileConfig(), ReplayConfig()))
    wrapped = ValidRegionSampler(make_sampler(sampler, 1, seed), region, seed)
    study = optuna.create_study(sampler=wrapped)
    # What the search learned before: the recorded shape runs, the others were tried with
    # O1 only (which proves nothing about a shape), enough for TPE to leave its start-up.
    for i in range(12):
        block, level = (64, "O3") if i % 3 == 0 else ((32, 96, 128)[i % 3], "O1")
        _add(study, bound, block, level, value=1.0 + i / 100)
    return study, bound, region


def _add(study, bound, block, level, value=None, failure=None) -> None:
    distributions = {p.name: _distribution(p) for p in bound.params}
    state = TrialState.COMPLETE if failure is None else TrialState.FAIL
    study.add_trial(optuna.trial.create_trial(
        params={"block_x": block, "opt_level": level}, distributions=distributions, state=state,
        values=None if failure else [value],
        user_attrs={TRIAL_ATTR: {"failure": failure}} if failure else {}))


def _in_flight(study, bound, point):
    """A trial of ``point`` asked and left running (as the tuner's loop has it in flight)."""
    study.enqueue_trial(point)
    trial = study.ask()
    assert bound.suggest(trial) == point
    return trial


def _proposals(study, bound, count: int) -> list[dict]:
    """``count`` trials asked and answered one after the other (the one left in flight
    stays so), each verified: the pending shape's block best (0.5 against 1.0)."""
    points = []
    for _ in range(count):
        trial = study.ask()
        point = bound.suggest(trial)
        points.append(point)
        study.tell(trial, 0.5 if point["block_x"] == PENDING["block_x"] else 1.0)
    return points


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_a_pending_shape_is_not_proposed_again_under_the_recorded_code(sampler):
    study, bound, region = _study(sampler)
    first = _in_flight(study, bound, PENDING)
    while_pending = _proposals(study, bound, 80)
    assert PENDING not in while_pending, [
        i for i, p in enumerate(while_pending) if p == PENDING]
    # Other shapes went first; the pending shape stays in the space with other code.
    assert {p["block_x"] for p in while_pending} - {96} == {32, 64, 128}
    assert (96,) not in region.valid and (96,) not in region.invalid
    # Answered valid (it ran under the recorded code): no proposal is held back any more,
    # and the search goes there (CMA-ES has settled on the recorded block by then).
    study.tell(first, 0.5)
    refused = study.sampler.redrawn
    answered = _proposals(study, bound, 80)
    assert (96,) in region.valid and not region.is_pending((96,))
    assert study.sampler.redrawn == refused
    assert PENDING in answered or sampler == "cmaes"


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_the_only_shape_left_is_proposed_while_pending(sampler):
    """Every other shape failed under the recorded code: the pending one is all there is,
    and it is proposed (under the recorded code too) rather than starving the search."""
    study, bound, region = _study(sampler)
    for block in (32, 64, 128):
        _add(study, bound, block, "O3", failure="launch-refused")
    _in_flight(study, bound, PENDING)
    points = _proposals(study, bound, 30)
    assert set(region.invalid) == {(32,), (64,), (128,)}
    assert {p["block_x"] for p in points} == {96}
    # under the recorded code too: a proposal of it is accepted at once (with most shapes
    # invalid the wrapped sampler is asked once, then the shape drawn from the region
    # keeps the sampler's code, which TPE learned to be O1 here)
    trial = study.ask()
    assert study.sampler._accept(study, trial, {"block_x": 96}, attempt=0) is not None
    assert not region.other_shape_left((96,), trial.number)


def test_a_pending_shape_under_other_code_goes_after_the_others():
    """Under other code a pending shape is like a suspect one: drawn again a few times
    first, so the other shapes are tried while its trial runs."""
    study, bound, region = _study("random")
    _in_flight(study, bound, PENDING)
    before = study.sampler.redrawn
    points = _proposals(study, bound, 80)
    assert study.sampler.redrawn - before >= 20  # proposals of the pending shape drawn again
    assert sum(p["block_x"] == 96 for p in points) <= 2


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_each_invalid_shape_costs_one_trial_under_the_recorded_code(tmp_path, sampler):
    """The tuner without a probe, 6 trials in flight on 2 compile-only workers whose hook
    refuses blocks wider than 512 threads (test_valid_region.py): each wide shape the search
    finds costs one trial under the recorded code (O3), never two (before the rule, one
    shape of TPE's or random's search often cost two: the GPU flake's pattern)."""
    options = TuneOptions(trials=60, devices=None, cpu_workers=2, sampler=sampler, seed=11,
                          storage=f"sqlite:///{tmp_path / 's.db'}", study="inflight",
                          before_run=refuse_wide_blocks, probe=False)
    tuner = Tuner(GOLDEN, [SAXPY], ["launch", LEVELS], options)
    outcome = tuner.run()
    refused = [t for t in outcome.trials if t.state == "failed"
               and tuner.region.runs_recorded_code(t.params)]
    assert refused and all(t.failure == "launch-refused" for t in refused)
    assert set(tuner.region.invalid) <= {(b,) for b in INVALID_BLOCKS}
    assert len(refused) == len(tuner.region.invalid), sorted(t.params["block_x"] for t in refused)


def test_with_most_shapes_invalid_the_sampler_is_asked_once_per_shape():
    """A model-based proposal costs milliseconds and lands on an invalid shape nearly every
    time once most are invalid: the region then asks the wrapped sampler once, and draws."""
    from mneme.tune.search import REDRAWS

    study, bound, region = _study("tpe")
    region.update(study)
    assert region.redraws() == REDRAWS
    _add(study, bound, 32, "O3", failure="launch-refused")
    region.update(study)
    assert region.redraws() == REDRAWS  # one of four: the sampler still proposes
    for block in (96, 128):
        _add(study, bound, block, "O3", failure="unverified")
    region.update(study)
    assert region.redraws() == 1
    before = study.sampler.redrawn
    points = _proposals(study, bound, 20)
    assert {p["block_x"] for p in points} == {64}
    assert study.sampler.redrawn - before <= 20  # at most one refused proposal per trial
