"""Several tuners on one PostgreSQL study, tested against a real server (postgres_server.py):
compile-only tuners started together on one empty database share the budget exactly."""

import optuna
import pytest
from mneme.tune.study import open_storage
from mneme.tune.tuner import TRIAL_ATTR
from optuna.trial import TrialState
from postgres_server import server, why_not
from tune_support import GOLDEN, SAXPY, mneme_process

pytestmark = pytest.mark.skipif(why_not() is not None, reason=str(why_not()))

BUDGET = 40
TUNERS = 8


@pytest.mark.xfail(strict=True, reason="known overshoot, issue 23: 8 compile-only tuners on "
                   "PostgreSQL ended at 70 trials for a budget of 40 (journal files: 40-41)")
def test_tuners_started_together_on_an_empty_database_share_the_budget():
    with server() as url:
        args = ["tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", str(BUDGET),
                "--space", "pipeline,bounds,codegen", "--study", "shared", "--storage", url,
                "--sampler", "random", "--cpu-workers", "1"]
        tuners = [mneme_process(*args, "--seed", str(seed)) for seed in range(TUNERS)]
        outputs = [t.communicate(timeout=300) for t in tuners]
        failed = [(t.returncode, err[-600:]) for t, (_, err) in zip(tuners, outputs, strict=True)
                  if t.returncode != 0]
        assert not failed, failed
        trials = optuna.load_study(study_name="shared", storage=open_storage(url)).get_trials(
            deepcopy=False)
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.FAIL)]
    assert len(finished) == BUDGET, [t.user_attrs[TRIAL_ATTR].get("owner") for t in finished]
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert len({t.number for t in trials}) == len(trials)
    # Every tuner worked on the one study (none was refused by the race to create it).
    owners = {t.user_attrs[TRIAL_ATTR]["owner"].rpartition(":")[2] for t in finished}
    assert owners <= {str(t.pid) for t in tuners}
