"""The golden databases (tests/data/golden.rdb: format 1, golden-v2.rdb: format 2) must
keep reading, with both readers, and keep checking."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import zarr
from mneme.replay.db import FORMAT_VERSION, Database
from mneme.replay.db.integrity import check_database

DATA = Path(__file__).resolve().parents[1] / "data"
#: (database, expected content, format version)
GOLDENS = [("golden.rdb", "golden.json", 1), ("golden-v2.rdb", "golden-v2.json", 2)]
golden = pytest.mark.parametrize(
    "GOLDEN, EXPECTED, VERSION",
    [(DATA / db, json.loads((DATA / doc).read_text()), v) for db, doc, v in GOLDENS],
    ids=[db for db, _, _ in GOLDENS],
)


def sha(data) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()


@golden
def test_golden_reads_with_our_reader(GOLDEN, EXPECTED, VERSION):
    db = Database.open(GOLDEN)
    assert db.info.to_json() == EXPECTED["info"]
    assert db.info.format_version == VERSION
    assert db.info.format_version <= FORMAT_VERSION
    assert {k.static_hash for k in db.kernels()} == set(EXPECTED["kernels"])
    for kernel in db.kernels():
        want = EXPECTED["kernels"][kernel.static_hash]
        assert (kernel.name, kernel.demangled_name) == (want["name"], want["demangled_name"])
        assert sha(kernel.ir()) == want["ir_sha256"]
        assert {i.dynamic_hash for i in kernel.instances()} == set(want["instances"])
        for inst in kernel.instances():
            spec = want["instances"][inst.dynamic_hash]
            assert list(inst.grid) == spec["grid"] and list(inst.block) == spec["block"]
            assert inst.args.hex() == spec["args"]
            assert inst.occurrences == spec["occurrences"]
            for name, region in spec["regions"].items():
                assert sha(inst.prologue(name)) == region["prologue_sha256"]
                assert sha(inst.epilogue(name)) == region["epilogue_sha256"]


@golden
def test_golden_reads_with_plain_zarr_and_the_overlay_rule(GOLDEN, EXPECTED, VERSION):
    root = zarr.open_group(str(GOLDEN), mode="r")
    assert root.attrs["mneme"]["format_version"] == EXPECTED["info"]["format_version"]
    formats = set()
    for static, want in EXPECTED["kernels"].items():
        kernel = root[f"kernels/{static}"]
        assert sha(kernel["ir"][:]) == want["ir_sha256"]
        for dyn, spec in want["instances"].items():
            inst = kernel[f"instances/{dyn}"]
            formats.add(inst.attrs["mneme"]["epilogue_format"])
            assert bytes(inst["args"][:]).hex() == spec["args"]
            for name, region in spec["regions"].items():
                before = inst[f"prologue/{name}"][:]
                stored = inst[f"epilogue/{name}"]
                after = stored[:] if stored.attrs["mneme"]["encoding"] == "bytes" else before ^ stored[:]
                assert sha(before) == region["prologue_sha256"]
                assert sha(after) == region["epilogue_sha256"]
    assert formats == {"diff", "bytes", "best"}


@golden
def test_golden_checks(GOLDEN, EXPECTED, VERSION):
    assert [str(p) for p in check_database(Database.open(GOLDEN)) if p.fatal] == []
    if VERSION >= 2:  # every region carries the content checksums check verified
        for inst in Database.open(GOLDEN).instances():
            assert all(inst.region_checksums(r.name) is not None for r in inst.regions)
