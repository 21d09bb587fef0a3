"""Applications built with nvcc, not rebuilt: recorded with the fatbinary each kernel was
registered from, replayed from its PTX (through ptxas) or its cubin.

CPU: what `mneme record` accepts or refuses before anything runs, and a database whose
kernels hold a real nvcc fatbinary (reader, check, compile-only analysis of the PTX).
GPU: nvcc builds of corpus programs record without changing what they compute, every
instance replays and verifies from PTX and from cubin, and the instances equal those of the
same program built with mneme-clang++. thrust/cub's kernels are recorded like the
program's own; modules loaded from memory or files through the driver or the runtime are
recorded with their code and their device globals.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mneme.replay.db import (
    Database,
    DatabaseWriter,
    InstanceRecord,
    KernelRecord,
    RecordingInfo,
    Region,
)
from mneme.replay.db.errors import NotFoundError
from mneme.replay.db.integrity import check_database
from mneme.replay.engine import ReplayConfig, ReplaySession
from mneme.replay.jit import CompileConfig, JitConfigError
from record_support import corpus_build, executable, mneme_record

SOURCE = Path(__file__).resolve().parents[1] / "instrument" / "sources" / "fatbin_kernels.cu"
#: clang corpus programs that nvcc builds as they are (no clang-only flags)
NVCC_BUILT = ["atomics", "many_launches", "graph_capture", "stream_compaction", "templates",
              "device_globals", "shared_memory"]
#: whose memory before a launch depends on the order atomics ran in earlier launches
ORDER_DEPENDENT = {"stream_compaction"}
#: the nvcc-only corpus programs (tests/corpus/cuda/nvcc)
NVCC_ONLY = ["atomic_relaxed", "inline_ptx", "rdc_two_tu", "nvrtc_module", "thrust_cub",
             "library_load"]


def nvcc() -> str:
    found = shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if found is None:
        pytest.skip("nvcc not installed")
    return found


def nvcc_build(name: str, out: Path, cudart: str = "shared") -> Path:
    directory = corpus_build.CORPUS_DIR / "cuda" / name
    if not directory.is_dir():
        directory = corpus_build.NVCC_DIR / name
    nvcc()
    return corpus_build.build_nvcc_program(directory, out / f"{name}-nvcc-{cudart}", cudart=cudart).executable


def run_record(db: Path, exe: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mneme.cli", "record", "-rdb", str(db), "--", str(exe)],
                          capture_output=True, text=True, timeout=600)


def own_results(stdout: str) -> list[str]:
    """What a program computed, in a form that does not depend on scheduling or addresses."""
    return [line for line in stdout.splitlines() if line.startswith(("corpus-output", "MNEME-RESULT"))]


# ------------------------------------------------------------------ CPU


def test_static_cudart_build_is_accepted(tmp_path):
    """nvcc's default static runtime is recorded through the driver entry points it takes
    (entry_points.cpp); without a GPU the application stops at its first CUDA call."""
    exe = nvcc_build("atomics", tmp_path, cudart="static")
    result = run_record(tmp_path / "db", exe)
    assert "statically" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert "learned as the process registers or loads them" in result.stderr


def test_shared_cudart_build_is_accepted(tmp_path):
    exe = nvcc_build("atomics", tmp_path)
    result = run_record(tmp_path / "db", exe)
    assert "learned as the process registers or loads them" in result.stderr, result.stderr
    # without a GPU the application itself stops at its first CUDA call, exit 1


@pytest.fixture(scope="module")
def fatbin(tmp_path_factory) -> bytes:
    out = tmp_path_factory.mktemp("fatbin") / "k.fatbin"
    subprocess.run([nvcc(), "-arch=sm_90", "-fatbin", str(SOURCE), "-o", str(out)], check=True)
    return out.read_bytes()


def fatbin_database(db_path: Path, fatbin: bytes) -> Path:
    """A database with one kernel of ``fatbin`` stored as an nvcc recording stores it."""
    from mneme.instrument.fatbin import fatbin_kernels, parse_fatbin

    kernels = fatbin_kernels(parse_fatbin(fatbin))
    writer = DatabaseWriter.create(db_path, RecordingInfo(vas_base=0x7f0000000000, vas_size=1 << 30,
                                                          compute_capability="9.0"))
    writer.add_kernel(KernelRecord("00000000000000aa", kernels[0].name, fatbin,
                                   demangled_name=kernels[0].demangled, code="cuda-fatbin"))
    region = Region("heap", 0x7f0000000000, np.zeros(256, np.uint8))
    writer.add_instance("00000000000000aa", InstanceRecord((1, 1, 1), (32, 1, 1), b"\0" * 8,
                                                           (region,), (region,)))
    return db_path


def test_a_kernel_stored_with_its_fatbinary(tmp_path, fatbin):
    db_path = fatbin_database(tmp_path / "nvcc.rdb", fatbin)
    db = Database.open(db_path)
    kernel = db.kernels()[0]
    assert kernel.code == "cuda-fatbin" and not kernel.has_ir
    assert kernel.code_kinds == ["cubin", "ptx"]
    assert kernel.code_bytes() == fatbin
    with pytest.raises(NotFoundError, match="nvcc build"):
        kernel.ir()
    assert [p for p in check_database(db) if p.fatal] == []
    inst = kernel.instances()[0]
    # compile-only analysis from the PTX (ptxas options apply), and from the cubin as is
    with ReplaySession(inst, gpu=False) as session:
        result = session.run(CompileConfig(max_registers=32), ReplayConfig(compile_only=True))
        assert result.compile_only and result.registers and result.binary_size
        with pytest.raises(JitConfigError, match="LLVM IR"):
            session.run(CompileConfig(pipeline="default<O1>"), ReplayConfig(compile_only=True))
    with ReplaySession(inst, gpu=False, code="cubin") as session:
        result = session.run(CompileConfig(arch="sm_90"), ReplayConfig(compile_only=True))
        image = next(e for e in kernel.code_images() if e.kind == "cubin")
        assert result.binary_size == len(image.data)
        with pytest.raises(JitConfigError, match="launch overrides only"):
            session.run(CompileConfig(arch="sm_90", max_registers=32), ReplayConfig(compile_only=True))


# ------------------------------------------------------------------ GPU


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """name -> (database, plain run, recorded run) of the program's nvcc build, once per module."""
    from mneme.runtime import driver_available

    if not driver_available():
        pytest.skip("no usable CUDA driver")
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            out = tmp_path_factory.mktemp(name)
            exe = nvcc_build(name, out)
            plain = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
            cache[name] = (out / "nvcc.rdb", plain, run_record(out / "nvcc.rdb", exe))
        return cache[name]

    return get


