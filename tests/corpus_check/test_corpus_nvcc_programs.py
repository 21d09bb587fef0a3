"""The nvcc-only corpus programs (tests/corpus/cuda/nvcc/): they build with nvcc, `mneme
inspect` lists their kernels from the fatbinary, and their PTX compiles under
compile-only analysis with the register counts nvcc's own SASS has. On a GPU host they
run and report every launch.

A manifest's optional "library_kernels" lists name prefixes (after "void ") of kernels
that header libraries (thrust, cub) instantiate in the program: the fatbinary holds them
beside the manifest's kernels, the program does not report their launches, and their
names depend on the CCCL version, so only the prefixes are fixed."""

import json
import re
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from corpus_linking import build_nvcc_corpus_program
from corpus_support import MAX_JOBS, checklines, corpus_build, gpu_available
from mneme.instrument.fatbin import read_fatbin
from mneme.replay.jit import CompileConfig, compile_ptx

NVCC_PROGRAMS = corpus_build.discover_nvcc_programs()
MNEME = str(Path(sys.executable).parent / "mneme")


def _outcome(program, out: Path, cuda_root: Path):
    if "nvrtc" in program.requires and corpus_build.find_nvrtc(cuda_root) is None:
        return pytest.skip.Exception("no NVRTC here (include/nvrtc.h + libnvrtc); set NVRTC_ROOT")
    try:
        return build_nvcc_corpus_program(program, out / program.name, cuda_root=cuda_root)
    except Exception as exc:  # reported by the test that looks at this program
        return exc


@pytest.fixture(scope="module")
def nvcc_builds(tmp_path_factory):
    try:
        cuda_root = corpus_build.find_cuda_root()
        corpus_build.find_nvcc(cuda_root)
    except corpus_build.CorpusError as exc:
        pytest.skip(str(exc))
    out = tmp_path_factory.mktemp("nvcc-corpus")
    with ThreadPoolExecutor(MAX_JOBS) as pool:
        results = pool.map(lambda p: _outcome(p, out, cuda_root), NVCC_PROGRAMS)
        return {p.name: r for p, r in zip(NVCC_PROGRAMS, results, strict=True)}


def built(nvcc_builds, program):
    value = nvcc_builds[program.name]
    if isinstance(value, pytest.skip.Exception):
        pytest.skip(str(value))
    if isinstance(value, Exception):
        pytest.fail(str(value))
    return value


def library_prefixes(program) -> tuple[str, ...]:
    manifest = json.loads((program.directory / "program.json").read_text())
    return tuple(manifest.get("library_kernels", ()))


def is_library_kernel(program, demangled: str) -> bool:
    prefixes = library_prefixes(program)
    return bool(prefixes) and demangled.removeprefix("void ").startswith(prefixes)


def test_the_nvcc_programs_cover_issue_12():
    names = {p.name for p in NVCC_PROGRAMS}
    assert {"atomic_relaxed", "inline_ptx", "nvrtc_module", "rdc_two_tu", "thrust_cub",
            "library_load"} <= names
    features = {f for p in NVCC_PROGRAMS for f in p.features}
    assert {"nv-atomic-relaxed", "inline-ptx", "nvrtc", "rdc", "thrust", "cub",
            "runtime-library", "module-file-load", "module-globals"} <= features
    # kept out of the clang corpus that every other suite builds
    assert not names & {p.name for p in corpus_build.discover_programs("cuda")}
    assert all(p.compiler == "nvcc" and p.language == "cuda" for p in NVCC_PROGRAMS)


@pytest.mark.parametrize("program", NVCC_PROGRAMS, ids=lambda p: p.name)
def test_manifest_names_every_launch(program):
    """Every kernel of the manifest is reported by a corpus::Launch, and only those."""
    text = "\n".join((program.directory / s).read_text() for s in program.sources)
    launched = set(re.findall(r'corpus::Launch \w+\(\s*"([^"]+)"', text))
    assert launched == set(program.kernels)
    assert set(program.runtime_kernels) <= set(program.kernels)
    assert list(program.kernels) == sorted(set(program.kernels))


