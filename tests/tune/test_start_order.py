"""The order of `mneme tune`'s start (issue 37): the workers' fork server starts before the
command imports the replay engine, Optuna, rich or SQLAlchemy, so that its imports run
beside the command's own (tune_command.py, workers/_worker_server.py) (CPU, compile-only)."""

import os
import subprocess
import sys

from tune_support import GOLDEN, SAXPY

#: a real `mneme tune` in this process; the server's start notes what was imported then
RUN = """
import sys
from multiprocessing import forkserver

HEAVY = ("mneme.replay.engine", "optuna", "rich", "sqlalchemy", "numpy", "mneme.tune.space")
seen = []
real = forkserver.ensure_running


def ensure_running():
    seen.append(sorted(m for m in HEAVY if m in sys.modules))
    return real()


forkserver.ensure_running = ensure_running
from mneme.cli.main import cli

try:
    cli.main(args=["tune", "-rdb", sys.argv[1], "-rid", sys.argv[2], "--compile-only",
                   "--trials", "3", "--cpu-workers", "1", "--storage", sys.argv[3]],
             standalone_mode=False)
except SystemExit as exit:
    assert not exit.code, exit.code
print("first start saw", seen[0] if seen else None)
print("engine", "mneme.replay.engine" in sys.modules)
"""


def test_the_worker_server_starts_before_the_commands_heavy_imports(tmp_path):
    run = subprocess.run([sys.executable, "-c", RUN, str(GOLDEN), SAXPY,
                          f"sqlite:///{tmp_path / 's.sqlite3'}"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, env=os.environ.copy())
    assert run.returncode == 0, run.stderr
    said = [line for line in run.stdout.splitlines() if line.startswith(("first ", "engine "))]
    # Started first of all, and the run then went on as before (3 trials, the engine used).
    assert said == ["first start saw []", "engine True"], run.stdout + run.stderr
    assert "3 trials this run" in run.stdout


def test_the_tune_package_and_command_import_neither_the_engine_nor_optuna():
    code = ("import sys, mneme.tune, mneme.tune.tune_command, mneme.tune.workers._worker_server; "
            "print(sorted(m for m in ('mneme.replay.engine', 'optuna', 'rich', 'numpy') "
            "if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=os.environ.copy())
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["[]"], run.stdout


def test_the_tune_package_keeps_its_names_when_its_subpackages_are_imported():
    """``mneme.tune.space`` is both a subpackage and the package's ``space`` decorator: the
    decorator it stays (as when the package imported it eagerly)."""
    import mneme.tune
    import mneme.tune.space.base  # noqa: F401 - (binds the subpackage, as any import of it)
    from mneme.tune import LaunchSpace, Tuner, space

    assert callable(space) and space.__module__ == "mneme.tune.space.base"
    assert mneme.tune.space is space
    assert LaunchSpace.__module__ == "mneme.tune.space.builtin" and Tuner.__name__ == "Tuner"


def test_the_commands_cache_modes_are_the_engines():
    from mneme.replay.engine.timing import CACHE_MODES
    from mneme.tune._option_values import CACHE_MODES as OFFERED

    assert OFFERED == CACHE_MODES
