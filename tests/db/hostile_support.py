"""Shared by the hostile-database tests (test_hostile_databases.py,
test_hostile_commands.py): the real `mneme` command in this process, its one-line
failures, JSON edits, and the two databases they damage (conftest.py's ``golden`` and
``fmt2`` fixtures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner
from db_support import BASE, INFO, STATIC, kernel_record, simple_instance
from mneme.cli.main import cli
from mneme.replay.db import Annotation, Database, DatabaseWriter, InstanceRecord

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "golden.rdb"
SMALL_CHUNK = 1024


def run(*args) -> tuple[int, str, str]:
    """The real `mneme` command in this process; a traceback fails the test."""
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def one_line(*args, needles=()) -> str:
    code, _out, err = run(*args)
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def broken(db: Path, *needles: str) -> str:
    """`mneme check` fails, naming the problem."""
    code, out, err = run("check", db)
    assert code != 0, out
    text = out + err
    assert "Traceback" not in text
    for needle in needles:
        assert needle in text, text
    return text


def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def first_instance(db: Path):
    return next(Database.open(db).instances())


def sparse_instance(seed: int, fmt_changes: float = 0.0) -> InstanceRecord:
    """64 KiB heap region changed in a few bytes (a few delta chunks of 1 KiB) and a
    global rewritten, annotated."""
    record = simple_instance(seed, 1 << 16, changed=0.0001)
    return InstanceRecord(record.grid, record.block, record.args, record.prologue, record.epilogue,
                          annotations={f"r-{BASE:016x}": Annotation("float32", 1e-6, 1e-6)})


def copy_golden(tmp_path: Path) -> Path:
    """A copy of the golden database (format 1) to damage."""
    target = tmp_path / "g.rdb"
    shutil.copytree(GOLDEN, target)
    return target


def format_2_database(tmp_path: Path):
    """A format-2 database: one diff instance (sparse deltas), one bytes instance; returns
    (its path, the diff instance, the bytes instance)."""
    path = tmp_path / "f2.rdb"
    with DatabaseWriter.create(path, INFO, chunk_size=SMALL_CHUNK) as writer:
        writer.add_kernel(kernel_record())
        diff, _ = writer.add_instance(STATIC, sparse_instance(1), epilogue_format="diff")
        whole, _ = writer.add_instance(STATIC, sparse_instance(2), epilogue_format="bytes")
    assert Database.open(path).info.format_version == 2
    assert "ok" in run("check", path)[1]
    db = Database.open(path)
    return path, db.kernel(STATIC).instance(diff), db.kernel(STATIC).instance(whole)
