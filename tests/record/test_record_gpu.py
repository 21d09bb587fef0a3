"""Record the corpus on a real GPU and compare every instance with what the program saw.

The corpus programs print FNV-1a checksums of each buffer before and after every launch
(tests/corpus/README.md); each recorded instance must match one launch of its kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
from mneme.replay.db import Database
from mneme.replay.db.integrity import check_database
from mneme.runtime import driver_available
from record_support import PROGRAMS, checklines, executable, mneme_record

pytestmark = pytest.mark.gpu
SLOW = {"large_working_set"}  # checksummed by size only (pure-Python FNV is slow)
RECORDED = sorted(set(PROGRAMS) - {"crash_after_launch"})


@pytest.fixture(scope="module", autouse=True)
def _gpu():
    if not driver_available():
        pytest.skip("no usable CUDA driver")


def launches(stdout: str) -> dict[int, dict]:
    result: dict[int, dict] = {}
    for c in checklines.parse_output(stdout):
        entry = result.setdefault(c.launch, {"kernel": c.kernel, "before": {}, "after": {}})
        entry[c.phase][c.label] = (c.size, c.checksum)
    return result


class Checksums:
    """FNV-1a 64 of recorded regions as the programs print it, each region's computed once
    and only when a reported size asks for it: the pure-Python FNV takes ~0.4 s a 4 MiB
    buffer, and an application's instances hold dozens of them."""

    def __init__(self):
        self._sums: dict[tuple, str] = {}

    def region(self, inst, side: str, r) -> str:
        key = (inst.id, side, r.name)
        if key not in self._sums:
            data = (inst.prologue if side == "before" else inst.epilogue)(r.name)
            self._sums[key] = checklines.fnv1a64_hex(data.tobytes())
        return self._sums[key]

    def has(self, inst, side: str, size: int, checksum: str | None) -> bool:
        """Some region of that size (and, given one, that checksum) was recorded."""
        return any(r.size == size and (checksum is None or self.region(inst, side, r) == checksum)
                   for r in inst.regions)

    @staticmethod
    def slice_sum(inst, side: str, address: int, size: int) -> str | None:
        """The checksum of ``size`` bytes at ``address`` inside the recorded region that holds
        them (a corpus::slice: a neighbour's boundary row); None when no region holds them."""
        for r in inst.regions:
            if r.address <= address and address + size <= r.address + r.size:
                data = (inst.prologue if side == "before" else inst.epilogue)(r.name)
                start = address - r.address
                return checklines.fnv1a64_hex(data[start:start + size].tobytes())
        return None

    def matches(self, inst, launch: dict, exact: bool) -> bool:
        for side in ("before", "after"):
            for label, (size, checksum) in launch[side].items():  # a slice's label ends @<address>
                if "@" in label:
                    found = self.slice_sum(inst, side, int(label.rpartition("@")[2], 16), size)
                    if found is None or (exact and found != checksum):
                        return False
                elif not self.has(inst, side, size, checksum if exact else None):
                    return False
        return True