@pytest.mark.gpu
@pytest.mark.parametrize("name", NVCC_BUILT + NVCC_ONLY)
def test_nvcc_build_records_and_replays_from_ptx_and_cubin(recorded, tmp_path, name):
    db_path, plain, result = recorded(name)
    assert result.returncode == plain.returncode == 0, result.stderr
    # the program computes the same under record
    assert own_results(result.stdout) == own_results(plain.stdout), result.stderr
    if name in NVCC_ONLY:  # no graphs: every launch is seen
        assert "runs unrecorded" not in result.stderr, result.stderr
    instances = list(Database.open(db_path).instances())
    assert instances, result.stderr
    failures = []
    for inst in instances:
        kinds = inst.kernel.code_kinds
        # nvcc -arch=sm_90 embeds PTX and cubin; -rdc=true links cubins only; NVRTC
        # output loaded with cuModuleLoadData is PTX
        assert inst.kernel.code in ("cuda-fatbin", "ptx", "cubin") and kinds
        for code in kinds:
            with ReplaySession(inst, code=code) as session:
                r = session.run(CompileConfig(), ReplayConfig(iterations=2))
                if r.verified is not True:
                    failures.append(f"{inst.kernel.demangled_name[:120]} {inst.id} {code}: "
                                    f"{[m.describe() for m in r.mismatches[:2]]}")
    assert failures == []
    if name == "nvrtc_module":  # the kernels compiled at run time are recorded too
        codes = {i.kernel.demangled_name: i.kernel.code for i in instances}
        assert codes.get("square_in_place") == "ptx", codes
    if name not in NVCC_BUILT or name in ORDER_DEPENDENT:
        return
    # the same program built with mneme-clang++: the same instances, the same memory
    clang_db = tmp_path / "clang.rdb"
    assert mneme_record(clang_db, executable(name, tmp_path)).returncode == 0

    def key(i):
        return (i.kernel.demangled_name, tuple(i.grid), tuple(i.block), i.shared_mem, bytes(i.args))

    theirs = {key(i): i for i in Database.open(clang_db).instances()}
    compared = 0
    for inst in instances:
        other = theirs.get(key(inst))
        if other is None:
            continue
        heap = [r for r in inst.regions if r.kind == "heap"]  # globals: where each module is
        assert [r.address for r in heap] == [r.address for r in other.regions if r.kind == "heap"]
        for r in heap:
            assert np.array_equal(inst.prologue(r.name), other.prologue(r.name)), (inst.id, r.name)
        compared += 1
    assert compared, "no instance of the nvcc build matched one of the clang build"


