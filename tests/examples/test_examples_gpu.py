"""Run, record and replay the examples on a real GPU.

Each program checks its own result and prints MNEME-CHECK lines around every launch; every
recorded instance must match one of those launches, replay bit-exact under default<O3>, and
still verify when replayed with another block shape and a grid covering the same work.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter

import pytest
from examples_support import (
    KERNELS,
    MAX_LAUNCHES,
    POINTER_REGIONS,
    PROGRAMS,
    ChecksumCache,
    checklines,
    launches,
    mneme_record,
)
from mneme.replay.db import Database
from mneme.replay.db.integrity import check_database
from mneme.replay.engine import ReplayConfig, ReplaySession, replay
from mneme.replay.jit import CompileConfig
from mneme.runtime import driver_available

pytestmark = pytest.mark.gpu
O3 = CompileConfig.for_level("O3", arch="sm_90")
ONCE = {"iterations": 1, "warmup": 0}


@pytest.fixture(scope="module", autouse=True)
def _gpu():
    if not driver_available():
        pytest.skip("no usable CUDA driver")


def run(exe, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)


def data_checksums(stdout: str) -> list:
    """Every checksum line except those of regions holding device pointers."""
    return [
        (c.launch, c.kernel, c.phase, c.label, c.size, c.checksum)
        for c in checklines.parse_output(stdout)
        if c.label not in POINTER_REGIONS
    ]


@pytest.fixture(scope="module")
def recordings(examples, tmp_path_factory):
    """name -> (database path, the recorded run's CompletedProcess)."""
    out = {}
    for name in PROGRAMS:
        db = tmp_path_factory.mktemp(f"rec-{name}") / f"{name}.rdb"
        out[name] = (db, mneme_record(db, examples[name], args=[]))
    return out


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_runs_and_reports_every_launch(examples, name):
    proc = run(examples[name])
    assert proc.returncode == 0, proc.stderr
    assert checklines.result_ok(proc.stdout)
    seen = launches(proc.stdout)
    assert sorted(seen) == list(range(len(seen))), "launch indices count from 0 without gaps"
    assert len(seen) <= MAX_LAUNCHES
    for index, launch in seen.items():
        assert [r[:2] for r in launch["before"]] == [r[:2] for r in launch["after"]], index
    assert {launch["kernel"] for launch in seen.values()} == set(KERNELS[name])
    if name == "cg_solver":
        assert "converged in" in proc.stdout


def test_cg_solver_is_bit_identical_for_any_block_size(examples):
    """Deterministic reductions: every data checksum of every launch is the same whatever
    the block size (only the grid-covering shapes differ)."""
    reference = run(examples["cg_solver"])
    assert reference.returncode == 0, reference.stderr
    for block in ("64", "96", "1024", "1"):
        proc = run(examples["cg_solver"], "--block", block)
        assert proc.returncode == 0, proc.stderr
        assert data_checksums(proc.stdout) == data_checksums(reference.stdout), block


def test_stencil_is_bit_identical_for_any_block_shape(examples):
    reference = run(examples["stencil"])
    assert reference.returncode == 0, reference.stderr
    for block in ("16x16", "128", "8x4x2", "1", "1024"):
        proc = run(examples["stencil"], "--block", block)
        assert proc.returncode == 0, proc.stderr  # both kernels equal the host reference
        assert data_checksums(proc.stdout) == data_checksums(reference.stdout), block


def test_cg_solver_reports_non_convergence(examples):
    proc = run(examples["cg_solver"], "--iters", "3")
    assert proc.returncode == 2
    assert "MNEME-RESULT fail" in proc.stderr and "did not converge" in proc.stderr


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_instance_matches_what_the_program_saw(recordings, name):
    db_path, proc = recordings[name]
    assert proc.returncode == 0, proc.stderr
    assert checklines.result_ok(proc.stdout), proc.stderr  # output passes through
    seen = launches(proc.stdout)
    db = Database.open(db_path)
    instances = list(db.instances())
    assert {i.kernel.demangled_name for i in instances} == set(KERNELS[name])
    # a launch repeating an earlier one's shape and arguments is counted, not re-recorded:
    # the device-resident scalars keep the arguments of every iteration the same
    assert len(instances) <= 4 * len(KERNELS[name])
    cache = ChecksumCache()
    for inst in instances:
        candidates = [L for L in seen.values() if L["kernel"] == inst.kernel.demangled_name]
        assert any(cache.matches(inst, L) for L in candidates), (
            f"{inst.id} ({inst.kernel.demangled_name}) matches no launch the program reported"
        )
    assert sum(i.occurrences for i in instances) == len(seen)
    assert [p for p in check_database(db) if p.fatal] == []


@pytest.mark.parametrize("name", PROGRAMS)
def test_every_instance_replays_bit_exact(recordings, name):
    db_path, proc = recordings[name]
    assert proc.returncode == 0, proc.stderr
    failures = []
    for inst in Database.open(db_path).instances():
        result = replay(inst, O3, ReplayConfig(**ONCE))
        if result.verified is not True:
            failures.append(
                f"{inst.id} {inst.kernel.demangled_name}: "
                + "; ".join(str(m.to_dict()) for m in result.mismatches[:2])
            )
    assert failures == []


def covering(inst, block: tuple[int, int, int]) -> tuple[int, int, int]:
    """A grid of `block`s covering at least the threads of the recorded launch, per dimension."""
    return tuple(
        math.ceil(g * b / nb) for g, b, nb in zip(inst.grid, inst.block, block, strict=True)
    )


def first_instance(db_path, kernel: str):
    instances = [
        i
        for i in Database.open(db_path).instances()
        if i.kernel.demangled_name.startswith(kernel + "(")
    ]
    assert instances, f"{kernel} was not recorded"
    return instances[0]


# (program, kernel, block, grid: "covering" the recorded work or "same" as recorded)
SHAPES = [
    ("cg_solver", "cg_update_p", (64, 1, 1), "covering"),
    ("cg_solver", "cg_update_p", (1024, 1, 1), "covering"),
    ("cg_solver", "cg_update_xr", (96, 1, 1), "covering"),
    ("cg_solver", "spmv_csr", (32, 2, 1), "covering"),
    ("cg_solver", "dot_partial", (64, 1, 1), "same"),
    ("cg_solver", "dot_partial", (1000, 1, 1), "same"),
    ("cg_solver", "cg_reduce", (32, 1, 1), "same"),
    ("stencil", "heat_naive", (16, 16, 1), "covering"),
    ("stencil", "heat_naive", (128, 1, 1), "covering"),
    ("stencil", "heat_tiled", (128, 1, 1), "same"),
    ("stencil", "heat_tiled", (8, 8, 2), "same"),
]


@pytest.mark.parametrize(
    ("name", "kernel", "block", "grid"),
    SHAPES,
    ids=[f"{k}-{'x'.join(map(str, b))}" for _, k, b, _ in SHAPES],
)
def test_replay_with_another_block_shape_verifies(recordings, name, kernel, block, grid):
    inst = first_instance(recordings[name][0], kernel)
    new_grid = covering(inst, block) if grid == "covering" else tuple(inst.grid)
    with ReplaySession(inst) as session:
        result = session.run(O3, ReplayConfig(block=block, grid=new_grid, **ONCE))
    assert result.launch["block"] == list(block) and result.launch["grid"] == list(new_grid)
    assert result.verified is True, result.summary()


def test_replay_of_a_grid_that_covers_too_little_is_caught(recordings):
    """The control for the test above: a grid too small for heat_naive leaves cells unwritten."""
    inst = first_instance(recordings["stencil"][0], "heat_naive")
    with ReplaySession(inst) as session:
        result = session.run(O3, ReplayConfig(block=(16, 16, 1), grid=(1, 1, 1), **ONCE))
    assert result.verified is False and result.mismatches


def test_mneme_replay_command_with_another_block_size(recordings):
    inst = first_instance(recordings["cg_solver"][0], "cg_update_p")
    grid = covering(inst, (128, 1, 1))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mneme.cli",
            "replay",
            "-rdb",
            str(recordings["cg_solver"][0]),
            "-rid",
            inst.id,
            "--block-dim-x",
            "128",
            "--grid-dim-x",
            str(grid[0]),
            "--iterations",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verified"] is True and result["launch"]["block"] == [128, 1, 1]


def test_recorded_kernels_and_occurrences(recordings):
    """What a default cg_solver recording holds: a handful of instances, each kernel's
    repeats counted as occurrences (so the database stays small enough to ship)."""
    db_path, _ = recordings["cg_solver"]
    per_kernel = Counter(
        i.kernel.demangled_name.split("(")[0] for i in Database.open(db_path).instances()
    )
    assert per_kernel["cg_init"] == 1 and per_kernel["cg_update_p"] == 1
    assert per_kernel["cg_update_xr"] == 1
    assert per_kernel["spmv_csr"] == 2  # A x0, then A p every iteration
    assert per_kernel["dot_partial"] == 2  # r.r and p.Ap
    assert per_kernel["cg_reduce"] == 3  # one per ReduceOp