@pytest.mark.parametrize("name", RECORDED)
def test_every_instance_matches_what_the_program_saw(tmp_path, name):
    program = PROGRAMS[name]
    exe = executable(name, tmp_path)
    db_path = tmp_path / "rec.rdb"
    result = mneme_record(db_path, exe)
    assert result.returncode == program.expect_exit, result.stderr
    assert checklines.result_ok(result.stdout), result.stderr  # output passes through
    seen = launches(result.stdout)
    db = Database.open(db_path)
    instances = list(db.instances())
    assert instances, "nothing was recorded"
    recorded_kernels = {i.kernel.demangled_name for i in instances}
    reported = {launch["kernel"] for launch in seen.values()}
    # same-named file-static kernels of several TUs are refused, saying so (never recorded wrong)
    refused = {k for k in reported if f"kernel {k} is defined differently" in result.stderr}
    assert reported - refused <= recorded_kernels, "every kernel that ran was recorded"
    checksums = Checksums()
    # the fidelity and application programs report the first launch of each kernel only
    # (corpus README: features fidelity, first-launches): a later instance of a kernel
    # whose data evolve matches none, so once one instance of a kernel matched, its others
    # are not checksummed; one of each kernel's must match (`matched`, below)
    first_only = bool({"fidelity", "first-launches"} & set(program.features))
    matched: dict[str, bool] = {}
    for inst in instances:
        candidates = [L for L in seen.values() if L["kernel"] == inst.kernel.demangled_name]
        assert inst.kernel.demangled_name not in refused
        if not candidates or "graph" in program.features:
            continue  # a kernel that reports no region (device_printf's describe)
        if first_only and matched.get(inst.kernel.demangled_name):
            continue
        found = any(checksums.matches(inst, L, name not in SLOW) for L in candidates)
        matched[inst.kernel.demangled_name] = matched.get(inst.kernel.demangled_name, False) or found
        assert found or first_only, (
            f"{inst.id} ({inst.kernel.demangled_name}) matches no launch the program reported")
    assert all(matched.values()), f"kernels none of whose instances match a reported launch: {matched}"
    if "graph" in program.features:
        # Kernels inside graph launches cannot be checksummed by the program itself; the
        # launches it did report (its eager validation step) each match an instance.
        for launch in seen.values():
            mine = [i for i in instances if i.kernel.demangled_name == launch["kernel"]]
            assert any(checksums.matches(inst, launch, True) for inst in mine), launch["kernel"]
    assert [p for p in check_database(db) if p.fatal] == []
    if name == "multi_tu":
        assert refused == {"local_scale(float*, int)"}


def test_max_recordings_filter_and_formats(tmp_path):
    exe = executable("many_launches", tmp_path)
    one = tmp_path / "one.rdb"
    assert mneme_record(one, exe, "-mr", "1", "--epilogue-format", "bytes").returncode == 0
    db = Database.open(one)
    assert all(len(k.instances()) <= 1 for k in db.kernels())
    assert {i.epilogue_format for i in db.instances()} == {"bytes"}
    full = tmp_path / "full.rdb"
    assert mneme_record(full, exe, "--epilogue-format", "best").returncode == 0
    assert len(list(Database.open(full).instances())) > len(list(db.instances()))
    kernels = sorted(k.demangled_name for k in Database.open(full).kernels())
    first = kernels[0].split("(")[0].split("<")[0].split()[-1]
    filtered = tmp_path / "filtered.rdb"
    assert mneme_record(filtered, exe, "--kernel", f"^{first}").returncode == 0
    names = {k.demangled_name for k in Database.open(filtered).kernels()}
    assert names and all(n.startswith(first) or first in n for n in names)
    assert len(names) < len(kernels)


def test_rank_selection(tmp_path):
    exe = executable("atomics", tmp_path)
    rank1 = tmp_path / "rank1.rdb"
    assert mneme_record(rank1, exe, env={"OMPI_COMM_WORLD_RANK": "1"}).returncode == 0
    assert list(Database.open(rank1).instances()) == []
    everyone = tmp_path / "all.rdb"
    assert mneme_record(everyone, exe, "-rr", "all", env={"OMPI_COMM_WORLD_RANK": "1"}).returncode == 0
    assert list(Database.open(everyone).instances())


def test_crash_after_recordings_leaves_them_complete(tmp_path):
    program = PROGRAMS["crash_after_launch"]
    exe = executable("crash_after_launch", tmp_path)
    db_path = tmp_path / "crash.rdb"
    result = mneme_record(db_path, exe)
    assert result.returncode == 128 - program.expect_exit  # SIGABRT: 134, as a shell reports
    db = Database.open(db_path)
    assert len(list(db.instances())) >= 2
    assert [p for p in check_database(db) if p.fatal] == []


def test_vass_too_small_says_how_much(tmp_path):
    exe = executable("large_working_set", tmp_path)
    result = mneme_record(tmp_path / "small.rdb", exe, "-vass", "1", args=["1024"])
    assert result.returncode == 75
    assert "too small" in result.stderr and "-vass" in result.stderr


