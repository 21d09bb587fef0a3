"""Tuning kernels that assume their launch shape (GPU, issue 23): the corpus program
launch_assumptions (a shared array sized by a #define'd block size, __launch_bounds__ with
a fixed warp count, a reduction that assumes a power-of-two block, a TILE x TILE tile) is
recorded, and each kernel is tuned over launch and pipeline. The probe tries every launch
shape with the recorded code first; no shape that failed there is proposed again, few
trials go to invalid shapes, and every run finishes with verified trials."""

import datetime

import optuna
import pytest
from mneme.tune import TuneOptions, Tuner
from mneme.tune.search import INVALIDATING, TRIAL_ATTR
from optuna.trial import TrialState
from tune_support import instance_of, recorded_on_gpu

pytestmark = pytest.mark.gpu

KERNELS = ["tile_stencil", "warp_partials", "pow2_block_sum", "tile_transpose"]
#: kernels whose invalid shapes index past a shared array: each would fault unguarded
OUT_OF_BOUNDS = {"tile_stencil", "tile_transpose"}
TRIALS = 60


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return recorded_on_gpu(tmp_path_factory, "launch_assumptions", "launch-assumptions")[0]


def _after_failure(trials, region) -> list:
    """Trials started after their launch shape failed under the recorded code (the recorded
    pipeline and passes: a failure with other code is not the shape's fault)."""

    def shapes(t) -> tuple:
        return tuple(sorted((k, v) for k, v in t.params.items() if k.startswith("block")))

    failed_at: dict[tuple, datetime.datetime] = {}
    for t in trials:
        attrs = t.user_attrs.get(TRIAL_ATTR, {})
        if (t.state == TrialState.FAIL and region.runs_recorded_code(t.params)
                and attrs.get("failure") in INVALIDATING):
            failed_at[shapes(t)] = min(failed_at.get(shapes(t), t.datetime_complete), t.datetime_complete)
    return [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.FAIL)
            and shapes(t) in failed_at and t.datetime_start > failed_at[shapes(t)]]


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_kernel_that_assumes_its_launch_shape_tunes_within_its_valid_region(recording, tmp_path, kernel):
    storage = f"sqlite:///{tmp_path / 'tune.sqlite3'}"
    options = TuneOptions(trials=TRIALS, devices=[0], storage=storage, study=kernel, seed=5,
                          iterations=3)
    tuner = Tuner(recording, [instance_of(recording, kernel)], "launch,pipeline", options)
    outcome = tuner.run()
    trials = optuna.load_study(study_name=kernel, storage=storage).get_trials(deepcopy=False)
    complete = [t for t in outcome.trials if t.state == "complete"]
    invalid = [t for t in outcome.trials if t.state == "failed"
               and t.failure in INVALIDATING]
    again = _after_failure(trials, tuner.region)
    print(f"\n{kernel}: {len(complete)} verified, {len(invalid)} failed on a launch shape "
          f"({len(tuner.region.invalid)} shapes found invalid), {len(again)} proposed again, "
          f"{outcome.restarts} restarts ({sum(r.spare_prepared for r in outcome.restart_log)} "
          f"to a prepared spare), {outcome.trials_per_second:.1f} trials/s over "
          f"{outcome.search_seconds:.1f} s of search ({outcome.elapsed:.1f} s in all)")
    assert complete and all(t.verified is True for t in complete)
    assert again == [], [(t.number, t.params) for t in again]
    # Each invalid shape costs one trial under the recorded code; shapes that fail only
    # with some other code stay in the space (those failures are not counted here).
    recorded_code = [t for t in invalid if tuner.region.runs_recorded_code(t.params)]
    assert len(recorded_code) == len(tuner.region.invalid), [
        (t.number, t.params, t.failure) for t in recorded_code]
    if kernel in OUT_OF_BOUNDS:
        # The guarded probe catches the accesses past the shared array: no context lost.
        caught = [t for t in recorded_code if t.failure == "out-of-bounds"]
        poisoned = [t for t in outcome.trials if t.failure == "context-poisoned"]
        assert caught and not poisoned, [(t.number, t.params, t.failure) for t in invalid]
