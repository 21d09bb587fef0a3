"""ls, show, check, clean, copy and move through the real `mneme` entry point."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner
from mneme.cli.main import cli
from mneme.replay.db import Database

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden.rdb"


def run(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    return result.output


def test_ls_lists_every_instance_with_sizes():
    out = run("ls", str(GOLDEN))
    db = Database.open(GOLDEN)
    for inst in db.instances():
        assert inst.id in out
    assert "saxpy(float, float const*, float*, int)" in out and "ratio" in out
    rows = json.loads(run("ls", str(GOLDEN), "--json"))
    assert len(rows) == 3 and all(r["stored_bytes"] > 0 for r in rows)


def test_show_kernel_and_instance():
    kernel = json.loads(run("show", str(GOLDEN), "saxpy", "--json"))
    assert kernel["name"] == "_Z5saxpyfPKfPfi" and len(kernel["instances"]) == 2
    inst_id = f"{kernel['static_hash']}/{kernel['instances'][0]}"
    inst = json.loads(run("show", str(GOLDEN), inst_id, "--json"))
    assert inst["id"] == inst_id
    changed = {c["name"]: c["changed_bytes"] for c in inst["changes"]}
    x, y = sorted(changed)
    assert changed[x] == 0 and changed[y] > 0  # saxpy writes y only
    assert "regions" in run("show", str(GOLDEN), inst_id)


def test_check_ok():
    assert "every chunk verified" in run("check", str(GOLDEN))


def test_copy_move_clean_keep_databases_consistent(tmp_path):
    src = tmp_path / "src.rdb"
    shutil.copytree(GOLDEN, src)
    dst = tmp_path / "dst.rdb"
    run("copy", str(src), str(dst), "saxpy")
    copied = Database.open(dst)
    assert [k.demangled_name for k in copied.kernels()] == ["saxpy(float, float const*, float*, int)"]
    assert copied.info == Database.open(src).info
    run("copy", str(src), str(dst))  # again, everything: no duplicates, row_sum added
    assert len(list(Database.open(dst).instances())) == 3
    run("check", str(dst))
    moved = tmp_path / "moved.rdb"
    run("move", str(src), str(moved), "row_sum")
    assert [k.demangled_name for k in Database.open(src).kernels()] == [
        "saxpy(float, float const*, float*, int)"]
    assert len(Database.open(moved).kernels()) == 1
    run("clean", str(src), "saxpy")
    assert Database.open(src).kernels() == []
    run("check", str(src))
