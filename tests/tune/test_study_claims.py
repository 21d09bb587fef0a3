"""Claims on a shared budget are atomic among tuners (MirroredStorage.claim, study_lock.py):
processes that start together on one study, each claiming and running trials as the tuner
does, end with exactly the budget, whatever the storage."""

import subprocess
import sys
import textwrap

import optuna
import pytest
from mneme.tune.study import MirroredStorage, open_storage, study_lock
from optuna.trial import TrialState
from postgres_server import server, why_not

BUDGET = 40
PROCESSES = 8

#: one claimer: the tuner's loop without a tuner (claim, run what was taken, give back)
CLAIMER = textwrap.dedent("""
    import sys, time
    import optuna
    from mneme.tune.study import MirroredStorage, open_storage, tuner_owner
    from optuna.trial import TrialState

    url, budget, start = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    storage = open_storage(url)
    optuna.create_study(study_name="claims", storage=storage, load_if_exists=True)
    shared = MirroredStorage(storage, "claims", tuner_owner())
    study = optuna.Study("claims", shared, sampler=optuna.samplers.RandomSampler())
    finished = lambda: len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    time.sleep(max(0.0, start - time.time()))  # every process claims at the same moment
    ran = 0
    while True:
        taken = shared.claim(3, budget, finished, 0)
        if taken == 0:
            if shared.others_running == 0:
                break
            time.sleep(0.02)
            continue
        for held in range(taken, 0, -1):
            trial = study.ask()
            trial.suggest_int("x", 0, 9)
            time.sleep(0.002)
            study.tell(trial, 1.0)
            shared.announce(held - 1)
            ran += 1
    shared.close()
    print(ran)
""")


def _claim_together(url: str, tmp_path) -> list[int]:
    import time

    start = time.time() + 3.0  # after every interpreter has started and opened the study
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMER, url, str(BUDGET), str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path) for _ in range(PROCESSES)]
    outputs = [p.communicate(timeout=300) for p in procs]
    failed = [(p.returncode, err[-800:]) for p, (_, err) in zip(procs, outputs, strict=True)
              if p.returncode != 0]
    assert not failed, failed
    return [int(out) for out, _ in outputs]


def _complete(url: str) -> list:
    study = optuna.load_study(study_name="claims", storage=open_storage(url))
    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_processes_claiming_together_run_exactly_the_budget(kind, tmp_path):
    url = (f"sqlite:///{tmp_path / 'claims.sqlite3'}" if kind == "sqlite"
           else f"journal:{tmp_path / 'claims.log'}")
    ran = _claim_together(url, tmp_path)
    assert sum(ran) == BUDGET == len(_complete(url)), ran


@pytest.mark.skipif(why_not() is not None, reason=str(why_not()))
def test_processes_claiming_together_on_postgresql_run_exactly_the_budget(tmp_path):
    with server() as url:
        ran = _claim_together(url, tmp_path)
        assert sum(ran) == BUDGET == len(_complete(url)), ran


def test_a_claim_counts_what_the_others_hold_and_a_tuner_that_gives_back(tmp_path):
    storage = open_storage(f"journal:{tmp_path / 'j.log'}")
    optuna.create_study(study_name="claims", storage=storage)
    a = MirroredStorage(storage, "claims", "far-host:1")
    b = MirroredStorage(storage, "claims", "far-host:2")
    try:
        assert a.claim(6, 10, lambda: 0, 0) == 6
        assert b.claim(6, 10, lambda: 0, 0) == 4, "a holds 6 of 10"
        assert b.claim(6, 10, lambda: 0, 4) == 0
        a.announce(1, now=True)  # a gives 5 back (it stopped early)
        assert b.claim(6, 10, lambda: 0, 4) == 5
    finally:
        a.close()
        b.close()


def test_the_lock_excludes_another_process(tmp_path):
    """While one process holds a SQLite study's lock, another cannot take it."""
    url = f"sqlite:///{tmp_path / 'l.sqlite3'}"
    lock = study_lock(open_storage(url), "s")
    probe = textwrap.dedent(f"""
        import fcntl, os
        fd = os.open({str(tmp_path / 'l.sqlite3') + '.mneme-lock'!r}, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            print("taken")
        except BlockingIOError:
            print("held")
    """)
    with lock:
        inside = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    after = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    lock.close()
    assert (inside.stdout.strip(), after.stdout.strip()) == ("held", "taken")


def test_each_storage_gets_a_lock_every_tuner_sees(tmp_path):
    """A journal file and a SQLite file lock beside themselves (a thread lock there would
    let processes claim together); only an in-memory storage, one process, gets a thread lock."""
    journal = study_lock(open_storage(f"journal:{tmp_path / 'j.log'}"), "s")
    with journal:
        assert (tmp_path / "j.log.mneme-budget.lock").exists()
    assert not (tmp_path / "j.log.mneme-budget.lock").exists()
    sqlite = study_lock(open_storage(f"sqlite:///{tmp_path / 's.db'}"), "s")
    with sqlite:
        assert (tmp_path / "s.db.mneme-lock").exists()
    sqlite.close()
    assert type(study_lock(optuna.storages.InMemoryStorage(), "s")).__name__ == "_ThreadLock"


@pytest.mark.skipif(why_not() is not None, reason=str(why_not()))
def test_a_claim_on_a_server_that_went_away_is_one_line(tmp_path):
    from mneme.tune.errors import StudyError

    with server() as url:
        storage = open_storage(url)
        optuna.create_study(study_name="gone", storage=storage)
        study = MirroredStorage(storage, "gone", "far-host:1")
        assert study.claim(2, 10, lambda: 0, 0) == 2
    with pytest.raises(StudyError) as failure:
        study.claim(2, 10, lambda: 0, 0)
    assert str(failure.value).startswith("claiming trials in the study's storage failed")
    assert "\n" not in str(failure.value)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_tuners_of_one_process_share_the_budget(kind, tmp_path):
    """`mneme tune --app` runs two tuners of one study in one process (a lane joining a
    kernel's round): each counts the trials the other holds, so together they run exactly
    the budget (keyed by the process alone, each took the other's count for its own)."""
    import threading
    import time

    from mneme.tune.study import tuner_owner

    url = (f"sqlite:///{tmp_path / 'claims.sqlite3'}" if kind == "sqlite"
           else f"journal:{tmp_path / 'claims.log'}")
    optuna.create_study(study_name="claims", storage=open_storage(url))
    ran = [0, 0]
    start = threading.Barrier(2)

    def tuner(index: int) -> None:
        shared = MirroredStorage(open_storage(url), "claims", tuner_owner())
        study = optuna.Study("claims", shared, sampler=optuna.samplers.RandomSampler())
        finished = lambda: len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))  # noqa: E731
        start.wait()
        while True:
            taken = shared.claim(4, BUDGET, finished, 0)
            if taken == 0:
                if shared.others_running == 0:
                    break
                time.sleep(0.01)
                continue
            for held in range(taken, 0, -1):  # held while they run, as trials in flight are
                trial = study.ask()
                trial.suggest_int("x", 0, 9)
                time.sleep(0.005)
                study.tell(trial, 1.0)
                shared.announce(held - 1)
                ran[index] += 1
        shared.close()

    threads = [threading.Thread(target=tuner, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sum(ran) == BUDGET == len(_complete(url)), ran
    assert min(ran) > 0, ran  # both ran some
