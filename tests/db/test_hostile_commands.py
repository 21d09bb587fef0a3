"""Hostile input to the commands that move data, replay and inspect (issue 10): transfers
(copy, move, clean) never lose data or touch anything outside a database, and places the
commands cannot write, replay configuration problems and damaged kernel sections are one
line each, with a non-zero exit. Damaged databases themselves: test_hostile_databases.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from db_support import INFO
from hostile_support import GOLDEN, broken, edit_json, first_instance, one_line, run
from mneme.replay.db import CorruptDataError, Database, DatabaseWriter

# -- helpers --------------------------------------------------------------------------


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


# -- places the commands cannot write ----------------------------------------------


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
