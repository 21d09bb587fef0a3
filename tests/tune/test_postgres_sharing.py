"""Several tuners on one PostgreSQL study, tested against a real server (postgres_server.py):
compile-only tuners started together on one empty database share the budget exactly, and
a tuner killed mid-run loses nothing that the others and a resume do not make up."""

import signal
import time

import optuna
import pytest
from mneme.tune.search import TRIAL_ATTR
from mneme.tune.study import open_storage
from optuna.trial import TrialState
from postgres_server import server, why_not
from tune_support import GOLDEN, SAXPY, mneme_process, run_mneme

pytestmark = pytest.mark.skipif(why_not() is not None, reason=str(why_not()))

BUDGET = 40
TUNERS = 8


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


def _finished(url: str, name: str) -> list:
    study = optuna.load_study(study_name=name, storage=open_storage(url))
    return [t for t in study.get_trials(deepcopy=False)
            if t.state in (TrialState.COMPLETE, TrialState.FAIL)]


def test_a_tuner_killed_mid_run_is_made_up_by_the_others_and_a_resume(tmp_path):
    budget = 30
    with server() as url:
        args = ["tune", "-rdb", GOLDEN, "-rid", SAXPY, "--compile-only", "--trials", str(budget),
                "--space", "pipeline,bounds,codegen", "--study", "killed", "--storage", url,
                "--sampler", "random", "--cpu-workers", "1"]
        victim = mneme_process(*args, "--seed", "1")
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and victim.poll() is None:
            try:
                if len(_finished(url, "killed")) >= 3:
                    break
            except KeyError:  # the study is not created yet
                pass
            time.sleep(0.2)
        assert victim.poll() is None, victim.communicate()
        victim.send_signal(signal.SIGKILL)  # its claim and its trials in flight die with it
        victim.communicate()
        killed_at = len(_finished(url, "killed"))
        assert killed_at < budget
        survivors = [mneme_process(*args, "--seed", str(seed)) for seed in (2, 3)]
        outputs = [t.communicate(timeout=300) for t in survivors]
        assert all(t.returncode == 0 for t in survivors), [e[-600:] for _, e in outputs]
        finished = _finished(url, "killed")
        assert len(finished) == budget, (killed_at, len(finished))
        # A resume once the budget is spent runs nothing more.
        again = run_mneme(*args, "--seed", "4", timeout=300)
        assert again.returncode == 0, again.stderr
        trials = optuna.load_study(study_name="killed", storage=open_storage(url)).get_trials(
            deepcopy=False)
    assert len([t for t in trials if t.state in (TrialState.COMPLETE, TrialState.FAIL)]) == budget
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert len({t.number for t in trials}) == len(trials)