@pytest.mark.gpu
def test_thrust_and_cub_kernels_are_recorded(recorded):
    """thrust_cub: the library's kernels (launched through triple-chevron stubs and
    cudaLaunchKernelEx after CUB's dispatch queries) are recorded beside the program's own,
    with their fatbinary; the replay of every one is checked above."""
    db_path, _, result = recorded("thrust_cub")
    assert result.returncode == 0, result.stderr
    kernels = {i.kernel.demangled_name: i.kernel for i in Database.open(db_path).instances()}
    assert {"make_keys(unsigned int*, int*, int, unsigned int)",
            "check_sorted(unsigned int const*, int const*, int, unsigned long long*)"} <= set(kernels)
    library = {name: k for name, k in kernels.items() if name.startswith("void cub::")}
    for algorithm in ("::DeviceRadixSort", "::DeviceReduce", "::DeviceScanKernel<",
                      "::DeviceSelectSweepKernel<", "::for_each::static_kernel<"):
        assert any(algorithm in name for name in library), (algorithm, sorted(kernels))
    assert all(k.code == "cuda-fatbin" and k.code_kinds == ["cubin", "ptx"] for k in library.values())
    assert max(len(k.name) for k in library.values()) > 200


@pytest.mark.gpu
def test_modules_loaded_every_way_are_recorded_with_their_globals(recorded):
    """library_load: one kernel name in two codes (PTX through cuModuleLoadData and
    cudaLibraryLoadData; a cubin file through cuModuleLoad, cuLibraryLoadFromFile and
    cudaLibraryLoadFromFile), launched through cuLaunchKernel (CUfunction and CUkernel),
    cudaLaunchKernel and cudaLaunchKernelExC. Each instance holds its own module's globals:
    the table the program set through the global lookups, and the counter only the
    kernels touch (found in the image)."""
    db_path, _, result = recorded("library_load")
    assert result.returncode == 0, result.stderr
    lookups = [i for i in Database.open(db_path).instances() if i.kernel.demangled_name == "lookup"]
    assert len(lookups) == 6, [i.id for i in lookups]  # module A twice, B, C, D, E
    assert sorted(i.kernel.code for i in lookups) == ["cubin"] * 3 + ["ptx"] * 3
    assert len({i.kernel.static_hash for i in lookups}) == 2  # per code, not per name

    def global_value(inst, symbol):
        region = next(r for r in inst.regions if r.kind == "global" and r.symbol == symbol)
        return bytes(np.asarray(inst.prologue(region.name)).view(np.uint8))

    tables = {global_value(i, "table") for i in lookups}
    assert len(tables) == 5  # each module's own
    counters = sorted(int.from_bytes(global_value(i, "launches"), "little")
                      for i in lookups if i.kernel.code == "ptx")
    assert counters == [0, 0, 1]  # A's second launch starts after A's first


def test_tuning_an_nvcc_kernel_over_ptxas_options(tmp_path, fatbin):
    """Compile-only tuning of a kernel recorded from an nvcc build: launch bounds and
    register caps (ptxas options) work; spaces that need LLVM IR are refused in one line."""
    from mneme.tune import TuneError, TuneOptions, Tuner

    db_path = fatbin_database(tmp_path / "nvcc.rdb", fatbin)
    inst = next(Database.open(db_path).instances())
    options = TuneOptions(trials=12, devices=None, objectives=["registers"],
                          storage=f"sqlite:///{tmp_path / 't.db'}", seed=1)
    outcome = Tuner(db_path, [inst.id], "bounds", options).run()
    complete = [t for t in outcome.trials if t.state == "complete"]
    assert complete and {t.params["max_registers"] for t in complete} - {0}
    with pytest.raises(TuneError, match="nvcc build.*need its IR"):
        Tuner(db_path, [inst.id], "pipeline", options)
