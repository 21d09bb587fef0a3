"""Finished trials written to an RDB storage in batches, and other tuners' trials read back
without this tuner's own (study.MirroredStudy's writer thread and ``pull``).

Optuna's ``add_trial`` on an RDB storage is one ORM session per trial: a flush per
parameter, value and attribute, ~30 statements, ~17 ms of Python a trial on a 2-core
machine (benchmarks/tune_loop.py), held under the GIL that the tuner's loop and the
executor's dispatcher share; reading the study back then loaded every trial this tuner
had just written. Here the trials queued together are written in one transaction of
SQLAlchemy Core inserts into Optuna's own tables (its models, so every dialect Optuna
supports), numbered as Optuna numbers them (trials of the study with a smaller id, under
the study row's lock), and ``RDBReader`` reads only trials other writers added.
Other storages (journal files, in memory) keep Optuna's own path.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import optuna
from optuna.distributions import distribution_to_json
from optuna.trial import FrozenTrial, TrialState

__all__ = ["RDBReader", "RDBWriter", "rdb_backend"]

#: attempts of a batch that hit a deadlock or a lock timeout (Optuna retries 5 times too)
RETRIES = 5
#: trials read in one query (SQL's limit on bound parameters)
LOAD_CHUNK = 500


def rdb_backend(storage):
    """The RDBStorage behind a storage (Optuna wraps it in a cache).

    Parameters:
        storage: the Optuna storage.

    Returns:
        The RDBStorage; None for another kind.
    """
    backend = getattr(storage, "_backend", storage)
    return backend if isinstance(backend, optuna.storages.RDBStorage) else None


def _utc(value):
    """Optuna's RDB storage keeps naive UTC datetimes (models.TrialModel)."""
    import datetime

    return None if value is None else value.astimezone(datetime.timezone.utc).replace(tzinfo=None)


class RDBWriter:
    """Adds finished trials to a study of an RDBStorage, a batch per transaction.

    Parameters:
        backend: the RDBStorage.
        study_id: the study's id in it.
    """

    def __init__(self, backend, study_id: int):
        from optuna.storages._rdb import models

        self.engine = backend.engine
        self.study_id = study_id
        self.m = models
        #: trial ids this writer added (``RDBReader`` skips them)
        self.written: set[int] = set()
        self.batches = 0  # transactions (tests count them)

    def add(self, trials: Sequence[FrozenTrial]) -> None:
        for attempt in range(1, RETRIES + 1):
            try:
                self._add(trials)
            except Exception as error:  # noqa: BLE001 - retried like Optuna's own deadlocks
                from sqlalchemy.exc import OperationalError

                if attempt == RETRIES or not isinstance(error, OperationalError):
                    raise
                time.sleep(0.1 * attempt)
                continue
            self.batches += 1
            return

    def _add(self, trials: Sequence[FrozenTrial]) -> None:
        ids: list[int] = []
        try:
            self._insert(trials, ids)
        except BaseException:
            self.written.difference_update(ids)  # rolled back: the ids may be given again
            raise

    def _insert(self, trials: Sequence[FrozenTrial], ids: list[int]) -> None:
        from sqlalchemy import bindparam, func, insert, select, update

        m = self.m
        table = m.TrialModel.__table__
        params: list[dict] = []
        values: list[dict] = []
        user: list[dict] = []
        system: list[dict] = []
        steps: list[dict] = []
        with self.engine.begin() as conn:
            # The study row locked while trials are numbered, as Optuna's add_trial does.
            conn.execute(select(m.StudyModel.__table__.c.study_id)
                         .where(m.StudyModel.__table__.c.study_id == self.study_id)
                         .with_for_update())
            for trial in trials:
                result = conn.execute(insert(table).values(
                    study_id=self.study_id, number=None, state=trial.state,
                    datetime_start=_utc(trial.datetime_start),
                    datetime_complete=_utc(trial.datetime_complete)))
                trial_id = result.inserted_primary_key[0]
                ids.append(trial_id)
                # Known as this writer's before the commit: a pull on the tuner's thread
                # that sees the row sees it as its own.
                self.written.add(trial_id)
                for objective, value in enumerate(trial.values or ()):
                    stored, kind = m.TrialValueModel.value_to_stored_repr(value)
                    values.append({"trial_id": trial_id, "objective": objective,
                                   "value": stored, "value_type": kind})
                for name, value in trial.params.items():
                    distribution = trial.distributions[name]
                    params.append({"trial_id": trial_id, "param_name": name,
                                   "param_value": distribution.to_internal_repr(value),
                                   "distribution_json": distribution_to_json(distribution)})
                user += [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)}
                         for k, v in trial.user_attrs.items()]
                system += [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)}
                           for k, v in trial.system_attrs.items()]
                for step, value in trial.intermediate_values.items():
                    stored, kind = m.TrialIntermediateValueModel.intermediate_value_to_stored_repr(value)
                    steps.append({"trial_id": trial_id, "step": step, "intermediate_value": stored,
                                  "intermediate_value_type": kind})
            # Numbered as Optuna numbers a trial: the study's trials with a smaller id.
            first = conn.execute(select(func.count()).select_from(table).where(
                table.c.study_id == self.study_id, table.c.trial_id < ids[0])).scalar_one()
            conn.execute(update(table).where(table.c.trial_id == bindparam("tid"))
                         .values(number=bindparam("num")),
                         [{"tid": tid, "num": first + i} for i, tid in enumerate(ids)])
            for model, rows in ((m.TrialValueModel, values), (m.TrialParamModel, params),
                                (m.TrialUserAttributeModel, user),
                                (m.TrialSystemAttributeModel, system),
                                (m.TrialIntermediateValueModel, steps)):
                if rows:
                    conn.execute(insert(model.__table__), rows)


