"""Optuna storage, studies and samplers, with one-line errors for what users get wrong.

Storage: an SQLite file by default; ``--storage`` takes any Optuna RDB URL
(``postgresql://``, ``mysql://``, ``sqlite:///``) or a journal file (``journal:PATH`` or a
path ending in ``.log``/``.journal``), which several processes on one machine, or on
machines sharing a file system, use together. A new SQLite file is a copy of an empty,
initialised database kept per user (sqlite_template.py): Optuna's own creation of its
tables costs 0.15 s and more.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import optuna

from ..errors import StudyError, TuneError
from ..space import BoundSpace
from ._sqlite_template import copy_template
from ._study_lock import study_lock
from ._study_writes import RDBReader, RDBWriter, rdb_backend

DEFAULT_STORAGE_FILE = "mneme-tune.sqlite3"
SAMPLERS = ("tpe", "random", "grid", "cmaes", "nsga2")
#: user attribute holding what the study was made for (space, objectives)
STUDY_ATTR = "mneme.study"
#: tenths of a second to wait for a study's creator to write STUDY_ATTR
CREATOR_WAIT_STEPS = 30
#: study attribute prefix: trials a tuner of the study has in flight (``.<owner>`` each)
RUNNING_ATTR = "mneme.running"
#: seconds after which a tuner rewrites an unchanged in-flight count, and after which
#: another machine's tuner's count is taken as left behind by a tuner that died (on this
#: machine a dead tuner's process is gone at once)
RUNNING_REFRESH_SECONDS = 10.0
RUNNING_STALE_SECONDS = 60.0

optuna.logging.set_verbosity(logging.ERROR)  # mneme reports what matters itself


def tuner_owner() -> str:
    """This tuner process, as trials and study attributes name it.

    Returns:
        ``host:pid``.
    """
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_alive(owner: str) -> bool:
    """Whether the tuner a study names may still run.

    Parameters:
        owner: ``host:pid``.

    Returns:
        False only for a tuner of this machine whose process is gone.
    """
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname():
        return True  # another machine's tuner: not ours to judge
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        return True
    return True


def _shown(url: str) -> str:
    """The URL as messages show it: without a password."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a database URL: nothing secret to hide
        return url


