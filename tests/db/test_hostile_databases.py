"""Hostile and damaged databases (issue 10): every failure a damaged database causes is one
line with a non-zero exit, costs stay bounded by the data stored, and ``check`` catches
every change of what a reader gets. The commands that move data, replay and inspect on
hostile input: test_hostile_commands.py."""

from __future__ import annotations

import json
import shutil
import time

import crc32c
import numpy as np
import pytest
import zarr
from db_support import BASE, INFO, STATIC, kernel_record, simple_instance
from hostile_support import (
    DATA,
    GOLDEN,
    SMALL_CHUNK,
    broken,
    edit_json,
    first_instance,
    one_line,
    run,
)
from mneme.replay.db import CorruptDataError, Database, DatabaseWriter
from mneme.replay.db.codec import encode_chunk
from mneme.replay.db.metadata import parse_json

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
