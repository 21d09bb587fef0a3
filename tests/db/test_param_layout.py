"""A kernel's parameter layout (issue 35 item 5): replay lays the argument buffer out from
the params' offsets and sizes, so a damaged or edited number must be caught by check and
by every reader, in one line naming the kernel and the parameter."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from mneme.cli.main import cli

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "examples.rdb"
CG_REDUCE = "0135c0ba31442cad"  # cg_reduce(double const*, int, CgScalars*, ReduceOp), args 28 B


def run(*args) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout + result.stderr


@pytest.fixture
def examples(tmp_path):
    target = tmp_path / "examples.rdb"
    shutil.copytree(EXAMPLES, target)
    return target


def edit_param(db: Path, index: int, **values) -> None:
    path = db / "kernels" / CG_REDUCE / "zarr.json"
    doc = json.loads(path.read_text())
    doc["attributes"]["mneme"]["params"][index].update(values)
    path.write_text(json.dumps(doc))


def test_the_unedited_examples_check_out(examples):
    code, out = run("check", examples)
    assert code == 0, out


@pytest.mark.parametrize(("index", "values", "needle"), [
    (1, {"size": 3}, "size is not a multiple of the alignment"),  # the 4 -> 3
    (1, {"offset": 6}, "overlaps the parameter before it"),
    (3, {"offset": 26}, "offset is not a multiple of the alignment"),
    (2, {"align": 6}, "not a power of two"),
])
def test_check_and_readers_catch_an_inconsistent_parameter(examples, index, values, needle):
    edit_param(examples, index, **values)
    code, out = run("check", examples)
    assert code == 1
    lines = [line for line in out.splitlines() if line.startswith("broken:")]
    assert len(lines) == 1, out
    assert f"{CG_REDUCE} (cg_reduce(double const*, int, CgScalars*, ReduceOp)): parameter {index}" \
        in lines[0]
    assert needle in lines[0]
    # a reader refuses the kernel in one line too (show, replay, tune read it the same way)
    code, out = run("show", examples, CG_REDUCE)
    assert code != 0 and "Traceback" not in out
    assert len(out.strip().splitlines()) == 1 and needle in out


def test_check_catches_parameters_that_run_past_the_recorded_arguments(examples):
    # consistent by itself (4-byte aligned, no overlap) but 4 bytes past args_size 28
    edit_param(examples, 3, size=8)
    code, out = run("check", examples)
    assert code == 1
    lines = [line for line in out.splitlines() if line.startswith("broken:")]
    assert lines and all("args holds 28 bytes but the parameters of kernel "
                         f"{CG_REDUCE} (cg_reduce" in line and "span 32" in line for line in lines), out
