"""Corpus programs built the way nvcc and CMake build by default, with the CUDA runtime
linked statically (`-cudart=static`: registration and launches inside the executable),
recorded as completely as their `-cudart shared` builds and replayed verified (issue 21).

On the GPU host (nvcc of the CUDA toolkit on PATH or in /usr/local/cuda), from the project root:

    source .gpu/setup.sh && source .probe/gpu_env.sh
    python3 -m pytest tests/record/test_record_static_runtime_gpu.py -m gpu -q -s
    python3 -m pytest tests/record/test_record_static_runtime_gpu.py -m gpu -q -s -k thrust_cub

The selected programs are built with nvcc here (static and shared runtime, in parallel);
each static build runs plainly and under `mneme record` (its corpus-output and MNEME-RESULT
lines must not change), `mneme ls` and `mneme check` must accept the database, every
instance must replay verified, and the instances (kernel, grid, block, shared memory,
occurrences) must be those of the shared build's recording. Printed per program: kernels,
instances, verified, origins, failures and why, and any difference from the shared build.
The CPU test at the end checks that the static builds are what they claim (no
libcudart.so, the registration code inside the executable).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from app_recording import (
    assert_recorded_and_verified,
    corpus_results,
    record_application,
    run_process_tree,
)
from mneme.replay.db import Database
from record_support import corpus_build

#: clang corpus programs nvcc builds as they are, and the nvcc-only programs (cuda/nvcc/):
#: the launch styles (<<<>>>, cudaLaunchKernel(Ex), cuLaunchKernel on a runtime kernel),
#: graphs, memory pools, globals, thrust/cub, NVRTC and the module/library loaders
STATIC_RUNTIME_PROGRAMS = [
    "atomics", "cooperative_solver", "device_globals", "driver_api", "driver_graphs", "graph_capture",
    "launch_styles", "malloc_async", "many_launches", "shared_memory", "templates",
    "atomic_relaxed", "cluster_launch", "inline_ptx", "library_load", "nvrtc_module", "rdc_two_tu",
    "thrust_cub",
]
BUILD_JOBS = 8
#: Graphs a static runtime instantiates are followed through the driver functions it takes
#: from cuGetProcAddress (graph_driver_api.cpp), so graph programs are recorded as completely.


def static_programs():
    return list(STATIC_RUNTIME_PROGRAMS)


def program_dir(name: str) -> Path:
    directory = corpus_build.CORPUS_DIR / "cuda" / name
    return directory if directory.is_dir() else corpus_build.NVCC_DIR / name


def _build(name: str, out: Path, cudart: str):
    try:
        program = corpus_build.load_program(program_dir(name))
        if "nvrtc" in program.requires and corpus_build.find_nvrtc() is None:
            return pytest.skip.Exception("no NVRTC here (include/nvrtc.h + libnvrtc); set NVRTC_ROOT")
        return corpus_build.build_nvcc_program(program.directory, out / f"{name}-{cudart}", cudart=cudart)
    except Exception as exc:  # reported by the test of this program
        return exc


def _selected_programs(request) -> list[str]:
    """The programs of this module's selected tests (after -k), so a run of one program
    builds one program."""
    names = {item.callspec.params["name"] for item in request.session.items
             if item.module is request.module and hasattr(item, "callspec")
             and "name" in item.callspec.params}
    return sorted(names) or STATIC_RUNTIME_PROGRAMS


def _static_lacks_libcudart(exe: Path) -> bool:
    from mneme.instrument.section import read_elf_section

    return b"libcudart.so" not in (read_elf_section(exe, ".dynstr") or b"")


@pytest.fixture(scope="module")
def builds(request, tmp_path_factory):
    """(name, cudart) -> BuildResult or the exception building raised."""
    try:
        corpus_build.find_nvcc()
    except corpus_build.CorpusError as exc:
        pytest.skip(str(exc))
    out = tmp_path_factory.mktemp("static-runtime")
    jobs = [(n, c) for n in _selected_programs(request) for c in ("static", "shared")]
    with ThreadPoolExecutor(BUILD_JOBS) as pool:
        results = pool.map(lambda job: _build(job[0], out, job[1]), jobs)
        return dict(zip(jobs, results, strict=True))


def built(builds, name: str, cudart: str):
    value = builds[(name, cudart)]
    if isinstance(value, pytest.skip.Exception):
        pytest.skip(str(value))
    if isinstance(value, Exception):
        pytest.fail(f"{name} ({cudart} runtime) does not build: {value}")
    return value


def instance_shapes(db_path: Path) -> Counter:
    """Launches per (kernel, grid, block, shared memory): what "recorded as completely"
    compares (argument values and snapshots may differ between two executables)."""
    shapes: Counter = Counter()
    for inst in Database.open(db_path).instances():
        key = (inst.kernel.demangled_name, tuple(inst.grid), tuple(inst.block), inst.shared_mem)
        shapes[key] += inst.occurrences
    return shapes


@pytest.fixture(scope="module")
def recording(request, tmp_path_factory):
    """name -> (static AppRecording, shared recording's database, its process)."""
    from mneme.runtime import driver_available

    if not driver_available():
        pytest.skip("no usable CUDA driver")
    builds = request.getfixturevalue("builds")  # after the driver check: no builds for nothing
    cache = {}

    def get(name: str):
        if name not in cache:
            static, shared = built(builds, name, "static"), built(builds, name, "shared")
            args = list(static.program.args)
            out = tmp_path_factory.mktemp(name)
            app = record_application(f"{name} (static runtime)", [str(static.executable), *args],
                                     out / "static.rdb", results=corpus_results)
            shared_db = out / "shared.rdb"
            shared_run, _ = run_process_tree(
                [*_mneme_record(shared_db), "--", str(shared.executable), *args], dict(os.environ), 420)
            report = app.report()
            if shared_run.returncode == 0 and app.outcomes:
                ours, theirs = instance_shapes(app.db), instance_shapes(shared_db)
                for key in sorted(set(ours) | set(theirs), key=str):
                    if ours[key] != theirs[key]:
                        report += (f"\n   differs from the shared build: {key[0][:80]} grid {key[1]} "
                                   f"block {key[2]} smem {key[3]}: static {ours[key]}, shared {theirs[key]}")
            print("\n" + report, flush=True)
            cache[name] = (app, shared_db, shared_run)
        return cache[name]

    return get


def _mneme_record(db: Path) -> list[str]:
    return [sys.executable, "-m", "mneme.cli", "record", "-rdb", str(db)]


@pytest.mark.gpu
@pytest.mark.parametrize("name", static_programs())
def test_static_runtime_build_records_and_replays_verified(recording, name):
    app, _, _ = recording(name)
    assert _static_lacks_libcudart(Path(app.plain.args[0]))
    assert_recorded_and_verified(app)


@pytest.mark.gpu
@pytest.mark.parametrize("name", static_programs())
def test_static_runtime_build_records_what_the_shared_build_records(recording, name):
    app, shared_db, shared_run = recording(name)
    assert shared_run.returncode == 0, shared_run.stderr[-2000:]
    assert app.recorded.returncode == 0, app.recorded.stderr[-2000:]
    theirs = instance_shapes(shared_db)
    assert theirs, "the shared build recorded nothing"
    assert instance_shapes(app.db) == theirs


@pytest.mark.gpu
def test_cluster_launches_record_their_cluster_shape(recording):
    """cudaLaunchKernelEx and cuLaunchKernelEx (taken as an entry point) in clusters of 2,
    16 (non-portable) and 4 blocks, and a captured graph's clustered kernel node: each
    instance keeps its cluster shape, and replays verified in it (the kernels exchange
    data through distributed shared memory, so a launch without clusters differs)."""
    app, _, _ = recording("cluster_launch")
    clusters = Counter()
    for inst in Database.open(app.db).instances():
        clusters[(inst.kernel.demangled_name.split("(")[0], inst.cluster)] += inst.occurrences
    assert clusters == {("cluster_block_sums", (2, 1, 1)): 1, ("cluster_block_sums", (16, 1, 1)): 1,
                        ("cluster_neighbors", (4, 1, 1)): 1, ("cluster_neighbors", (2, 1, 1)): 3}
    assert_recorded_and_verified(app)


@pytest.mark.gpu
def test_cooperative_launches_record_as_cooperative(recording):
    """cudaLaunchCooperativeKernel and cudaLaunchKernelEx with the cooperative attribute,
    which the static runtime makes through the driver functions it takes from
    cuGetProcAddress (cuLaunchCooperativeKernel, cuLaunchKernelEx): every instance is marked
    cooperative and replays verified in a cooperative launch (issue 35)."""
    app, _, _ = recording("cooperative_solver")
    instances = list(Database.open(app.db).instances())
    assert {i.kernel.demangled_name.split("(")[0] for i in instances} == {"jacobi_solve", "power_iteration"}
    assert all(i.cooperative for i in instances), [(i.id, i.cooperative) for i in instances]
    assert_recorded_and_verified(app)


# ------------------------------------------------------------------ CPU


@pytest.mark.parametrize("name", ["atomics", "launch_styles", "inline_ptx"])
def test_static_builds_carry_the_runtime_and_the_same_kernels(tmp_path, name):
    """What the GPU tests record is nvcc's default build: libcudart.so is not needed, the
    registration code is inside the executable, and the fatbinary holds the kernels of the
    shared build."""
    from mneme.instrument.fatbin import fatbin_kernels, read_fatbin

    try:
        corpus_build.find_nvcc()
    except corpus_build.CorpusError as exc:
        pytest.skip(str(exc))
    static = corpus_build.build_nvcc_program(program_dir(name), tmp_path / "static", cudart="static")
    shared = corpus_build.build_nvcc_program(program_dir(name), tmp_path / "shared", cudart="shared")
    assert _static_lacks_libcudart(static.executable)
    assert not _static_lacks_libcudart(shared.executable)
    defined = subprocess.run(["nm", "--defined-only", str(static.executable)], capture_output=True,
                             text=True, check=True).stdout
    assert " __cudaRegisterFatBinary" in defined

    def kernels(exe):
        return sorted({k.demangled for k in fatbin_kernels(read_fatbin(exe))})

    assert kernels(static.executable) == kernels(shared.executable)
    assert set(static.program.kernels) <= set(kernels(static.executable))
