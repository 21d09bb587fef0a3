"""The tuner's study writes finished trials to an RDB storage in batches and reads back only
the trials other tuners wrote (study_writes.py): the work per trial that once held the
tuner's loop near 60-70 trials/s (benchmarks/tune_loop.py) stays bounded, counted in SQL
statements and trials read, not in seconds."""

import datetime
import math

import optuna
import pytest
from mneme.tune.study import MirroredStorage, make_sampler, open_storage
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState
from sqlalchemy import event

TRIALS = 40
#: SQL statements a trial written alone may take (Optuna's add_trial: ~30)
STATEMENTS_PER_TRIAL = 9


def _mirrored(storage, name: str, owner: str, seed=None) -> tuple[MirroredStorage, optuna.Study]:
    """A tuner's study storage over ``storage``, and the plain study over it."""
    mirror = MirroredStorage(storage, name, owner)
    return mirror, optuna.Study(name, mirror, sampler=optuna.samplers.RandomSampler(seed=seed))


def _run(study: optuna.Study, count: int, value=lambda i: float(i)) -> None:
    for i in range(count):
        trial = study.ask()
        trial.suggest_int("block", 32, 1024, step=32)
        trial.suggest_categorical("level", ("O1", "O3"))
        trial.set_user_attr("mneme", {"settings": {"i": i}, "owner": "test"})
        if i % 5 == 4:
            study.tell(trial, state=TrialState.FAIL)
        else:
            study.tell(trial, value(i))


def _statements(engine) -> list[str]:
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *args: seen.append(statement))
    return seen


def test_trials_are_written_in_few_statements_and_read_as_optuna_writes_them(tmp_path):
    storage = open_storage(f"sqlite:///{tmp_path / 's.sqlite3'}")
    optuna.create_study(study_name="w", storage=storage)
    mirror, study = _mirrored(storage, "w", "host:1", seed=1)
    seen = _statements(storage.engine)
    _run(study, TRIALS, value=lambda i: math.inf if i == 2 else float(i))
    mirror.flush()
    writes = [s for s in seen if not s.lstrip().upper().startswith(("SELECT", "PRAGMA"))]
    assert mirror._rdb_writer.batches <= TRIALS
    assert len(seen) <= STATEMENTS_PER_TRIAL * TRIALS, len(seen)
    assert writes, "nothing was written"
    mirror.close()
    mine = {t.number: t for t in study.get_trials(deepcopy=False)}
    stored = optuna.load_study(study_name="w", storage=open_storage(
        f"sqlite:///{tmp_path / 's.sqlite3'}")).get_trials(deepcopy=False)
    assert sorted(t.number for t in stored) == list(range(TRIALS))  # numbered as Optuna does
    by_order = sorted(stored, key=lambda t: t._trial_id)
    for written, read in zip(sorted(mine.values(), key=lambda t: t.number), by_order, strict=True):
        assert read.state == written.state and read.values == written.values
        assert read.params == written.params and read.distributions == written.distributions
        assert read.user_attrs["mneme"] == written.user_attrs["mneme"]
        assert read.user_attrs[MirroredStorage.WRITER_ATTR] == mirror._writer_id
        assert abs(read.datetime_complete - written.datetime_complete) < datetime.timedelta(seconds=1)
    assert by_order[2].values == [math.inf]


def test_a_pull_reads_only_the_other_tuners_trials(tmp_path):
    url = f"sqlite:///{tmp_path / 's.sqlite3'}"
    optuna.create_study(study_name="p", storage=open_storage(url))
    a, a_study = _mirrored(open_storage(url), "p", "host:1", seed=1)
    b, b_study = _mirrored(open_storage(url), "p", "host:2", seed=2)
    _run(a_study, 10)
    a.flush()
    loaded = []
    original = a._reader._load
    a._reader._load = lambda ids: loaded.extend(ids) or original(ids)
    assert a.pull() == 0 and loaded == []  # its own ten: not read back
    _run(b_study, 7)
    b.flush()
    assert a.pull() == 7 and len(loaded) == 7
    assert a.pull() == 0 and len(loaded) == 7
    assert b.pull() == 10
    assert len(a_study.get_trials(deepcopy=False)) == len(b_study.get_trials(deepcopy=False)) == 17
    a.close()
    b.close()
    # A study opened again (a resumed run) reads every trial, its earlier run's too.
    again, again_study = _mirrored(open_storage(url), "p", "host:1")
    assert len(again_study.get_trials(deepcopy=False)) == 17
    again.close()


def test_a_journal_storage_keeps_optunas_writes(tmp_path):
    storage = open_storage(f"journal:{tmp_path / 's.log'}")
    optuna.create_study(study_name="j", storage=storage)
    mirror, study = _mirrored(storage, "j", "host:1", seed=1)
    assert mirror._rdb_writer is None and mirror._reader is None
    _run(study, 6)
    mirror.close()
    assert len(optuna.load_study(study_name="j", storage=storage).get_trials()) == 6


def test_tpe_proposes_without_a_group_decomposition():
    # Every trial of a mneme space has every parameter: the decomposition is one group,
    # rebuilt from every trial at each ask (benchmarks/tune_loop.py).
    sampler = make_sampler("tpe", 1, 0)
    assert sampler._multivariate and sampler._constant_liar and not sampler._group


@pytest.mark.parametrize("distribution", [IntDistribution(1, 9), CategoricalDistribution(("a", "b"))])
def test_an_unfinished_trial_of_another_writer_is_pulled_once_finished(tmp_path, distribution):
    url = f"sqlite:///{tmp_path / 's.sqlite3'}"
    optuna.create_study(study_name="u", storage=open_storage(url))
    study, _ = _mirrored(open_storage(url), "u", "host:1", seed=1)
    # (an older tuner, or plain Optuna, whose trials run in the storage)
    plain = optuna.load_study(study_name="u", storage=open_storage(url))
    running = plain.ask()
    running._suggest("x", distribution)
    assert study.pull() == 0
    plain.tell(running, 1.0)
    assert study.pull() == 1
    study.close()
