"""A new SQLite study storage is a copy of a per-user template (sqlite_template.py): the
copy is a working Optuna storage, it is made only where no file exists, and tuners
opening one new path together all get the same complete file."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import optuna
import pytest
from mneme.tune.study import _sqlite_template as sqlite_template
from mneme.tune.study import copy_template, open_storage, template_path


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test makes its template in a cache of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_a_new_storage_is_a_copy_of_the_template_and_holds_trials(tmp_path):
    path = tmp_path / "new.sqlite3"
    storage = open_storage(f"sqlite:///{path}")
    template = template_path()
    assert template.is_file() and template.parent == tmp_path / "cache" / "mneme"
    assert optuna.__version__ in template.name
    study = optuna.create_study(study_name="s", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    storage.engine.dispose()
    # Opened again by plain Optuna, schema check included: the same trials.
    again = optuna.storages.RDBStorage(f"sqlite:///{path}")
    assert len(optuna.load_study(study_name="s", storage=again).trials) == 3
    assert again._version_manager.get_current_version() == again._version_manager.get_head_version()
    # The template itself stays empty, and is made once.
    made = template.stat().st_mtime_ns
    open_storage(f"sqlite:///{tmp_path / 'second.sqlite3'}").engine.dispose()
    assert template.stat().st_mtime_ns == made
    empty = optuna.storages.RDBStorage(f"sqlite:///{template}")
    assert optuna.study.get_all_study_summaries(empty) == []
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")], "no copy left behind"


def test_an_existing_file_is_never_replaced(tmp_path):
    path = tmp_path / "old.sqlite3"
    storage = open_storage(f"sqlite:///{path}")
    optuna.create_study(study_name="kept", storage=storage).optimize(
        lambda t: t.suggest_int("x", 0, 9), n_trials=2)
    storage.engine.dispose()
    assert copy_template(path) is False
    reopened = open_storage(f"sqlite:///{path}")
    assert len(optuna.load_study(study_name="kept", storage=reopened).trials) == 2


def test_copies_racing_for_one_path_leave_one_whole_file(tmp_path):
    path = tmp_path / "raced.sqlite3"
    copy_template(tmp_path / "warm.sqlite3")  # (the template made first: the race is the copy)
    results: list[bool] = []
    gate = threading.Barrier(8)

    def copy() -> None:
        gate.wait()
        results.append(copy_template(path))

    threads = [threading.Thread(target=copy) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1, results
    assert path.read_bytes() == template_path().read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "raced.sqlite3", "warm.sqlite3"]


#: a tuner's start, cut to the storage: open a new path, make or load the study, add a trial
OPEN_AND_ADD = """
import sys, time
from pathlib import Path
import optuna
from mneme.tune.study import open_storage
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
storage = open_storage(f"sqlite:///{sys.argv[1]}")
study = optuna.create_study(study_name="shared", storage=storage, load_if_exists=True)
study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
"""


def test_processes_opening_one_new_path_together_share_one_study(tmp_path):
    path = tmp_path / "together.sqlite3"
    go = tmp_path / "go"
    copy_template(tmp_path / "warm.sqlite3")  # (the template made: the processes race on the copy)
    processes = [subprocess.Popen([sys.executable, "-c", OPEN_AND_ADD, str(path), str(go)],
                                  stderr=subprocess.PIPE, text=True, env=os.environ.copy())
                 for _ in range(3)]
    go.touch()
    for p in processes:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    storage = open_storage(f"sqlite:///{path}")
    assert len(optuna.load_study(study_name="shared", storage=storage).trials) == 3


def test_without_hard_links_optuna_makes_the_file_itself(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(sqlite_template.os, "link", no_links)
    path = tmp_path / "plain.sqlite3"
    assert copy_template(path) is False and not path.exists()
    storage = open_storage(f"sqlite:///{path}")
    optuna.create_study(study_name="p", storage=storage).optimize(
        lambda t: t.suggest_int("x", 0, 3), n_trials=1)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_an_unwritable_cache_falls_back_to_optuna(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    path = tmp_path / "fallback.sqlite3"
    storage = open_storage(f"sqlite:///{path}")
    optuna.create_study(study_name="f", storage=storage)
    assert path.is_file() and not Path(blocked, "mneme").exists()


def test_a_template_copy_opens_without_alembic_until_a_schema_question_is_asked(tmp_path):
    """Making Optuna's schema-version helper imports alembic (0.2-0.3 s of the command's
    start); a copy of the template needs no schema check, so it is made on first use."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def python(code: str) -> list[str]:
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, timeout=120)
        assert run.returncode == 0, run.stderr
        return run.stdout.split()

    opened = "from mneme.tune.study import open_storage\n" \
             "storage = open_storage('sqlite:///{}')\n"
    python(opened.format(tmp_path / "first.sqlite3"))  # (the template is made here)
    assert python(
        "import sys, optuna\n" + opened.format(tmp_path / "new.sqlite3")
        + "before = any(m.startswith('alembic') for m in sys.modules)\n"
        "study = optuna.create_study(study_name='s', storage=storage)\n"
        "study.optimize(lambda t: t.suggest_float('x', 0, 1), n_trials=2)\n"
        "vm = storage._version_manager\n"
        "print(before, len(study.trials), vm.get_current_version() == vm.get_head_version())\n"
    ) == ["False", "2", "True"]


