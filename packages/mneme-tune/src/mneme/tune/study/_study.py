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
import socket
import time
import warnings
from pathlib import Path
from typing import Any, Literal

import optuna
from mneme.runtime.processes import pid_alive

from .._option_values import SAMPLERS
from ..errors import StudyError, TuneError
from ..space import BoundSpace
from ._sqlite_template import copy_template

#: the default storage, in the current folder: an Optuna journal file. It opens in
#: milliseconds; SQLite first imports SQLAlchemy and Optuna's table models (0.3-0.6 s, over
#: 1 s on a busy host), which was most of what `mneme tune` waited for before its search.
DEFAULT_STORAGE_FILE = "mneme-tune.journal"
#: the default storage before it: a folder that holds one (and no journal) keeps using it,
#: so its studies resume
SQLITE_DEFAULT_STORAGE_FILE = "mneme-tune.sqlite3"
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
        return pid_alive(int(pid))
    except ValueError:  # (not a process id: not a tuner of this machine's)
        return False


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


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None: an in-memory database)."""
    path = url.removeprefix("sqlite:///").partition("?")[0]
    return None if path in ("", ":memory:") else Path(path).expanduser()


def journal_file(url: str) -> Path | None:
    """The file of a journal storage URL (``journal:PATH``, or a path ending in ``.log`` or
    ``.journal``); None for any other URL."""
    if url.startswith("journal:") or url.endswith((".log", ".journal")):
        return Path(url.removeprefix("journal:")).expanduser()
    return None


def default_storage_url(default_dir: Path | None = None) -> str:
    """The storage of a tuning given no ``--storage``.

    Parameters:
        default_dir: the folder of the default file; None for the current one.

    Returns:
        ``journal:`` the journal file in that folder, or ``sqlite:///`` the SQLite file of
        earlier versions where the folder holds only that (its studies resume).
    """
    folder = default_dir or Path.cwd()
    sqlite = folder / SQLITE_DEFAULT_STORAGE_FILE
    if sqlite.exists() and not (folder / DEFAULT_STORAGE_FILE).exists():
        return f"sqlite:///{sqlite}"
    return f"journal:{folder / DEFAULT_STORAGE_FILE}"


def open_storage(url: str | None, default_dir: Path | None = None):
    """Open an Optuna storage (a new SQLite file is a copy of the template).

    Parameters:
        url: ``sqlite:///PATH``, ``postgresql://...``, ``mysql://...``, or a journal
            file (journal_file); None for the default
            (default_storage_url).
        default_dir: the default file's folder; None for the current one.

    Returns:
        The storage.

    Raises:
        StudyError: a URL of no kind, a folder that does not exist, a database driver
            that is not installed, or a storage that cannot be opened (one line).
    """
    if url is None:
        url = default_storage_url(default_dir)
    try:
        if (path := journal_file(url)) is not None:
            from optuna.storages.journal import JournalFileBackend, JournalStorage

            if not path.parent.is_dir():
                raise StudyError(f"journal storage {path}: folder {path.parent} does not exist")
            return JournalStorage(JournalFileBackend(str(path)))
        if "://" not in url:
            raise StudyError(
                f"storage {url!r} is neither a database URL (sqlite:///, postgresql://, "
                "mysql://) nor a journal file (journal:PATH, *.log or *.journal)"
            )
        if url.startswith("sqlite:///"):
            file = sqlite_file(url)
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
