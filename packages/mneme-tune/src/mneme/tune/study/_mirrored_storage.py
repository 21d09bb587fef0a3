"""The tuner's study storage: an Optuna storage that keeps the study in memory and writes it
to the study's storage behind the search (as Optuna's own cache wraps an RDB storage), so
that the tuner works on a plain ``optuna.Study``.

Asking, suggesting and telling against an Optuna storage costs a write per parameter and
per attribute (about 13 ms a trial with a journal file, 30 SQL statements with SQLite):
the tuner's loop then caps the rate near 70 trials/s whatever the GPUs and the compile
pool do. Here the sampler works on an in-memory copy; every finished trial is written to
the storage as one ``add_trial`` by a background thread (a batch per transaction with an
RDB storage, _study_writes.py), and trials that other tuners of the same study finished
there are pulled in (``pull``), so samplers learn from them and the shared budget holds.
What the storage no longer holds: trials while they run (a tuner that dies loses only its
trials in flight, which were never counted). Instead each tuner writes how many trials it
holds as one study attribute, so the others count them against the budget: it takes them
with ``claim``, one atomic step among the study's tuners (_study_lock.py), and lowers the
count with ``announce`` as they finish and are written. Study attributes are written
through at once.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Callable, Container, Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage, InMemoryStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from ..errors import StudyError
from ._study import RUNNING_ATTR, RUNNING_REFRESH_SECONDS, RUNNING_STALE_SECONDS, owner_alive
from ._study_lock import study_lock
from ._study_writes import RDBReader, RDBWriter, rdb_backend

__all__ = ["WRITE_BATCH", "MirroredStorage"]

_COUNT = object()  # a writer queue item: write this tuner's in-flight count
#: trials written in one transaction at most (those waiting in the writer's queue)
WRITE_BATCH = 64
_FINISHED = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)


class MirroredStorage(BaseStorage):
    """One study of a storage, held in memory and written to that storage behind the
    search: open ``optuna.Study(study_name, storage=this, sampler=...)`` on it.

    The study's trials are asked, suggested and told in memory; each trial that finishes
    is queued for a background thread, which writes it to the storage as one
    ``add_trial`` (an RDB storage: the trials waiting together in one transaction).
    ``pull`` adds the trials other tuners of the study finished in the storage, and reads
    how many trials they hold (``others_running``, ``others_active``); ``claim`` takes
    trials of a budget the tuners share, ``announce`` says how many this tuner holds;
    ``flush`` waits for the writes, ``close`` stops the thread. Study attributes are
    written to the storage at once (and read from the copy made when opened).

    Parameters:
        storage: the storage that holds the study (``open_storage``).
        study_name: the study, which must exist there.
        owner: this tuner (``tuner_owner()``).

    Raises:
        KeyError: the storage holds no study of that name (Optuna's error).
    """

    #: trial attribute naming the tuner that wrote a trial behind (its own are not pulled back)
    WRITER_ATTR = "mneme.writer"

    def __init__(self, storage: BaseStorage, study_name: str, owner: str):
        #: the storage behind, and the study's id in it
        self.backing = storage
        self.backing_study_id = storage.get_study_id_from_name(study_name)
        self.study_name = study_name
        self._front = InMemoryStorage()
        self._study_id = self._front.create_new_study(
            storage.get_study_directions(self.backing_study_id), study_name)
        for key, value in storage.get_study_user_attrs(self.backing_study_id).items():
            self._front.set_study_user_attr(self._study_id, key, value)
        self._owner = owner
        # Which trials are this storage's own: a tuner run again in the same process (a
        # resume through the Python API) must pull what the earlier run wrote.
        self._writer_id = f"{owner}#{id(self):x}"
        self._seen: set[int] = set()  # numbers of the trials in the storage looked at
        self._pull_seconds = 0.0
        self._pending: queue.Queue = queue.Queue()
        self._error: str | None = None
        # What this tuner says it holds that the others cannot see finished: its trials in
        # flight plus those told but not yet written (so the order of writes never matters).
        self._lock = threading.Lock()
        self._in_flight = 0
        self._unwritten = 0
        self._published: tuple[int, float] = (0, 0.0)  # (count, when written)
        self._count_queued = False  # at most one count write waits in the queue
        # Count writes in the order their counts were taken (the writer thread's and a
        # claim's): a count written late never undoes a claim published after it.
        self._count_write = threading.Lock()
        self._study_lock = study_lock(storage, study_name)
        # An RDB storage: trials written in batches, and read back without this tuner's own
        # (_study_writes.py); other storages through Optuna's storage interface.
        backend = rdb_backend(storage)
        self._rdb_writer = RDBWriter(backend, self.backing_study_id) if backend else None
        self._reader = (RDBReader(backend, self.backing_study_id, self._rdb_writer)
                        if backend else None)
        self.others_running = 0  # trials other tuners have in flight, as last pulled
        self.others_active = 0  # tuners among them with any
        self.pull()
        self._writer = threading.Thread(target=self._write_behind, name="mneme-study-writer",
                                        daemon=True)
        self._writer.start()

    # -- the study's sharing: pulls, counts, claims -------------------------------------

    @property
    def pull_interval(self) -> float:
        """Seconds between pulls that keep their cost near 5 % of the tuner's time (at
        least 10 ms): a shared study's budget is only as exact as its tuners' counts."""
        return max(0.01, 20 * self._pull_seconds)

    def pull(self) -> int:
        """Add the trials finished in the storage by other tuners since the last pull, and
        read how many the others have in flight (``others_running``, ``others_active``).

        Returns:
            How many trials were added.
        """
        start = time.perf_counter()
        # Counts first, trials second: a tuner's count holds its finished trials until they
        # are written, so a trial written between the two reads is counted twice, never
        # missed.
        self.others_running, self.others_active = self._read_others_running()
        added = 0
        trials = (self._reader.new_trials() if self._reader is not None
                  else self.backing.get_all_trials(self.backing_study_id, deepcopy=False,
                                                   states=_FINISHED))
        for trial in trials:
            if trial.number in self._seen:
                continue
            self._seen.add(trial.number)
            if trial.user_attrs.get(self.WRITER_ATTR) == self._writer_id:
                continue  # this tuner's own, written behind
            self._front.create_new_trial(self._study_id, template_trial=trial)
            added += 1
        self._pull_seconds = time.perf_counter() - start
        return added

    def _read_others_running(self) -> tuple[int, int]:
        """(trials the other tuners have in flight, tuners with any)."""
        now = time.time()
        trials = tuners = 0
        for key, value in self.backing.get_study_user_attrs(self.backing_study_id).items():
            if (key.startswith(RUNNING_ATTR + ".") and key != self._running_key
                    and isinstance(value, dict) and now - value.get("at", 0) < RUNNING_STALE_SECONDS
                    and owner_alive(key.removeprefix(RUNNING_ATTR + ".").split("#")[0])):
                trials += int(value.get("trials", 0))
                tuners += value.get("trials", 0) > 0
        return trials, tuners

    @property
    def _running_key(self) -> str:
        # Per tuner, not per process: the lanes of `mneme tune --app` run several tuners of
        # one study in one process (a lane joining a kernel's round), and each must count
        # the others' trials (keyed by the process alone, each took the other's for its own
        # and the two overran the budget: 140 trials of a round of 120 on two H200s).
        return f"{RUNNING_ATTR}.{self._writer_id}"

    def claim(self, want: int, budget: int, finished: Callable[[], int], held: int) -> int:
        """Take up to ``want`` more trials of a budget shared by the study's tuners. Atomic
        among the tuners: the counts are read and this tuner's new count written under
        the study's lock.

        Parameters:
            want: how many trials this tuner would take.
            budget: the study's budget, shared by its tuners.
            finished: the finished trials that count, as the study holds them after a pull.
            held: the trials this tuner holds already (in flight, or taken and not yet
                launched).

        Returns:
            How many were taken.

        Raises:
            StudyError: the storage failed (one line).
        """
        try:
            with self._study_lock:
                self.pull()
                left = budget - finished() - self.others_running - held
                taken = max(0, min(want, left))
                self._in_flight = held + taken
                self._write_count()
        except Exception as error:  # noqa: BLE001 - a storage failure is one line
            first = (str(error).strip().splitlines() or [""])[0]
            raise StudyError(f"claiming trials in the study's storage failed: "
                             f"{type(error).__name__}: {first}") from None
        return taken

    def announce(self, running: int, now: bool = False) -> None:
        """Say how many trials this tuner holds (in flight, or taken and not yet launched);
        never more than it claimed. Written behind, coalesced: one count write waits in the
        queue at most, and writes the count of its moment; an unchanged count is rewritten
        every RUNNING_REFRESH_SECONDS.

        Parameters:
            running: the trials this tuner holds.
            now: written at once (a tuner that stops).

        Raises:
            StudyError: written at once, and the storage failed (one line).
        """
        self._in_flight = running
        if now or not self._writer.is_alive():
            self.flush()
            try:
                self._write_count()
            except Exception as error:  # noqa: BLE001 - a storage failure is one line
                raise StudyError(f"writing to the study's storage failed: {type(error).__name__}: "
                                 f"{error}") from None
            return
        with self._lock:
            count, written = self._published
            if self._count_queued or (running + self._unwritten == count
                                      and time.time() - written < RUNNING_REFRESH_SECONDS):
                return
            self._count_queued = True
        self._pending.put(_COUNT)

    def _write_count(self) -> None:
        with self._count_write:
            with self._lock:
                self._count_queued = False
                count = self._in_flight + self._unwritten
            self.backing.set_study_user_attr(self.backing_study_id, self._running_key,
                                             {"trials": count, "at": time.time()})
            self._published = (count, time.time())

    # -- writes behind --------------------------------------------------------------------

    def _finished(self, trial: FrozenTrial) -> None:
        """A trial of this tuner finished: queued for the writer (written at once when the
        writer has stopped: a tuner run again)."""
        if self._writer.is_alive():
            with self._lock:
                self._unwritten += 1
            self._pending.put(trial)
        else:
            self._store([trial])

    def _write_behind(self) -> None:
        while True:
            # Whatever waits in the queue is written together: one transaction for the
            # trials (an RDB storage), each count in its place after those before it.
            items = [self._pending.get()]
            while items[-1] is not None and len(items) < WRITE_BATCH:
                try:
                    items.append(self._pending.get_nowait())
                except queue.Empty:
                    break
            trials: list = []
            for item in items:
                if item is _COUNT or item is None:
                    self._store_all(trials)
                    trials = []
                    if item is _COUNT:
                        self._store_all([item])
                else:
                    trials.append(item)
            self._store_all(trials)
            for _ in items:
                self._pending.task_done()
            if items[-1] is None:
                return

    def _store_all(self, items: list) -> None:
        """Write ``items`` (trials, or one count); a failure is kept for flush()."""
        if not items or self._error is not None:
            return
        try:
            self._store(items)
            trials = sum(1 for item in items if item is not _COUNT)
            if trials:
                with self._lock:
                    self._unwritten -= trials  # told, queued, now in the storage
        except Exception as error:  # noqa: BLE001 - reported by flush(), on the tuner's thread
            self._error = f"{type(error).__name__}: {error}"

    def _store(self, items: list) -> None:
        if items[0] is _COUNT:
            self._write_count()
            return
        # (a finished trial in memory is never changed again: a copy names its writer)
        stamped = []
        for item in items:
            trial = copy.copy(item)
            trial.user_attrs = {**item.user_attrs, self.WRITER_ATTR: self._writer_id}
            stamped.append(trial)
        if self._rdb_writer is not None:
            self._rdb_writer.add(stamped)
        else:
            for trial in stamped:
                self.backing.create_new_trial(self.backing_study_id, template_trial=trial)

    def flush(self) -> None:
        """Wait until every finished trial is in the storage.

        Raises:
            StudyError: a write failed (one line).
        """
        self._pending.join()
        if self._error is not None:
            raise StudyError(f"writing trials to the study's storage failed: {self._error}")

    def close(self) -> None:
        """Flush and stop the writer thread (later trials are written as they finish)."""
        if self._writer.is_alive():
            self._pending.put(None)
            self._writer.join()
        if self._published[0] and self._error is None:
            self.announce(0, now=True)  # the others stop counting this tuner's trials
        self._study_lock.close()

    # -- Optuna's storage interface: the study in memory ---------------------------------

    def create_new_study(self, directions: Sequence[StudyDirection],
                         study_name: str | None = None) -> int:
        raise NotImplementedError(f"a MirroredStorage holds study {self.study_name!r} alone; "
                                  "create studies in its storage")

    def delete_study(self, study_id: int) -> None:
        raise NotImplementedError(f"a MirroredStorage holds study {self.study_name!r} alone; "
                                  "delete studies in its storage")

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self._front.set_study_user_attr(study_id, key, value)
        self.backing.set_study_user_attr(self.backing_study_id, key, value)

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        self._front.set_study_system_attr(study_id, key, value)
        self.backing.set_study_system_attr(self.backing_study_id, key, value)

    def get_study_id_from_name(self, study_name: str) -> int:
        return self._front.get_study_id_from_name(study_name)

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._front.get_study_name_from_id(study_id)

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return self._front.get_study_directions(study_id)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._front.get_study_user_attrs(study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._front.get_study_system_attrs(study_id)

    def get_all_studies(self) -> list:  # (of FrozenStudy, not public in optuna.study)
        return self._front.get_all_studies()

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        trial_id = self._front.create_new_trial(study_id, template_trial)
        if template_trial is not None and template_trial.state.is_finished():
            self._finished(self._front.get_trial(trial_id))  # (Study.add_trial)
        return trial_id

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                        distribution: BaseDistribution) -> None:
        self._front.set_trial_param(trial_id, param_name, param_value_internal, distribution)

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        return self._front.get_trial_id_from_study_id_trial_number(study_id, trial_number)

    def get_trial_number_from_id(self, trial_id: int) -> int:
        return self._front.get_trial_number_from_id(trial_id)

    def get_trial_param(self, trial_id: int, param_name: str) -> float:
        return self._front.get_trial_param(trial_id, param_name)

    def get_best_trial(self, study_id: int) -> FrozenTrial:
        return self._front.get_best_trial(study_id)

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        changed = self._front.set_trial_state_values(trial_id, state, values)
        if changed and state.is_finished():
            self._finished(self._front.get_trial(trial_id))
        return changed

    def set_trial_intermediate_value(self, trial_id: int, step: int,
                                     intermediate_value: float) -> None:
        self._front.set_trial_intermediate_value(trial_id, step, intermediate_value)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._front.set_trial_user_attr(trial_id, key, value)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._front.set_trial_system_attr(trial_id, key, value)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self._front.get_trial(trial_id)

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._front.get_all_trials(study_id, deepcopy, states)