def _sqlite_wal(engine) -> None:
    """SQLite in WAL mode with synchronous=NORMAL: a commit no longer waits for fsync
    (about 1.6x the trials/s), and the file still survives a killed tuner, which is what
    resuming needs; several processes on one machine keep working (WAL allows them)."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    engine.dispose()  # connections opened before the listener get the pragmas too


#: what losing the race to create Optuna's tables says: PostgreSQL, SQLite, MySQL
_TABLE_CREATION_RACES = ("already exists", "UniqueViolation", "UNIQUE constraint failed",
                         "Duplicate entry")


def _rdb_storage(url: str, engine_kwargs: dict[str, Any], skip_compatibility_check: bool = False):
    """RDBStorage, retried: processes starting together on an empty database race to
    create Optuna's tables, and all but one fail once. ``skip_compatibility_check``: the
    file is a copy of this Optuna's own template (its schema check reads every alembic
    migration script, ~30 ms)."""
    for attempt in range(5):
        try:
            if skip_compatibility_check:  # (a template copy: its tables and stamp are there)
                with _version_manager_deferred():
                    storage = optuna.storages.RDBStorage(
                        url, engine_kwargs=engine_kwargs, skip_compatibility_check=True,
                        skip_table_creation=True)
            else:
                storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
            if url.startswith("sqlite"):
                _sqlite_wal(storage.engine)
            return storage
        except Exception as error:  # noqa: BLE001
            if attempt == 4 or not any(race in str(error) for race in _TABLE_CREATION_RACES):
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


class _DeferredVersionManager:
    """Optuna's schema-version helper of an RDBStorage, made on first use: making it
    imports alembic (0.2-0.3 s of the command's start) and only schema checks and
    upgrades use it, which a copy of this Optuna's own template needs neither of."""

    def __init__(self, make, *args):
        self._make, self._args, self._made = make, args, None

    def __getattr__(self, name: str):
        if self._made is None:
            self._made = self._make(*self._args)
        return getattr(self._made, name)


@contextlib.contextmanager
def _version_manager_deferred():
    """While RDBStorages are made on this thread, their version helper is deferred (an
    Optuna without the private name makes it at once, as before)."""
    try:
        from optuna.storages._rdb import storage as module
    except ImportError:
        module = None
    original = getattr(module, "_VersionManager", None)
    if original is None:
        yield
        return
    module._VersionManager = lambda *args: _DeferredVersionManager(original, *args)
    try:
        yield
    finally:
        module._VersionManager = original


def _sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None: an in-memory database)."""
    path = url.removeprefix("sqlite:///").partition("?")[0]
    return None if path in ("", ":memory:") else Path(path).expanduser()


def open_storage(url: str | None, default_dir: Path | None = None):
    """Open an Optuna storage (a new SQLite file is a copy of the template).

    Parameters:
        url: ``sqlite:///PATH``, ``postgresql://...``, ``mysql://...``, or a journal
            file (``journal:PATH`` or ``*.log``); None for the default SQLite file.
        default_dir: the default file's folder; None for the current one.

    Returns:
        The storage.

    Raises:
        StudyError: a URL of no kind, a folder that does not exist, a database driver
            that is not installed, or a storage that cannot be opened (one line).
    """
    if url is None:
        url = f"sqlite:///{(default_dir or Path.cwd()) / DEFAULT_STORAGE_FILE}"
    try:
        if url.startswith("journal:") or url.endswith((".log", ".journal")):
            from optuna.storages.journal import JournalFileBackend, JournalStorage

            path = Path(url.removeprefix("journal:")).expanduser()
            if not path.parent.is_dir():
                raise StudyError(f"journal storage {path}: folder {path.parent} does not exist")
            return JournalStorage(JournalFileBackend(str(path)))
        if "://" not in url:
            raise StudyError(
                f"storage {url!r} is neither a database URL (sqlite:///, postgresql://, "
                "mysql://) nor a journal file (journal:PATH or *.log)"
            )
        if url.startswith("sqlite:///"):
            file = _sqlite_file(url)
            if file is not None and not file.parent.is_dir():
                raise StudyError(f"storage {url}: folder {file.parent} does not exist")
            # A new file: a copy of an initialised one (fast), whose schema is this Optuna's.
            copied = file is not None and copy_template(file)
        else:
            copied = False
        # A short connect timeout: an unreachable server must not hang the command.
        engine_kwargs: dict[str, Any] = {}
        if url.startswith(("postgresql", "mysql")):
            engine_kwargs["connect_args"] = {"connect_timeout": 10}
        return _rdb_storage(url, engine_kwargs, skip_compatibility_check=copied)
    except StudyError:
        raise
    except ImportError as error:
        raise StudyError(
            f"storage {_shown(url)}: its database driver is not installed ({error}); "
            "pip install psycopg (PostgreSQL) or pymysql (MySQL, with mysql+pymysql://)"
        ) from None
    except Exception as error:  # noqa: BLE001 - SQLAlchemy/driver errors become one line
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise StudyError(f"cannot open storage {_shown(url)}: {message}") from None


def make_sampler(name: str, objectives: int, seed: int | None):
    """The Optuna sampler of a name (``grid``: random, the tuner enqueues every point).

    Parameters:
        name: tpe, random, grid, cmaes or nsga2.
        objectives: how many objectives the study has.
        seed: the sampler's seed.

    Returns:
        The sampler.

    Raises:
        TuneError: an unknown name, or cmaes for several objectives.
    """
    if name not in SAMPLERS:
        raise TuneError(f"unknown sampler {name!r}; use one of {', '.join(SAMPLERS)}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            # No ``group``: a mneme space suggests every parameter in every trial, so its
            # decomposition is one group (the same proposals) rebuilt from every trial at
            # each ask: ~3 ms an ask at 300 trials (benchmarks/tune_loop.py).
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "grid":
            # Exhaustive: the tuner enqueues every feasible point once; Optuna's GridSampler
            # would walk infeasible combinations too and stop the study from inside optimize().
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "cmaes":
            if objectives > 1:
                raise TuneError("the cmaes sampler optimizes one objective; use nsga2 or tpe")
            return optuna.samplers.CmaEsSampler(
                seed=seed, warn_independent_sampling=False,
                independent_sampler=optuna.samplers.TPESampler(seed=seed),
            )
        return optuna.samplers.NSGAIISampler(seed=seed)


def default_sampler(objectives: int) -> str:
    """The sampler used when none is named.

    Parameters:
        objectives: how many objectives the study has.

    Returns:
        nsga2 for several, tpe for one.
    """
    return "nsga2" if objectives > 1 else "tpe"


def study_identity(space: BoundSpace, objectives: list[str]) -> dict[str, Any]:
    """What a study is made for: it must keep its space and objectives.

    Parameters:
        space: the bound space.
        objectives: the objectives.

    Returns:
        The space's names, signature and parameters, and the objectives.
    """
    return {"space": space.names, "signature": space.signature(), "objectives": objectives,
            "parameters": space.describe()}


def open_study(storage, name: str, space: BoundSpace, objectives: list[str], sampler,
               instances: list[str]) -> optuna.Study:
    """Create the study, or load it when it exists for the same space and objectives.

    Parameters:
        storage: the Optuna storage.
        name: the study's name.
        space: the bound space.
        objectives: the objectives (all minimized).
        sampler: the sampler.
        instances: the instances' ids.

    Returns:
        The study.

    Raises:
        StudyError: the storage cannot be read, or holds a study of that name not made
            by mneme tune or made for another space, objectives or instances.
    """
    identity = {**study_identity(space, objectives), "instances": instances}
    try:
        existing = {s.study_name for s in optuna.study.get_all_study_summaries(storage)}
    except Exception as error:  # noqa: BLE001
        raise StudyError(f"cannot read studies from the storage: {error}") from None
    if name in existing:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        held = study.user_attrs.get(STUDY_ATTR)
        # A tuner starting at the same time may have created it and not yet said what for.
        for _ in range(CREATOR_WAIT_STEPS):
            if held is not None:
                break
            time.sleep(0.1)
            held = study.user_attrs.get(STUDY_ATTR)
        if held is None:
            raise StudyError(f"study {name!r} exists but was not made by mneme tune; choose "
                             "another --study name")
        for key, what in (("signature", "search space"), ("objectives", "objective list"),
                          ("instances", "instance list")):
            if held.get(key) != identity[key]:
                mine = identity["space"] if key == "signature" else identity[key]
                theirs = held.get("space") if key == "signature" else held.get(key)
                if key == "signature" and mine == theirs:
                    theirs, mine = "its parameters or constraints", "these"
                raise StudyError(
                    f"study {name!r} exists with another {what} ({theirs}, not {mine}); "
                    "choose another --study name or the same settings"
                )
        return study
    directions: list[Literal["minimize", "maximize"]] = ["minimize"] * len(objectives)
    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                directions=directions, load_if_exists=True)
    study.set_user_attr(STUDY_ATTR, identity)
    return study


_COUNT = object()  # a writer queue item: write this tuner's in-flight count
#: trials written in one transaction at most (those waiting in the writer's queue)
WRITE_BATCH = 64


class MirroredStudy(optuna.Study):
    """The tuner's study, held in memory and written to its storage behind the search.

    Asking, suggesting and telling against an Optuna storage costs a write per parameter
    and per attribute (about 13 ms a trial with a journal file, 30 SQL statements with
    SQLite): the tuner's loop then caps the rate near 70 trials/s whatever the GPUs and
    the compile pool do. Here the sampler works on an in-memory copy; every finished trial
    is written to the storage as one ``add_trial`` by a background thread, and trials
    that other tuners of the same study finished there are pulled in (``pull``), so
    samplers learn from them and the shared budget holds. What the storage no longer
    holds: trials while they run (a tuner that dies loses only its trials in flight,
    which were never counted). Instead each tuner writes how many trials it holds as one
    study attribute, so the others count them against the budget: it takes them with
    ``claim``, one atomic step among the study's tuners (study_lock.py), and lowers the
    count with ``announce`` as they finish and are written. Study attributes are written
    through at once.

    Parameters:
        persistent: the study in its storage.
        sampler: the sampler, which works on the copy in memory.
        owner: this tuner (``tuner_owner()``).
    """

    #: trial attribute naming the tuner that wrote a trial behind (its own are not pulled back)
    WRITER_ATTR = "mneme.writer"

    def __init__(self, persistent: optuna.Study, sampler, owner: str):
        storage = optuna.storages.InMemoryStorage()
        study_id = storage.create_new_study(persistent.directions, persistent.study_name)
        for key, value in persistent.user_attrs.items():
            storage.set_study_user_attr(study_id, key, value)
        super().__init__(study_name=persistent.study_name, storage=storage, sampler=sampler)
        self.persistent = persistent
        self._owner = owner
        # Which trials are this study object's own: a tuner run again in the same process
        # (a resume through the Python API) must pull what the earlier run wrote.
        self._writer_id = f"{owner}#{id(self):x}"
        self._seen: set[int] = set()
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
        self._study_lock = study_lock(persistent._storage, persistent.study_name)
        # An RDB storage: trials written in batches, and read back without this tuner's own
        # (study_writes.py); other storages through Optuna.
        backend = rdb_backend(persistent._storage)
        self._rdb_writer = RDBWriter(backend, persistent._study_id) if backend else None
        self._reader = RDBReader(backend, persistent._study_id, self._rdb_writer) if backend else None
        self.others_running = 0  # trials other tuners have in flight, as last pulled
        self.others_active = 0  # tuners among them with any
        self.pull()
        self._writer = threading.Thread(target=self._write_behind, name="mneme-study-writer", daemon=True)
        self._writer.start()

    @property
    def pull_interval(self) -> float:
        """Seconds between pulls that keep their cost near 5 % of the tuner's time (at
        least 10 ms): a shared study's budget is only as exact as its tuners' counts."""
        return max(0.01, 20 * self._pull_seconds)

    def pull(self) -> int:
        """Add the trials finished in the storage by other tuners since the last pull, and
        read how many the others have in flight (``others_running``, ``others_active``)."""
        start = time.perf_counter()
        # Counts first, trials second: a tuner's count holds its finished trials until they
        # are written, so a trial written between the two reads is counted twice, never
        # missed.
        self.others_running, self.others_active = self._read_others_running()
        added = 0
        finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL,
                    optuna.trial.TrialState.PRUNED)
        trials = (self._reader.new_trials() if self._reader is not None
                  else self.persistent.get_trials(deepcopy=False, states=finished))
        for trial in trials:
            if trial._trial_id in self._seen:
                continue
            self._seen.add(trial._trial_id)
            if trial.user_attrs.get(self.WRITER_ATTR) == self._writer_id:
                continue  # this tuner's own, written behind
            super().add_trial(trial)
            added += 1
        self._pull_seconds = time.perf_counter() - start
        return added

    def _read_others_running(self) -> tuple[int, int]:
        """(trials the other tuners have in flight, tuners with any)."""
        now = time.time()
        trials = tuners = 0
        for key, value in self.persistent.user_attrs.items():
            if (key.startswith(RUNNING_ATTR + ".") and key != self._running_key
                    and isinstance(value, dict) and now - value.get("at", 0) < RUNNING_STALE_SECONDS
                    and owner_alive(key.removeprefix(RUNNING_ATTR + "."))):
                trials += int(value.get("trials", 0))
                tuners += value.get("trials", 0) > 0
        return trials, tuners

    @property
    def _running_key(self) -> str:
        return f"{RUNNING_ATTR}.{self._owner}"

    def claim(self, want: int, budget: int, finished: Callable[[], int], held: int) -> int:
        """Take up to ``want`` more trials of a budget of ``budget`` shared by the study's
        tuners, and return how many were taken. ``held``: the trials this tuner holds
        already (in flight, or taken and not yet launched); ``finished()``: the finished
        trials that count, as this study holds them after a pull. Atomic among the tuners:
        the counts are read and this tuner's new count written under the study's lock."""
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
        every RUNNING_REFRESH_SECONDS. ``now``: written at once (a tuner that stops)."""
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
            self.persistent.set_user_attr(self._running_key, {"trials": count, "at": time.time()})
            self._published = (count, time.time())

    def tell(self, trial, values=None, state=None, skip_if_finished=False):
        frozen = super().tell(trial, values, state, skip_if_finished)
        if self._writer.is_alive():
            with self._lock:
                self._unwritten += 1
            self._pending.put(frozen)
        else:  # closed (a tuner run again): written at once
            self._store([frozen])
        return frozen

    def set_user_attr(self, key: str, value) -> None:
        super().set_user_attr(key, value)
        self.persistent.set_user_attr(key, value)

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
        for item in items:
            item.set_user_attr(self.WRITER_ATTR, self._writer_id)
        if self._rdb_writer is not None:
            self._rdb_writer.add(items)
        else:
            for item in items:
                self.persistent.add_trial(item)

    def flush(self) -> None:
        """Wait until every finished trial is in the storage."""
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