@pytest.mark.parametrize("program", NVCC_PROGRAMS, ids=lambda p: p.name)
def test_inspect_lists_the_fatbinary_kernels(nvcc_builds, program):
    result = built(nvcc_builds, program)
    proc = subprocess.run([MNEME, "inspect", str(result.executable), "--json"],
                          capture_output=True, text=True, check=True)
    data = json.loads(proc.stdout)
    assert data["source"] == "fatbinary"
    static = set(program.kernels) - set(program.runtime_kernels)
    listed = {k["demangled"] for k in data["kernels"]}
    library = {name for name in listed - static if is_library_kernel(program, name)}
    assert listed - library == static
    if library_prefixes(program):
        # thrust and cub instantiate dozens of templates with mangled names of hundreds of
        # characters: every one is listed, demangled
        assert len(library) >= 10, sorted(listed)
        assert max(len(k["name"]) for k in data["kernels"]) > 200
        assert all(k["name"].startswith("_Z") for k in data["kernels"] if k["demangled"] in library)
    for kernel in data["kernels"]:
        kinds = {(c["kind"], c["arch"]) for c in kernel["code"]}
        assert ("sass", "sm_90") in kinds
        # nvcc's device link (-rdc=true) keeps SASS only; whole-program builds embed PTX
        assert (("ptx", "compute_90") in kinds) == (not program.flags.count("-rdc=true"))
    text = subprocess.run([MNEME, "inspect", str(result.executable)], capture_output=True,
                          text=True, check=True).stdout
    for name in static:
        assert f"\n{name}\n" in text


def _ptx_sources(result, program):
    """Fatbinaries holding the program's PTX: the executable, or for -rdc=true builds the
    objects (their __nv_relfatbin)."""
    if "-rdc=true" in program.flags:
        return result.objects
    return [result.executable]


@pytest.mark.parametrize("program", NVCC_PROGRAMS, ids=lambda p: p.name)
def test_compile_only_analysis_of_their_ptx(nvcc_builds, program):
    result = built(nvcc_builds, program)
    analysed = set()
    for path in _ptx_sources(result, program):
        entries = read_fatbin(path)
        sass = {k.name: k for e in entries if e.kind == "cubin" for k in e.kernels}
        for entry in (e for e in entries if e.kind == "ptx"):
            for kernel in entry.kernels:
                if is_library_kernel(program, kernel.demangled):
                    # dozens of them: the ptxas comparison only (what tuning relies on)
                    nvcc_like = compile_ptx(entry.text(), CompileConfig(), kernel.name,
                                            assembler="ptxas")
                    assert nvcc_like.metrics.registers == sass[kernel.name].registers, kernel.name
                    continue
                # the ptxas executable compiles as nvcc did: the same registers as nvcc's SASS
                nvcc_like = compile_ptx(entry.text(), CompileConfig(), kernel.name,
                                        assembler="ptxas")
                assert nvcc_like.metrics.registers == sass[kernel.name].registers, kernel.name
                default = compile_ptx(entry.text(), CompileConfig(), kernel.name)
                assert default.metrics.registers > 0 and default.binary[:4] == b"\x7fELF"
                capped = compile_ptx(entry.text(), CompileConfig(max_threads=1024,
                                                                 min_blocks=2,
                                                                 max_registers=24),
                                     kernel.name)
                assert capped.metrics.registers <= 24
                analysed.add(kernel.demangled)
    assert analysed == set(program.kernels) - set(program.runtime_kernels)


@pytest.mark.parametrize("program", NVCC_PROGRAMS, ids=lambda p: p.name)
def test_fails_cleanly_without_gpu(nvcc_builds, program):
    if gpu_available():
        pytest.skip("a GPU is present")
    if "-lcuda" in program.link_flags:
        pytest.skip("links libcuda.so.1, which only a driver installs")
    proc = subprocess.run([str(built(nvcc_builds, program).executable), *program.args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("corpus: ") and "failed" in lines[0]
    assert "MNEME-CHECK" not in proc.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("program", NVCC_PROGRAMS, ids=lambda p: p.name)
def test_runs_on_a_gpu_and_reports_every_launch(nvcc_builds, program):
    if not gpu_available():
        pytest.skip("no CUDA driver or GPU on this machine")
    result = built(nvcc_builds, program)
    proc = subprocess.run([str(result.executable), *program.args], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == program.expect_exit, proc.stderr
    assert checklines.result_ok(proc.stdout), proc.stderr
    checks = checklines.parse_output(proc.stdout)
    launches = defaultdict(lambda: {"before": [], "after": []})
    for c in checks:
        assert c.kernel in program.kernels
        launches[c.launch][c.phase].append((c.kernel, c.label, c.size))
    assert sorted(launches) == list(range(len(launches)))
    for phases in launches.values():
        assert phases["before"] == phases["after"]
    assert {c.kernel for c in checks} == set(program.kernels)
