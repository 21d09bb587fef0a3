"""Hostile and damaged databases (issue 10): every user-caused failure is one line with a
non-zero exit, costs stay bounded by the data stored, ``check`` catches every change of
what a reader gets, and transfers never lose data or touch anything outside a database."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import crc32c
import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from db_support import BASE, INFO, STATIC, kernel_record, simple_instance
from mneme.cli.main import cli
from mneme.replay.db import (
    Annotation,
    CorruptDataError,
    Database,
    DatabaseWriter,
    InstanceRecord,
)
from mneme.replay.db.codec import encode_chunk
from mneme.replay.db.metadata import parse_json

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "golden.rdb"
SMALL_CHUNK = 1024


# -- helpers --------------------------------------------------------------------------


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


def unprivileged(*args) -> subprocess.CompletedProcess:
    """`mneme` as a process without the root capabilities that override permissions."""
    prefix = ["setpriv", "--bounding-set=-all", "--inh-caps=-all"] if os.geteuid() == 0 else []
    if prefix and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv")
    return subprocess.run([*prefix, sys.executable, "-m", "mneme.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def assert_one_line_process(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def first_instance(db: Path):
    return next(Database.open(db).instances())


@pytest.fixture
def golden(tmp_path):
    target = tmp_path / "g.rdb"
    shutil.copytree(GOLDEN, target)
    return target


def sparse_instance(seed: int, fmt_changes: float = 0.0) -> InstanceRecord:
    """64 KiB heap region changed in a few bytes (a few delta chunks of 1 KiB) and a
    global rewritten, annotated."""
    record = simple_instance(seed, 1 << 16, changed=0.0001)
    return InstanceRecord(record.grid, record.block, record.args, record.prologue, record.epilogue,
                          annotations={f"r-{BASE:016x}": Annotation("float32", 1e-6, 1e-6)})


@pytest.fixture
def fmt2(tmp_path):
    """A format-2 database: one diff instance (sparse deltas), one bytes instance."""
    path = tmp_path / "f2.rdb"
    with DatabaseWriter.create(path, INFO, chunk_size=SMALL_CHUNK) as writer:
        writer.add_kernel(kernel_record())
        diff, _ = writer.add_instance(STATIC, sparse_instance(1), epilogue_format="diff")
        whole, _ = writer.add_instance(STATIC, sparse_instance(2), epilogue_format="bytes")
    assert Database.open(path).info.format_version == 2
    assert "ok" in run("check", path)[1]
    db = Database.open(path)
    return path, db.kernel(STATIC).instance(diff), db.kernel(STATIC).instance(whole)


# -- one line, never a traceback --------------------------------------------------------


def test_non_utf8_byte_in_any_metadata(golden):
    metas = [golden / "zarr.json", golden / "kernels" / "zarr.json"]
    inst = first_instance(golden)
    metas += [inst.kernel.path / "zarr.json", inst.path / "zarr.json",
              inst.path / "prologue" / inst.regions[0].name / "zarr.json"]
    originals = {m: m.read_bytes() for m in metas}
    for meta in metas:
        meta.write_bytes(originals[meta].replace(b'"zarr_format"', b'"zarr\xff_format"', 1))
        if meta == golden / "zarr.json":
            one_line("ls", golden, needles=("not UTF-8",))
        else:
            broken(golden, "not UTF-8")
            run("ls", golden)  # listing may fail, but in one line
            run("show", golden, inst.id, "--json")
        meta.write_bytes(originals[meta])
    assert run("check", golden)[0] == 0


@pytest.mark.parametrize("field, value, needle", [
    ("grid", [1, "x", 1], "grid[1]"),
    ("block", 128, "block"),
    ("grid", [1, 1, 0], "grid[2]"),
    ("args_size", "12", "args_size"),
    ("shared_mem", -1, "shared_mem"),
    ("occurrences", 1.5, "occurrences"),
    ("regions", {"a": 1}, "regions"),
    ("annotations", [], "annotations"),
])
def test_instance_fields_of_the_wrong_type(golden, field, value, needle):
    inst = first_instance(golden)
    edit_json(inst.path / "zarr.json", lambda d: d["attributes"]["mneme"].__setitem__(field, value))
    one_line("show", golden, inst.id, needles=(needle,))
    broken(golden, needle)


def test_infinity_and_nan_in_metadata(golden):
    inst = first_instance(golden)
    meta = inst.path / "prologue" / inst.regions[0].name / "zarr.json"
    meta.write_text(meta.read_text().replace('"shape": [', '"shape": [Infinity, ', 1))
    broken(golden, "Infinity is not a JSON number")
    one_line("show", golden, inst.id, needles=("Infinity",))


def test_json_nested_200000_levels(golden, tmp_path):
    deep = "[" * 200_000 + "]" * 200_000
    inst = first_instance(golden)
    (inst.path / "zarr.json").write_text(deep)
    broken(golden, "nested deeper")
    (golden / "zarr.json").write_text(deep)
    one_line("ls", golden, needles=("nested deeper",))
    config = tmp_path / "deep.json"
    config.write_text('{"compile": ' + deep + "}")
    one_line("replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only", "--config", config,
             needles=("nested deeper",))


def test_binary_and_duplicate_key_config(tmp_path):
    config = tmp_path / "bin.json"
    config.write_bytes(bytes(range(256)))
    one_line("replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only", "--config", config,
             needles=("not UTF-8",))
    config.write_text('{"replay": {}, "replay": {"iterations": 2}}')
    one_line("replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only", "--config", config,
             needles=("duplicate key",))


@pytest.mark.parametrize("attributes", [[], {"mneme": "bytes"}, {"mneme": {"encoding": 7}}])
def test_array_attributes_of_the_wrong_type(golden, attributes):
    inst = first_instance(golden)
    meta = inst.path / "prologue" / inst.regions[0].name / "zarr.json"
    edit_json(meta, lambda d: d.__setitem__("attributes", attributes))
    broken(golden, "attributes")
    one_line("show", golden, inst.id, needles=("attributes",))


def test_chunk_that_is_a_directory_and_folders_that_are_files(golden):
    inst = first_instance(golden)
    region = inst.path / "prologue" / inst.regions[0].name
    chunk = region / "c" / "0"
    chunk.unlink()
    chunk.mkdir()
    broken(golden, "not a regular file")
    one_line("show", golden, inst.id, needles=("not a regular file",))
    shutil.rmtree(region / "c")
    (region / "c").write_bytes(b"x")
    broken(golden, "is not a directory")
    shutil.rmtree(inst.kernel.path / "instances")
    (inst.kernel.path / "instances").write_text("x")
    assert run("ls", golden)[0] == 0  # the kernel lists no instances
    broken(golden, "instances")
    shutil.rmtree(golden / "kernels")
    (golden / "kernels").write_text("x")
    assert run("ls", golden)[0] == 0
    broken(golden, "kernels group metadata is missing")


def test_chunk_shape_that_numpy_cannot_allocate(golden):
    inst = first_instance(golden)
    name = inst.regions[0].name
    meta = inst.path / "prologue" / name / "zarr.json"
    edit_json(meta, lambda d: d["chunk_grid"]["configuration"].__setitem__("chunk_shape", [1 << 61]))
    with pytest.raises(CorruptDataError, match="chunk shape"):
        first_instance(golden).prologue(name)
    broken(golden, "chunk shape")


def test_unwritable_destination_source_and_cache_dir(golden, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert_one_line_process(unprivileged("copy", golden, locked / "dst.rdb"), "cannot create")
    assert_one_line_process(
        unprivileged("replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only",
                     "--cache-dir", locked / "cache"), "--cache-dir")
    dst = tmp_path / "dst.rdb"
    assert run("copy", golden, dst, "row_sum")[0] == 0
    os.chmod(dst / "kernels", 0o500)
    result = unprivileged("copy", golden, dst, "saxpy")
    assert_one_line_process(result, "Permission denied")
    os.chmod(dst / "kernels", 0o700)
    os.chmod(golden / "kernels", 0o500)  # the source: move and clean cannot delete
    assert_one_line_process(unprivileged("move", golden, dst, "saxpy"), "Permission denied")
    assert_one_line_process(unprivileged("clean", golden, "saxpy"), "Permission denied")
    os.chmod(golden / "kernels", 0o700)
    assert len(Database.open(golden).kernels()) == 2
    assert run("check", golden)[0] == 0


# -- bounded cost -----------------------------------------------------------------------


@pytest.mark.exclusive  # wall-clock bounds
def test_a_chunk_grid_of_a_billion_chunks_is_checked_in_moments(golden):
    inst = first_instance(golden)
    name = inst.regions[0].name
    edit_json(inst.path / "zarr.json", lambda d: [
        r.__setitem__("size", 1 << 29) for r in d["attributes"]["mneme"]["regions"] if r["name"] == name])
    for side in ("prologue", "epilogue"):
        edit_json(inst.path / side / name / "zarr.json", lambda d: (
            d.__setitem__("shape", [1 << 29]),
            d["chunk_grid"]["configuration"].__setitem__("chunk_shape", [1])))
    start = time.monotonic()
    text = broken(golden)
    assert time.monotonic() - start < 30
    assert "missing" in text or "declares" in text or "overlap" in text


@pytest.mark.exclusive  # wall-clock bounds
def test_a_chunk_that_inflates_beyond_its_declared_size(golden):
    inst = first_instance(golden)
    name = inst.regions[0].name
    chunk = inst.path / "prologue" / name / "c" / "0"
    size = json.loads((inst.path / "prologue" / name / "zarr.json").read_text())
    size = size["chunk_grid"]["configuration"]["chunk_shape"][0]
    chunk.write_bytes(encode_chunk(np.zeros(256 << 20, np.uint8), 1))  # ~8 KB → 256 MiB
    start = time.monotonic()
    with pytest.raises(CorruptDataError, match=f"declares {256 << 20} bytes, expected {size}"):
        first_instance(golden).prologue(name)
    broken(golden, "declares")
    assert time.monotonic() - start < 10


def test_bounded_json_parser():
    with pytest.raises(CorruptDataError, match="nested deeper"):
        parse_json(b"[" * 100 + b"]" * 100, "x")
    assert parse_json(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}', "x") == {"a": "[" * 36}
    with pytest.raises(CorruptDataError, match="NaN"):
        parse_json(b"[NaN]", "x")


# -- check catches every change of what a reader gets ------------------------------------


def test_deleted_epilogue_chunk_of_a_bytes_region(golden):
    db = Database.open(golden)
    inst = next(i for i in db.instances() if i.epilogue_format == "bytes")
    region = next(r for r in inst.regions if inst.epilogue_encoding(r.name) == "bytes")
    (inst.path / "epilogue" / region.name / "c" / "0").unlink()
    broken(golden, "chunk 0 is missing")


def test_deleted_delta_chunk_is_caught_in_format_2(fmt2):
    path, diff, _ = fmt2
    region = diff.regions[0].name
    chunks = sorted((diff.path / "epilogue" / region / "c").iterdir())
    assert 0 < len(chunks) < (1 << 16) // SMALL_CHUNK  # sparse: a missing one means "unchanged"
    chunks[0].unlink()
    broken(path, "epilogue content checksum mismatch")


def test_epilogue_encoding_flipped(golden, fmt2):
    path, diff, _ = fmt2
    name = diff.regions[0].name
    edit_json(diff.path / "epilogue" / name / "zarr.json",
              lambda d: d["attributes"]["mneme"].__setitem__("encoding", "bytes"))
    broken(path, "metadata says xor-prologue")
    # flipped consistently in the array and the instance metadata: the checksum catches it
    edit_json(diff.path / "zarr.json", lambda d: [
        (r.__setitem__("epilogue_encoding", "bytes")) for r in d["attributes"]["mneme"]["regions"]])
    edit_json(diff.path / "zarr.json", lambda d: d["attributes"]["mneme"].__setitem__("epilogue_format", "best"))
    broken(path, "checksum mismatch")
    # format 1: the encoding must agree with the instance's epilogue format
    inst = next(i for i in Database.open(golden).instances() if i.epilogue_format == "diff")
    for r in inst.regions:
        edit_json(inst.path / "epilogue" / r.name / "zarr.json",
                  lambda d: d["attributes"]["mneme"].__setitem__("encoding", "bytes"))
    edit_json(inst.path / "zarr.json", lambda d: [
        r.__setitem__("epilogue_encoding", "bytes") for r in d["attributes"]["mneme"]["regions"]])
    broken(golden, "contradicts epilogue format diff")


@pytest.mark.parametrize("field, value", [("grid", [9, 1, 1]), ("shared_mem", 64), ("block", [64, 2, 1])])
def test_launch_configuration_no_longer_matches_the_dynamic_hash(golden, field, value):
    inst = first_instance(golden)
    edit_json(inst.path / "zarr.json", lambda d: d["attributes"]["mneme"].__setitem__(field, value))
    broken(golden, "do not match the dynamic hash")


def test_argument_buffer_no_longer_matches_the_dynamic_hash(golden):
    inst = first_instance(golden)
    args = bytearray(inst.args)
    args[0] ^= 1
    shutil.rmtree(inst.path / "args")
    from mneme.replay.db.chunks import write_array
    write_array(inst.path / "args", np.frombuffer(bytes(args), np.uint8),
                attributes={"mneme": {"encoding": "bytes"}})
    broken(golden, "do not match the dynamic hash")


@pytest.mark.parametrize("change, needle", [
    (lambda regions, vas: regions.append(dict(regions[-1])), "recorded twice"),
    (lambda regions, vas: regions[1].__setitem__("address", regions[0]["address"] + 4), "overlap"),
    (lambda regions, vas: regions[-1].__setitem__("address", vas["base"] + vas["size"]),
     "outside the recorded address range"),
])
def test_region_layout_rules(golden, change, needle):
    inst = first_instance(golden)
    vas = json.loads((golden / "zarr.json").read_text())["attributes"]["mneme"]["address_space"]

    def edit(doc):
        regions = doc["attributes"]["mneme"]["regions"]
        change(regions, vas)
        for r in regions:
            r["name"] = f"r-{r['address']:016x}"

    edit_json(inst.path / "zarr.json", edit)
    broken(golden, needle)
    one_line("show", golden, inst.id, needles=(needle,))


def test_garbage_after_a_valid_bitcode_magic(golden, fmt2):
    db = Database.open(golden)
    kernel = db.kernels()[0]
    ir = bytearray(kernel.ir())
    ir[4:] = bytes(len(ir) - 4)  # same size, magic kept
    from mneme.replay.db.chunks import write_array
    for node in (kernel.path / "ir",):
        shutil.rmtree(node)
        write_array(node, np.frombuffer(bytes(ir), np.uint8), attributes={"mneme": {"encoding": "llvm-bitcode"}})
    broken(golden, "does not parse as LLVM bitcode")
    path, diff, _ = fmt2  # format 2: the recorded IR checksum
    ir_dir = diff.kernel.path / "ir"
    data = bytearray(diff.kernel.ir())
    data[-1] ^= 0xFF
    shutil.rmtree(ir_dir)
    write_array(ir_dir, np.frombuffer(bytes(data), np.uint8), attributes={"mneme": {"encoding": "llvm-bitcode"}})
    broken(path, "IR content checksum mismatch")


def test_annotation_tolerance_outside_its_documented_range(fmt2):
    path, diff, _ = fmt2
    edit_json(diff.path / "zarr.json", lambda d: [
        a.__setitem__("atol", 1e9) for a in d["attributes"]["mneme"]["annotations"].values()])
    broken(path, "atol", "outside [0, 1e+06]")
    edit_json(diff.path / "zarr.json", lambda d: [
        a.update(atol=1e-6, rtol=5) for a in d["attributes"]["mneme"]["annotations"].values()])
    broken(path, "rtol")
    edit_json(diff.path / "zarr.json", lambda d: [
        a.update(rtol=0, dtype="object") for a in d["attributes"]["mneme"]["annotations"].values()])
    broken(path, "dtype")


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d.__setitem__("fill_value", 1), "fill_value"),
    (lambda d: d["codecs"].__setitem__(1, {"name": "gzip", "configuration": {"level": 1}}), "codecs[1]"),
    (lambda d: d["codecs"].insert(0, {"name": "transpose", "configuration": {"order": [0]}}), "codecs"),
    (lambda d: d.__setitem__("chunk_key_encoding", {"name": "v2", "configuration": {"separator": "."}}),
     "chunk_key_encoding"),
    (lambda d: d["chunk_grid"]["configuration"].__setitem__("chunk_shape", [7]), "chunk"),
    (lambda d: d.__setitem__("data_type", "int8"), "data_type"),
    (lambda d: d.__setitem__("dimension_names", ["x"]), "unexpected field"),
])
def test_zarr_metadata_must_be_exactly_as_specified(fmt2, edit, needle):
    path, diff, _ = fmt2
    edit_json(diff.path / "epilogue" / diff.regions[0].name / "zarr.json", edit)
    broken(path, needle)


def test_format_1_databases_are_still_checked(golden):
    assert Database.open(golden).info.format_version == 1
    assert run("check", golden)[0] == 0
    assert run("check", DATA / "examples.rdb")[0] == 0


def test_both_writers_record_checksums_that_check_verifies(tmp_path, fmt2):
    native = pytest.importorskip("mneme.runtime._native")
    path, diff, whole = fmt2
    for inst in (diff, whole):
        for r in inst.regions:
            pro, epi = inst.region_checksums(r.name)
            assert pro == crc32c.crc32c(inst.prologue(r.name).tobytes())
            assert epi == crc32c.crc32c(inst.epilogue(r.name).tobytes())
    rng = np.random.default_rng(5)
    for cls in (native.RecordingWriter, native.SnapshotWriter):
        root = tmp_path / f"{cls.__name__}.rdb"
        w = cls(str(root), BASE, 1 << 30, "GPU", "9.0", ["./app"], "diff", 4096, 1)
        w.add_kernel(STATIC, "_Z1kv", "k()", b"BC\xc0\xde" + bytes(100), [], [])
        before = rng.integers(0, 256, 50_000, dtype=np.uint8)
        after = before.copy()
        after[777] ^= 1
        dyn, _ = w.add_instance(STATIC, (1, 1, 1), (32, 1, 1), 0, b"", [("heap", BASE, "", before, after)])
        del w  # the pipeline flushes
        db = Database.open(root)
        assert db.info.format_version == 2
        inst = db.kernel(STATIC).instance(dyn)
        assert inst.region_checksums(f"r-{BASE:016x}") == (
            crc32c.crc32c(before.tobytes()), crc32c.crc32c(after.tobytes()))
        assert db.kernel(STATIC).ir_checksum == crc32c.crc32c(b"BC\xc0\xde" + bytes(100))
        assert run("check", root)[0] == 0
        delta = sorted((inst.path / "epilogue" / f"r-{BASE:016x}" / "c").iterdir())
        assert len(delta) == 1
        delta[0].unlink()
        broken(root, "epilogue content checksum mismatch")


def test_plain_zarr_reads_what_check_vouches_for(fmt2):
    path, diff, _ = fmt2
    node = zarr.open_group(str(path), mode="r")[f"kernels/{STATIC}/instances/{diff.dynamic_hash}"]
    for r in diff.regions:
        before = node[f"prologue/{r.name}"][:]
        stored = node[f"epilogue/{r.name}"]
        after = before ^ stored[:] if stored.attrs["mneme"]["encoding"] == "xor-prologue" else stored[:]
        assert (crc32c.crc32c(before.tobytes()), crc32c.crc32c(after.tobytes())) == diff.region_checksums(r.name)


# -- transfers lose nothing, never leave the database -------------------------------------


def test_move_onto_a_corrupt_copy_keeps_the_source(golden, tmp_path):
    dst = tmp_path / "dst.rdb"
    assert run("copy", golden, dst, "saxpy")[0] == 0
    inst = next(i for i in Database.open(dst).instances() if "saxpy" in i.kernel.demangled_name)
    chunk = inst.path / "prologue" / inst.regions[0].name / "c" / "0"
    data = bytearray(chunk.read_bytes())
    data[10] ^= 1
    chunk.write_bytes(bytes(data))
    one_line("move", golden, dst, "saxpy", needles=("damaged", "--force"))
    assert [k.demangled_name for k in Database.open(golden).kernels()][1].startswith("saxpy")
    assert run("check", golden)[0] == 0
    assert run("move", golden, dst, "saxpy", "--force")[0] == 0
    assert run("check", dst)[0] == 0
    assert len(Database.open(golden).kernels()) == 1


def test_copy_onto_a_different_instance_of_the_same_hash_is_refused(golden, tmp_path):
    dst = tmp_path / "dst.rdb"
    assert run("copy", golden, dst, "row_sum")[0] == 0
    inst = next(Database.open(dst).instances())
    edit_json(inst.path / "zarr.json",
              lambda d: d["attributes"]["mneme"]["annotations"].__setitem__(
                  inst.regions[0].name, {"dtype": "float32", "atol": 0.5, "rtol": 0.0}))
    assert run("check", dst)[0] == 0  # sound, but not what the source holds
    one_line("copy", golden, dst, "row_sum", needles=("annotations differ",))
    one_line("move", golden, dst, "row_sum", needles=("annotations differ",))
    assert len(Database.open(golden).kernels()) == 2


@pytest.mark.parametrize("inside", [".mneme/staging", "kernels", "sub/dir", "."])
def test_copy_or_move_into_the_source_itself_is_refused(golden, inside):
    target = golden / inside
    for verb in ("copy", "move"):
        one_line(verb, golden, target, needles=("inside",))
    assert run("clean", golden, "--staging")[0] == 0
    assert len(Database.open(golden).kernels()) == 2
    assert run("check", golden)[0] == 0


def test_source_inside_the_destination_is_refused(tmp_path):
    outer = tmp_path / "outer.rdb"
    DatabaseWriter.create(outer, INFO)
    inner = outer / ".mneme" / "inner.rdb"
    shutil.copytree(GOLDEN, inner)
    one_line("copy", inner, outer, needles=("inside",))


def test_clean_never_follows_a_symlinked_staging_or_kernels(golden, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").mkdir()
    (elsewhere / "precious" / "data").write_text("keep")
    staging = golden / ".mneme" / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.symlink_to(elsewhere)
    one_line("clean", golden, "--staging", needles=("symbolic link",))
    one_line("clean", golden, "saxpy", needles=("symbolic link",))
    assert (elsewhere / "precious" / "data").read_text() == "keep"
    staging.unlink()
    staging.mkdir()
    other = tmp_path / "other.rdb"
    shutil.copytree(GOLDEN, other)
    shutil.rmtree(golden / "kernels")
    (golden / "kernels").symlink_to(other / "kernels")
    one_line("clean", golden, "saxpy", needles=("symbolic link",))
    one_line("ls", golden, needles=("symbolic link",))
    broken(golden, "symbolic link")
    assert len(Database.open(other).kernels()) == 2


def test_copy_never_follows_a_chunk_symlinked_outside(golden, tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"private bytes")
    inst = first_instance(golden)
    chunk = inst.path / "prologue" / inst.regions[0].name / "c" / "0"
    chunk.unlink()
    chunk.symlink_to(secret)
    with pytest.raises(CorruptDataError, match="symbolic link"):
        first_instance(golden).prologue(inst.regions[0].name)
    broken(golden, "symbolic link")
    dst = tmp_path / "dst.rdb"
    one_line("copy", golden, dst, needles=("symbolic link",))
    assert not any(b"private bytes" in f.read_bytes() for f in dst.rglob("*") if f.is_file())


def test_clean_with_several_names_resolves_all_first(golden):
    saxpy, row_sum = (k.static_hash for k in Database.open(golden).kernels()[::-1])
    one_line("clean", golden, saxpy, "nonesuch", needles=("no kernel",))
    assert len(Database.open(golden).kernels()) == 2
    code, out, _ = run("clean", golden, saxpy, row_sum, saxpy, "saxpy")
    assert code == 0 and out.count("removed") == 2
    assert Database.open(golden).kernels() == []


def test_copies_are_verified_and_identical(fmt2, tmp_path):
    path, diff, whole = fmt2
    dst = tmp_path / "dst.rdb"
    assert run("move", path, dst)[0] == 0
    moved = Database.open(dst)
    assert moved.info.format_version == 2 and run("check", dst)[0] == 0
    assert {i.dynamic_hash for i in moved.instances()} == {diff.dynamic_hash, whole.dynamic_hash}
    assert list(Database.open(path).instances()) == []
    # a format-1 source cannot go into a format-2 database (no checksums to vouch for it)
    one_line("copy", GOLDEN, dst, needles=("format 2",))


# -- replay configuration problems --------------------------------------------------------


def test_config_arch_is_honoured_or_refused(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"compile": {"arch": "sm_80"}}))
    one_line("replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only", "--config", config,
             needles=("sm_80", "sm_90"))
    config.write_text(json.dumps({"compile": {"arch": "sm_80"}, "replay": {"arch": "sm_80"}}))
    code, out, err = run("replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only", "--json",
                         "--config", config)
    assert code == 0, err
    assert json.loads(out)["configuration"]["compile"]["arch"] == "sm_80"


def test_specialize_outside_the_argument_buffer(golden):
    inst = Database.open(golden).instance("saxpy/1b78")
    edit_json(inst.kernel.path / "zarr.json",
              lambda d: d["attributes"]["mneme"]["params"][3].__setitem__("offset", 4096))
    one_line("replay", "-rdb", golden, "-rid", "1b78", "--compile-only", "--specialize",
             needles=("outside the recorded argument buffer",))


def test_impossible_shared_memory_is_refused_before_compiling():
    one_line("replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only", "--shared-mem", str(1 << 40),
             needles=("shared memory", "sm_90"))
    one_line("replay", "-rdb", GOLDEN, "-rid", "1b78", "--compile-only", "--shared-mem", str(300 << 10),
             needles=("shared memory",))


# -- inspect on damaged kernel sections ---------------------------------------------------


def elf_with_section(tmp_path: Path, section: bytes) -> Path:
    if shutil.which("objcopy") is None:
        pytest.skip("objcopy is not installed")
    from mneme.instrument.section import SECTION_NAME

    payload = tmp_path / "section.bin"
    payload.write_bytes(section)
    binary = tmp_path / "app"
    shutil.copyfile(shutil.which("true"), binary)
    subprocess.run(["objcopy", "--add-section", f"{SECTION_NAME}={payload}", str(binary)], check=True)
    return binary


@pytest.mark.parametrize("meta", [{"kernels": [5]}, {"kernels": "x"}, [1, 2],
                                  {"kernels": [{"name": "k", "ir": "x"}]},
                                  {"kernels": [{"name": "k", "params": [{"index": "a"}]}]}])
def test_inspect_section_with_a_valid_checksum_and_the_wrong_shape(tmp_path, meta):
    from mneme.instrument.section import encode_record

    binary = elf_with_section(tmp_path, encode_record(meta))
    one_line("inspect", binary)


def test_inspect_forged_section_size(tmp_path):
    import struct

    from mneme.instrument.section import SECTION_NAME, encode_record

    binary = elf_with_section(tmp_path, encode_record({"kernels": []}))
    data = bytearray(binary.read_bytes())
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    names_off = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)[0]
    for i in range(shnum):
        at = shoff + i * shentsize
        name_at = names_off + struct.unpack_from("<I", data, at)[0]
        if data[name_at : name_at + len(SECTION_NAME)] == SECTION_NAME.encode():
            struct.pack_into("<Q", data, at + 0x20, 1 << 40)
    binary.write_bytes(bytes(data))
    one_line("inspect", binary, needles=("damaged ELF section table",))


@pytest.mark.exclusive  # wall-clock bounds
def test_inspect_skips_64_mib_of_padding_quickly(tmp_path):
    from mneme.instrument.section import encode_record

    binary = elf_with_section(tmp_path, bytes(64 << 20) + encode_record({"kernels": []}))
    start = time.monotonic()
    code, out, err = run("inspect", binary)
    assert code == 0, err
    assert "0 kernels" in out
    assert time.monotonic() - start < 5


def test_writers_keep_a_format_1_database_at_format_1(tmp_path):
    """Appending never makes a format-1 database claim checksums its old nodes lack."""
    native = pytest.importorskip("mneme.runtime._native")
    root = tmp_path / "old.rdb"
    native.RecordingWriter(str(root), BASE, 1 << 30)  # as `mneme record` creates it: no GPU facts
    meta = root / "zarr.json"
    meta.write_text(meta.read_text().replace('"format_version": 2', '"format_version": 1'))
    assert Database.open(root).info.format_version == 1
    with DatabaseWriter.create(root, INFO) as writer:
        writer.add_kernel(kernel_record())
    native.RecordingWriter(str(root), BASE, 1 << 30, gpu_name="NVIDIA H100", compute_capability="9.0")
    info = Database.open(root).info
    assert (info.format_version, info.gpu_name) == (1, "NVIDIA H100")
    with DatabaseWriter.create(root, INFO) as writer:
        writer.add_instance(STATIC, simple_instance(3))
    assert Database.open(root).info.format_version == 1
    assert run("check", root)[0] == 0
