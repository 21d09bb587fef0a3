"""A kernel's origin (issue 21: `mneme ls` shows where each kernel's code came from, the
shared object or the loader): written by the recorder's C++ writer and the Python writer,
read as Kernel.origin (None for databases written before it), shown by file name in
`mneme ls` (ids still whole), in full in `ls --json` and `show`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from db_support import BASE, INFO, STATIC, kernel_record, mneme_piped, simple_instance
from mneme.replay.db import Database, DatabaseWriter, KernelRecord
from mneme.replay.db.errors import CorruptDataError

DATA = Path(__file__).resolve().parents[1] / "data"
CUBLAS = "/usr/local/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13"
TORCH = "/opt/torch/lib/libtorch_cuda.so"
OTHER = "0123456789abcdef"
IR = b"BC\xc0\xde" + bytes(range(64))


@pytest.fixture(scope="module")
def with_origins(tmp_path_factory):
    """A kernel from libcublasLt (Python writer), one without an origin; their ids."""
    path = tmp_path_factory.mktemp("origin") / "db"
    base = kernel_record()
    with DatabaseWriter.create(path, INFO) as writer:
        writer.add_kernel(KernelRecord(STATIC, base.name, base.ir, base.demangled_name, base.params,
                                       origin=CUBLAS))
        writer.add_kernel(KernelRecord(OTHER, "_Z5otherv", base.ir, "other()"))
        ids = [f"{s}/{writer.add_instance(s, simple_instance(seed))[0]}" for s, seed in ((STATIC, 1), (OTHER, 2))]
    return path, ids


def test_the_cpp_writer_writes_origin_only_when_known(tmp_path):
    native = pytest.importorskip("mneme.runtime._native")
    path = tmp_path / "cpp.rdb"
    writer = native.RecordingWriter(str(path), BASE, 1 << 30)
    assert writer.add_kernel(STATIC, "_Z3fooPfi", "foo(float*, int)", IR, [(8, 8, 0, True, False)], [],
                             origin=TORCH)
    assert writer.add_kernel(OTHER, "_Z3barv", "bar()", IR, [], [])
    attrs = json.loads((path / "kernels" / STATIC / "zarr.json").read_text())["attributes"]["mneme"]
    assert attrs["origin"] == TORCH
    assert "origin" not in json.loads((path / "kernels" / OTHER / "zarr.json").read_text())["attributes"]["mneme"]
    db = Database.open(path)
    assert db.kernel(STATIC).origin == TORCH
    assert db.kernel(STATIC).static_hash == STATIC  # metadata only: the hash is the writer's
    assert db.kernel(OTHER).origin is None


def test_the_python_writer_round_trips_origin(with_origins):
    path, _ = with_origins
    db = Database.open(path)
    assert db.kernel(STATIC).origin == CUBLAS
    assert db.kernel(OTHER).origin is None


@pytest.mark.parametrize("golden", ["golden.rdb", "golden-v2.rdb", "examples.rdb"])
def test_databases_written_before_origins_read_none(golden):
    assert {k.origin for k in Database.open(DATA / golden).kernels()} == {None}


@pytest.mark.parametrize("bad", ["", 7, ["a"]])
def test_a_malformed_origin_is_refused_in_one_line(tmp_path, bad):
    path = tmp_path / "db"
    with DatabaseWriter.create(path, INFO) as writer:
        writer.add_kernel(kernel_record())
    meta = path / "kernels" / STATIC / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["mneme"]["origin"] = bad
    meta.write_text(json.dumps(doc))
    kernel = Database.open(path).kernel(STATIC)
    with pytest.raises(CorruptDataError, match="origin"):
        kernel.origin  # noqa: B018
    assert "\n" not in kernel.problem()


@pytest.mark.parametrize("columns", [40, 300])
def test_ls_shows_the_origin_file_name_and_whole_ids(with_origins, columns):
    path, ids = with_origins
    out = mneme_piped("ls", path, columns=columns)
    header = next(line for line in out.splitlines() if "instance" in line)
    assert "origin" in header
    row = next(line for line in out.splitlines() if ids[0] in line)
    assert "libcublasLt.so.13" in row and CUBLAS not in row
    other = next(line for line in out.splitlines() if ids[1] in line)
    assert [cell.strip() for cell in other.split("│")][3] == "-"  # unknown origin


def test_ls_json_and_show_give_the_full_path(with_origins):
    path, ids = with_origins
    rows = {r["instance"]: r for r in json.loads(mneme_piped("ls", path, "--json"))}
    assert rows[ids[0]]["origin"] == CUBLAS and rows[ids[1]]["origin"] is None
    assert json.loads(mneme_piped("show", path, STATIC, "--json"))["origin"] == CUBLAS
    assert json.loads(mneme_piped("show", path, ids[0], "--json"))["origin"] == CUBLAS
    shown = mneme_piped("show", path, STATIC, columns=40)
    assert any(line.split() == ["origin", CUBLAS] for line in shown.splitlines())