def test_the_template_is_in_wal_mode_and_a_copy_is_an_ordinary_optuna_storage(tmp_path):
    """The template is made in WAL mode (the mode mneme opens every SQLite storage in), whole:
    nothing beside it; a copy holding trials opens in a process of plain Optuna, schema
    check included, and plain sqlite3 reads it."""
    import sqlite3

    path = tmp_path / "new.sqlite3"
    storage = open_storage(f"sqlite:///{path}")
    template = template_path()
    assert sorted(p.name for p in template.parent.iterdir()) == [template.name]
    connection = sqlite3.connect(template)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        connection.close()
    optuna.create_study(study_name="s", storage=storage).optimize(
        lambda t: t.suggest_int("x", 0, 9), n_trials=3)
    storage.engine.dispose()
    plain = ("import sys, optuna\n"
             "storage = optuna.storages.RDBStorage('sqlite:///' + sys.argv[1])\n"
             "study = optuna.load_study(study_name='s', storage=storage)\n"
             "study.optimize(lambda t: t.suggest_int('x', 0, 9), n_trials=1)\n"
             "vm = storage._version_manager\n"
             "print(len(study.trials), vm.get_current_version() == vm.get_head_version(),\n"
             "      any(m.startswith('mneme') for m in sys.modules))\n")
    run = subprocess.run([sys.executable, "-c", plain, str(path)], capture_output=True,
                         text=True, timeout=120, env={**os.environ})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["4", "True", "False"]
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("SELECT count(*) FROM trials").fetchone() == (4,)
    finally:
        connection.close()


def test_a_template_of_another_optuna_version_or_an_older_mneme_is_not_used(tmp_path):
    """The template is named for the installed Optuna (its schema and alembic stamp are that
    version's) and for its WAL mode: files another version or an older mneme left in the
    cache are never copied."""
    cache = tmp_path / "cache" / "mneme"
    cache.mkdir(parents=True)
    stale = [cache / "optuna-0.0.1-empty-wal.sqlite3", cache / f"optuna-{optuna.__version__}-empty.sqlite3"]
    for path in stale:
        path.write_bytes(b"not this version's database")
    storage = open_storage(f"sqlite:///{tmp_path / 'new.sqlite3'}")
    assert template_path().is_file() and template_path() not in stale
    study = optuna.create_study(study_name="s", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    assert len(study.trials) == 2
    assert all(path.read_bytes() == b"not this version's database" for path in stale)
