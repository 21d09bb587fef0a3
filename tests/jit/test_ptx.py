"""Compile-only analysis of PTX kernels (no IR): PTX from nvcc, assembled for real."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from jit_support import KERNELS_DIR
from mneme.replay.jit import (
    CompileCache,
    CompileConfig,
    JitConfigError,
    PtxasError,
    SpecializationError,
    compile_ptx,
    parse_ptxas_report,
    ptx_kernel_names,
    set_ptx_launch_bounds,
)
from mneme.replay.jit.toolchain import find_ptxas

SOURCES = ["saxpy", "loops", "math", "structs"]


def nvcc_ptx(source: Path, out: Path, *flags: str) -> str:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("nvcc not installed")
    subprocess.run([nvcc, "-arch=sm_90", "-ptx", *flags, str(source), "-o", str(out)],
                   check=True, capture_output=True)
    return out.read_text()


@pytest.fixture(scope="module")
def nvcc_modules(tmp_path_factory):
    """source name -> PTX nvcc made of tests/jit/kernels/<name>.cu."""
    out = tmp_path_factory.mktemp("nvcc-ptx")
    return {name: nvcc_ptx(KERNELS_DIR / f"{name}.cu", out / f"{name}.ptx") for name in SOURCES}


def ptxas_report(ptx: str, tmp_path: Path, *args: str) -> dict:
    """What the ptxas executable reports for the unchanged module (the reference)."""
    source = tmp_path / "module.ptx"
    source.write_text(ptx)
    done = subprocess.run([str(find_ptxas()), "-arch=sm_90", "-v", *args, str(source), "-o",
                           str(tmp_path / "module.cubin")], capture_output=True, text=True,
                          check=True)
    return parse_ptxas_report(done.stdout + done.stderr)


def entry_symbols(cubin: bytes) -> set[str]:
    return {s.decode() for s in re.findall(rb"\.text\.([\w$.]+)\x00", cubin)}


def test_every_kernel_of_nvccs_ptx(nvcc_modules, tmp_path):
    for name, ptx in nvcc_modules.items():
        kernels = ptx_kernel_names(ptx)
        assert kernels, name
        reference = ptxas_report(ptx, tmp_path)
        for kernel in kernels:
            result = compile_ptx(ptx, CompileConfig(), kernel)
            assert result.kernel == kernel and result.binary[:4] == b"\x7fELF"
            # one kernel per cubin, as the IR path gives
            assert entry_symbols(result.binary) == {kernel}
            assert ptx_kernel_names(result.ptx) == [kernel]
            got, want = result.metrics, reference[kernel]
            assert got.binary_size == len(result.binary)
            assert got.shared_bytes == want.shared_bytes and got.barriers == want.barriers
            if name != "math":  # see docs/jit.md: relocatable vs whole-program code
                assert got.registers == want.registers, kernel
                assert got.stack_frame_bytes == want.stack_frame_bytes, kernel
            assert set(result.timings) == {"prepare", "ptxas", "total"}


def test_launch_bounds_become_directives_of_the_entry(nvcc_modules):
    ptx = nvcc_modules["structs"]
    bounded = "_Z7boundedPf"
    # nvcc wrote __launch_bounds__(128, 4) as directives; given values replace them
    assert ".maxntid 128, 1, 1" in ptx and ".minnctapersm 4" in ptx
    changed = set_ptx_launch_bounds(ptx, bounded, max_threads=256, max_registers=32)
    entry = changed[changed.index(f".entry {bounded}(") :]
    head = entry[: entry.index("{")]
    assert head.count(".maxntid") == 1 and ".maxntid 256, 1, 1" in head
    assert ".minnctapersm 4" in head  # not given: kept
    assert ".maxnreg 32" in head
    # the other entries are untouched
    others = ptx_kernel_names(ptx)
    others.remove(bounded)
    for kernel in others:
        start = changed.index(f".entry {kernel}(")
        assert ".maxnreg" not in changed[start : changed.index("{", start)]
    assert set_ptx_launch_bounds(ptx, bounded) == ptx
    with pytest.raises(SpecializationError, match="no kernel named 'nope'"):
        set_ptx_launch_bounds(ptx, "nope", max_threads=32)


def test_bounds_and_register_cap_reach_ptxas(nvcc_modules):
    ptx = nvcc_modules["loops"]
    free = compile_ptx(ptx, CompileConfig())
    assert free.metrics.registers > 24
    capped = compile_ptx(ptx, CompileConfig(max_registers=24))
    assert capped.metrics.registers == 24 and ".maxnreg 24" in capped.ptx
    # 1024 threads x 2 blocks per SM leave 32 registers per thread on sm_90
    occupancy = compile_ptx(ptx, CompileConfig(max_threads=1024, min_blocks=2))
    assert occupancy.metrics.registers <= 32
    assert ".maxntid 1024, 1, 1" in occupancy.ptx and ".minnctapersm 2" in occupancy.ptx
    o0 = compile_ptx(ptx, CompileConfig(ptxas_opt_level=0))
    assert o0.binary != free.binary


def test_fields_that_need_ir_are_refused_in_one_line(nvcc_modules):
    ptx = nvcc_modules["saxpy"]
    for config, named in [
        (CompileConfig(pipeline="default<O1>"), "pipeline"),
        (CompileConfig(specialize_args={3: b"\x00\x01\x00\x00"}), "specialize_args"),
        (CompileConfig(block_dim=(128, 1, 1), codegen_opt_level=2), "codegen_opt_level, block_dim"),
    ]:
        with pytest.raises(JitConfigError, match=f"^{named} needs? the kernel's LLVM IR") as error:
            compile_ptx(ptx, config, "_Z5saxpyfPKfPfi")
        assert "\n" not in str(error.value)
    with pytest.raises(JitConfigError, match="NVIDIA architectures, not gfx90a"):
        compile_ptx(ptx, CompileConfig(arch="gfx90a"), "_Z5saxpyfPKfPfi")
    # the defaults of those fields are fine, and link_libdevice means nothing here
    compile_ptx(ptx, CompileConfig(link_libdevice=False), "_Z5saxpyfPKfPfi")


def test_kernel_selection(nvcc_modules):
    with pytest.raises(SpecializationError, match="defines 2 kernels .*name the one"):
        compile_ptx(nvcc_modules["saxpy"])
    with pytest.raises(SpecializationError, match="no kernel named 'saxpy'.*_Z5saxpyfPKfPfi"):
        compile_ptx(nvcc_modules["saxpy"], kernel="saxpy")
    assert compile_ptx(nvcc_modules["loops"]).kernel == "_Z5loopsPfiii"


def test_cache_and_assembler_errors(nvcc_modules, tmp_path):
    cache = CompileCache(tmp_path / "cache")
    config = CompileConfig(max_registers=32)
    first = compile_ptx(nvcc_modules["loops"], config, cache=cache)
    again = compile_ptx(nvcc_modules["loops"], config, cache=CompileCache(tmp_path / "cache"))
    assert again.from_cache and again.binary == first.binary and again.metrics == first.metrics
    other = compile_ptx(nvcc_modules["loops"], CompileConfig(max_registers=40), cache=cache)
    assert not other.from_cache and other.key != first.key
    broken = nvcc_modules["loops"].replace("ret;", "bogus_instruction;", 1)
    with pytest.raises(PtxasError, match="bogus_instruction") as error:
        compile_ptx(broken)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("assembler", ["nvjitlink", "ptxas"])
def test_both_assemblers(nvcc_modules, assembler):
    result = compile_ptx(nvcc_modules["structs"], CompileConfig(max_threads=64), "_Z7boundedPf",
                         assembler=assembler)
    assert entry_symbols(result.binary) == {"_Z7boundedPf"}
    assert result.metrics.registers > 0
