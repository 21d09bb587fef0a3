"""Fuzzing the golden databases: random byte flips, truncations, deletions and JSON field
edits of a copy, then ``ls``, ``show --json``, ``check`` and a compile-only ``replay``.

Properties: no command shows a traceback or hangs (each runs under a time limit), and in a
format-2 database, whenever ``check`` passes, both mneme's reader and plain zarr-python
return exactly what they returned before the mutation (what ``check`` vouches for).

Not covered by any checksum, so left out of the comparison: informational fields
(occurrences, stream, times, host, tool and GPU names), a region's kind and symbol,
kernel names, parameters and globals, and annotations within their documented ranges;
the schema still checks their types and ranges.

MNEME_FUZZ_EXAMPLES sets the number of examples of the format-2 database (default 100;
a third of it for format 1): about 30 s on a 2-core machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest
import zarr
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mneme.cli.main import cli
from mneme.replay.db import Database, DatabaseError

DATA = Path(__file__).resolve().parents[1] / "data"
EXAMPLES = int(os.environ.get("MNEME_FUZZ_EXAMPLES", "100"))
#: Seconds any one command may take on the tiny golden databases.
LIMIT = 60


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int):
    def expire(_signum, _frame):
        raise Hang(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run(*args) -> int:
    """A `mneme` command in this process: no traceback, no hang, at most one error line."""
    with time_limit(LIMIT):
        result = CliRunner().invoke(cli, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"mneme {' '.join(map(str, args))}: traceback") from result.exception
    if result.exit_code not in (0, 1):
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.exit_code


def sha(data) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()


def what_readers_get(root: Path) -> dict:
    """Everything that decides a replay, as mneme's reader and plain zarr-python return it
    (an error where a reader fails)."""
    out: dict = {}
    try:
        db = Database.open(root)
        for kernel in db.kernels():
            out[kernel.static_hash] = sha(kernel.ir())
            for inst in kernel.instances():
                entry = [inst.grid, inst.block, inst.shared_mem, inst.args.hex()]
                for r in inst.regions:
                    entry.append((r.name, r.address, r.size, sha(inst.prologue(r.name)),
                                  sha(inst.epilogue(r.name))))
                out[inst.id] = entry
    except DatabaseError as exc:
        out["reader error"] = type(exc).__name__
    try:
        group = zarr.open_group(str(root), mode="r")
        for static in group["kernels"].group_keys():
            kernel = group[f"kernels/{static}"]
            out[f"zarr {static}"] = sha(kernel["ir"][:])
            for dyn in kernel["instances"].group_keys():
                inst = kernel[f"instances/{dyn}"]
                entry = [sha(inst["args"][:])]
                for name in sorted(inst["prologue"].array_keys()):
                    before = inst[f"prologue/{name}"][:]
                    stored = inst[f"epilogue/{name}"]
                    after = stored[:] if stored.attrs["mneme"]["encoding"] == "bytes" else before ^ stored[:]
                    entry.append((name, sha(before), sha(after)))
                out[f"zarr {static}/{dyn}"] = entry
    except Exception as exc:  # noqa: BLE001 - any failure of the plain reader is a change
        out["zarr error"] = type(exc).__name__
    return out


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and ".mneme" not in p.relative_to(root).parts)


def json_paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from json_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from json_paths(v, (*prefix, i))


DELETE = object()
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
) | st.just(DELETE)
mutations = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 10**9), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.floats(0, 1)),
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(st.just("json"), st.integers(0, 10**6), st.integers(0, 10**6), json_values),
    st.tuples(st.just("nudge"), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(-3, 3)),
    # an array marked sparse (docs/format.md: only true, only prologues), maybe a chunk gone
    st.tuples(st.just("sparse"), st.integers(0, 10**6),
              st.sampled_from([True, True, True, False, 1, "true", None]), st.integers(-1, 10**6)),
)


def mutate(root: Path, mutation) -> str:
    kind, pick, *rest = mutation
    files = files_of(root)
    if kind == "sparse":
        return _mark_sparse(root, files, pick, *rest)
    if kind in ("json", "nudge"):
        files = [f for f in files if f.name == "zarr.json"]
    path = files[pick % len(files)]
    data = path.read_bytes()
    if kind == "flip":
        offset, value = rest
        if not data:
            return "nothing"
        buf = bytearray(data)
        buf[offset % len(buf)] ^= value
        path.write_bytes(bytes(buf))
    elif kind == "truncate":
        path.write_bytes(data[: int(len(data) * rest[0])])
    elif kind == "delete":
        path.unlink()
    else:
        doc = json.loads(data)
        paths = list(json_paths(doc))[1:]
        if not paths:
            return "nothing"
        where = paths[rest[0] % len(paths)]
        parent = doc
        for key in where[:-1]:
            parent = parent[key]
        if kind == "nudge":
            value = parent[where[-1]]
            if isinstance(value, bool) or not isinstance(value, int | float):
                return "nothing"
            parent[where[-1]] = value + rest[1]
        elif rest[1] is DELETE:
            del parent[where[-1]]
        else:
            parent[where[-1]] = rest[1]
        path.write_text(json.dumps(doc))
    return f"{kind} {path.relative_to(root)}"


def _mark_sparse(root: Path, files: list[Path], pick: int, value, remove: int) -> str:
    """Set ``attributes.mneme.sparse`` of an array to ``value``; with ``remove`` >= 0 also
    delete one of its chunk files (sparse: zeros read back, anything else a CRC mismatch)."""
    arrays = [f for f in files if f.name == "zarr.json" and (f.parent / "c").is_dir()]
    meta = arrays[pick % len(arrays)]
    doc = json.loads(meta.read_bytes())
    doc["attributes"].setdefault("mneme", {})["sparse"] = value
    meta.write_text(json.dumps(doc))
    chunks = sorted((meta.parent / "c").iterdir())
    if remove >= 0 and chunks:
        chunks[remove % len(chunks)].unlink()
    return f"sparse {meta.relative_to(root)}"


def fuzz(source: Path, mutation, oracle: bool) -> None:
    before = BASELINE.setdefault(source, what_readers_get(source))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "db"
        shutil.copytree(source, root, symlinks=True)
        mutate(root, mutation)
        start = time.monotonic()
        run("ls", root)
        ids = [k for k in before if "/" in k and not k.startswith("zarr")]
        for inst in ids:
            run("show", root, inst, "--json")
        ok = run("check", root) == 0
        run("replay", "-rdb", root, "-rid", ids[0], "--compile-only", "--json")
        assert time.monotonic() - start < 4 * LIMIT
        if oracle and ok:
            assert what_readers_get(root) == before, "check passed but readers get other data"


BASELINE: dict = {}
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(mutations)
def test_fuzz_format_2_check_catches_every_change(mutation):
    fuzz(DATA / "golden-v2.rdb", mutation, oracle=True)


@settings(FUZZ, max_examples=max(1, EXAMPLES // 3))
@given(mutations)
def test_fuzz_format_1_never_a_traceback(mutation):
    fuzz(DATA / "golden.rdb", mutation, oracle=False)


@pytest.mark.parametrize("mutation", [
    ("delete", 0),  # a file early in the sorted list
    ("nudge", 3, 7, 1),
    ("json", 5, 11, None),
    ("flip", 17, 40, 1),
    ("sparse", 0, True, -1),
    ("sparse", 7, True, 0),
    ("sparse", 3, False, -1),
])
def test_fixed_mutations(mutation):
    """A few fixed cases, so the properties run the same way on every machine too."""
    fuzz(DATA / "golden-v2.rdb", mutation, oracle=True)