class RDBReader:
    """The study's finished trials added since the last read by writers other than
    ``skip`` (an RDBWriter), read as Optuna reads trials; an unfinished trial (a tuner
    of an older mneme) is looked at again until it finishes.

    Parameters:
        backend: the RDBStorage.
        study_id: the study's id in it.
        skip: the writer whose trials are this tuner's own (not read back); None for
            none.
    """

    FINISHED = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)

    def __init__(self, backend, study_id: int, skip: RDBWriter | None):
        from optuna.storages._rdb import models

        self.backend = backend
        self.engine = backend.engine
        self.study_id = study_id
        self.skip = skip
        self.m = models
        self._last = -1  # every trial id up to this one has been looked at
        self._unfinished: set[int] = set()

    def new_trials(self) -> list[FrozenTrial]:
        from sqlalchemy import or_, select

        table = self.m.TrialModel.__table__
        query = select(table.c.trial_id, table.c.state).where(table.c.study_id == self.study_id)
        if self._unfinished:
            query = query.where(or_(table.c.trial_id > self._last,
                                    table.c.trial_id.in_(sorted(self._unfinished))))
        else:
            query = query.where(table.c.trial_id > self._last)
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        own = self.skip.written if self.skip is not None else set()
        wanted = []
        for trial_id, state in rows:
            self._last = max(self._last, trial_id)
            if state not in self.FINISHED:
                self._unfinished.add(trial_id)
                continue
            self._unfinished.discard(trial_id)
            if trial_id not in own:
                wanted.append(trial_id)
        return self._load(wanted)

    def _load(self, ids: list[int]) -> list[FrozenTrial]:
        """The trials ``ids``, read in bulk as Optuna reads a study's trials (its private
        ``_get_trials``; one query per trial where this Optuna lacks it)."""
        out: list[FrozenTrial] = []
        for start in range(0, len(ids), LOAD_CHUNK):
            chunk = set(ids[start:start + LOAD_CHUNK])
            try:
                # (ids in the chunk, or above every id looked at: only trials added since)
                trials = self.backend._get_trials(self.study_id, None, chunk, self._last)
            except (AttributeError, TypeError):
                trials = [self.backend.get_trial(trial_id) for trial_id in sorted(chunk)]
            out += [t for t in trials if t._trial_id in chunk]
        return sorted(out, key=lambda t: t._trial_id)