def stats_of(stderr: str) -> dict[str, float]:
    """The one statistics line `mneme record --stats` prints at exit (docs/record.md)."""
    lines = [line for line in stderr.splitlines() if line.startswith("mneme record: stats ")]
    assert len(lines) == 1, stderr
    return {k: float(v) for k, v in (kv.split("=") for kv in lines[0].split()[3:])}


def test_tiny_host_memory_cap_records_byte_exact(tmp_path):
    """A 64 MiB staging cap under 2 x 64 MiB of live memory: every snapshot streams through
    the cap (back-pressure, prologues read back from their chunk files) and still equals an
    uncapped recording byte for byte, and what the program itself computed."""
    exe = executable("large_working_set", tmp_path)
    capped, free = tmp_path / "capped.rdb", tmp_path / "free.rdb"
    result = mneme_record(capped, exe, "--host-memory", "0.0625", "--stats", args=["64"])
    assert result.returncode == 0, result.stderr
    assert checklines.result_ok(result.stdout), result.stderr
    stats = stats_of(result.stderr)
    assert stats["host_memory_bytes"] == 64 << 20
    assert 0 < stats["peak_staged_bytes"] <= 64 << 20
    reference = mneme_record(free, exe, "--stats", args=["64"])
    assert reference.returncode == 0, reference.stderr
    assert stats_of(reference.stderr)["host_memory_bytes"] > 64 << 20

    mine = {i.dynamic_hash: i for i in Database.open(capped).instances()}
    theirs = {i.dynamic_hash: i for i in Database.open(free).instances()}
    # init_hash, smooth a->b, smooth b->a (the third sweep repeats the first), bit_sums
    assert mine.keys() == theirs.keys() and len(mine) == 4
    assert stats["instances"] == stats["committed"] == 4 and stats["repeats"] == 1
    assert stats["snapshot_bytes"] == sum(2 * r.size for i in mine.values() for r in i.regions)
    assert stats["snapshot_gbs"] > 0 and stats["blocked_s"] > 0
    for dyn, inst in mine.items():
        other = theirs[dyn]
        assert [r.name for r in inst.regions] == [r.name for r in other.regions]
        for r in inst.regions:
            assert np.array_equal(inst.prologue(r.name), other.prologue(r.name)), (inst.id, r.name)
            assert np.array_equal(inst.epilogue(r.name), other.epilogue(r.name)), (inst.id, r.name)

    by_kernel = {i.kernel.demangled_name.split("(")[0]: i for i in mine.values()}
    # init_hash's epilogue of `a` (the first allocation) is the hash the kernel computes
    init = by_kernel["init_hash"]
    v = np.arange((64 << 20) // 4, dtype=np.uint32)
    v ^= v >> 16
    v *= np.uint32(0x7FEB352D)
    v ^= v >> 15
    want = (v % 1024).astype(np.float32) * np.float32(0.125)
    assert init.epilogue(init.regions[0].name).view(np.float32).tobytes() == want.tobytes()
    # bit_sums' small `sums` buffer: exactly the program's own checksums
    sums = by_kernel["bit_sums"]
    launch = next(L for L in launches(result.stdout).values() if L["kernel"].startswith("bit_sums"))
    small = next(r for r in sums.regions if r.size == launch["before"]["sums"][0])
    assert checklines.fnv1a64_hex(sums.prologue(small.name).tobytes()) == launch["before"]["sums"][1]
    assert checklines.fnv1a64_hex(sums.epilogue(small.name).tobytes()) == launch["after"]["sums"][1]
    assert [p for p in check_database(Database.open(capped)) if p.fatal] == []


def test_stats_line_without_recordings(tmp_path):
    exe = executable("atomics", tmp_path)
    result = mneme_record(tmp_path / "none.rdb", exe, "--kernel", "^no_such_kernel$", "--stats")
    assert result.returncode == 0, result.stderr
    stats = stats_of(result.stderr)
    assert stats["instances"] == 0 and stats["snapshot_bytes"] == 0
