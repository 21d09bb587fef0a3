"""compile_kernel: every level to PTX and cubin, libdevice, AMDGPU, configuration, cache."""

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from jit_support import LEVELS
from mneme.replay.jit import (
    CompileCache,
    CompileConfig,
    JitConfigError,
    PtxasError,
    compile_kernel,
    default_cache_dir,
    kernel_names,
    parse_module,
    run_ptxas,
)

TEST_KERNELS = ["saxpy", "loops", "math", "math_nolib", "structs"]


@pytest.mark.parametrize("level", LEVELS)
def test_every_test_kernel_compiles_at_every_level(kernels, level):
    for source in TEST_KERNELS:
        for kernel in kernel_names(parse_module(kernels[source])):
            result = compile_kernel(kernels[source], CompileConfig.for_level(level), kernel)
            assert result.binary[:4] == b"\x7fELF"
            assert f".entry {kernel}(" in result.ptx
            assert result.metrics.registers > 0
            assert result.metrics.binary_size == len(result.binary)
            assert set(result.timings) == {
                "parse",
                "prepare",
                "passes",
                "codegen",
                "ptxas",
                "total",
            }


def test_static_metrics_from_ptxas(kernels):
    tile = compile_kernel(kernels["structs"], CompileConfig(), "_Z12reverse_tilePf")
    assert tile.metrics.shared_bytes == 1024
    assert tile.metrics.barriers == 1
    # a register cap below what the kernel needs shows up as spills or stack
    heavy = compile_kernel(kernels["math"], CompileConfig(max_registers=24, ptxas_opt_level=3))
    assert heavy.metrics.registers <= 24


def test_libdevice_is_linked_when_math_is_undefined(kernels):
    module = parse_module(kernels["math_nolib"])
    declared = {f.name for f in module.functions if f.is_declaration}
    assert {"__nv_expf", "__nv_sinf", "__nv_powf"} <= declared
    result = compile_kernel(kernels["math_nolib"], CompileConfig())
    assert "__nv_" not in result.ptx  # inlined and internal: nothing left to resolve
    unlinked = compile_kernel(kernels["math_nolib"], CompileConfig(link_libdevice=False))
    assert ".extern .func" in unlinked.ptx and "__nv_expf" in unlinked.ptx
    # the same code as clang's own libdevice linking
    assert result.metrics.registers > 0 and "ex2.approx" in result.ptx


def test_amdgpu_code_object(kernels):
    result = compile_kernel(kernels["tiny_hip"], CompileConfig(arch="gfx90a"))
    assert result.ptx is None and result.metrics is None
    elf = result.binary
    assert elf[:4] == b"\x7fELF"
    assert int.from_bytes(elf[18:20], "little") == 224  # EM_AMDGPU
    assert b"scale" in elf and b"amdhsa" in elf
    o0 = compile_kernel(
        kernels["tiny_hip"],
        CompileConfig(arch="gfx90a", pipeline="default<O0>", codegen_opt_level=0),
    )
    assert o0.binary[:4] == b"\x7fELF"


def test_config_round_trips_and_validates():
    config = CompileConfig(
        pipeline="function(instcombine,gvn),loop-unroll",
        arch="sm_80",
        codegen_opt_level=2,
        specialize_args={3: b"\x10\x00\x00\x00", 0: b"\x00\x00\x20\x40"},
        block_dim=[128, 1, 1],
        max_threads=128,
        min_blocks=4,
        max_registers=64,
    )
    assert CompileConfig.from_json(config.to_json()) == config
    assert CompileConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert list(config.specialize_args) == [0, 3]  # canonical order
    assert config.block_dim == (128, 1, 1)
    assert hash(config) == hash(CompileConfig.from_json(config.to_json()))
    assert json.loads(config.to_json())["specialize_args"]["3"] == "10000000"
    with pytest.raises(JitConfigError, match="unknown compile configuration field"):
        CompileConfig.from_dict({"pipelin": "default<O3>"})
    with pytest.raises(JitConfigError, match="neither an NVIDIA 'sm_XX' nor an AMD"):
        CompileConfig(arch="volta")
    with pytest.raises(JitConfigError, match="codegen_opt_level must be 0, 1, 2 or 3"):
        CompileConfig(codegen_opt_level=5)
    with pytest.raises(JitConfigError, match="unknown optimization level 'O4'"):
        CompileConfig.for_level("O4")
    with pytest.raises(JitConfigError, match="not valid JSON"):
        CompileConfig.from_json("{")


def test_memory_and_disk_cache(kernels, tmp_path):
    cache = CompileCache(tmp_path / "cache")
    config = CompileConfig.for_level("O2")
    first = compile_kernel(kernels["math"], config, cache=cache)
    assert not first.from_cache and len(first.key) == 64
    again = compile_kernel(kernels["math"], config, cache=cache)
    assert again.from_cache and again.binary == first.binary and again.ptx == first.ptx

    # a fresh process-level cache on the same folder reads the entry from disk
    cold = CompileCache(tmp_path / "cache")
    from_disk = compile_kernel(kernels["math"], config, cache=cold)
    assert from_disk.from_cache and from_disk.binary == first.binary
    assert from_disk.metrics == first.metrics and from_disk.config == config
    entries = list((tmp_path / "cache").rglob("*"))
    assert not [p for p in entries if p.name.endswith(".tmp")]

    # another configuration is another entry
    other = compile_kernel(kernels["math"], CompileConfig.for_level("O3"), cache=cache)
    assert not other.from_cache and other.key != first.key

    # a damaged entry is a miss and gets rewritten
    binary_path = next((tmp_path / "cache").rglob(f"{first.key}.bin"))
    binary_path.write_bytes(b"garbage")
    rebuilt = compile_kernel(kernels["math"], config, cache=CompileCache(tmp_path / "cache"))
    assert not rebuilt.from_cache and rebuilt.binary == first.binary
    assert binary_path.read_bytes() == first.binary


def test_memory_only_cache_is_bounded(kernels):
    cache = CompileCache(None, memory_entries=2)
    for level in ("O0", "O1", "O2"):
        compile_kernel(kernels["loops"], CompileConfig.for_level(level), cache=cache)
    assert len(cache) == 2
    assert compile_kernel(kernels["loops"], CompileConfig.for_level("O2"), cache=cache).from_cache
    assert not compile_kernel(
        kernels["loops"], CompileConfig.for_level("O0"), cache=cache
    ).from_cache


def test_default_cache_dir_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MNEME_COMPILE_CACHE", str(tmp_path / "here"))
    assert default_cache_dir() == tmp_path / "here"
    monkeypatch.delenv("MNEME_COMPILE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "mneme" / "compile"


def test_thread_pool_compiles_in_parallel(kernels):
    configs = [CompileConfig.for_level(level) for level in LEVELS]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda c: compile_kernel(kernels["loops"], c), configs))
    serial = [compile_kernel(kernels["loops"], c) for c in configs]
    assert [r.ptx for r in results] == [r.ptx for r in serial]


@pytest.mark.parametrize("assembler", ["nvjitlink", "ptxas"])
def test_ptxas_errors_are_one_line(assembler):
    bad = ".version 8.0\n.target sm_90\n.address_size 64\n.entry k() { bogus; }\n"
    with pytest.raises(PtxasError, match=r"ptxas( \(nvJitLink [\d.]+\))? failed for sm_90") as error:
        run_ptxas(bad, "sm_90", assembler=assembler)
    assert "\n" not in str(error.value) and "bogus" in str(error.value)


CANNOT_SELECT = """target triple = "nvptx64-nvidia-cuda"
declare i32 @llvm.amdgcn.workitem.id.x()
define ptx_kernel void @k(ptr %p) {
  %v = call i32 @llvm.amdgcn.workitem.id.x()
  store i32 %v, ptr %p
  ret void
}
"""


def test_codegen_failure_carries_llvms_message(tmp_path):
    from jit_support import require_tools
    from mneme.replay.jit import CodegenError, PipelineError

    module = parse_module(CANNOT_SELECT)
    with pytest.raises(CodegenError, match="Cannot select: intrinsic %llvm.amdgcn.workitem.id.x"):
        module.emit_assembly("sm_90", "", 2)
    # the process survives; the module is unusable and says so
    with pytest.raises(PipelineError, match="parse it again"):
        str(module)
    with pytest.raises(CodegenError, match="Cannot select"):
        compile_kernel(CANNOT_SELECT, CompileConfig())
    # llc-22 stops with the same message
    require_tools("llc-22")
    (tmp_path / "k.ll").write_text(CANNOT_SELECT)
    llc = subprocess.run(["llc-22", "-mcpu=sm_90", str(tmp_path / "k.ll"), "-o", "/dev/null"],
                         capture_output=True, text=True)
    assert llc.returncode != 0 and "Cannot select: intrinsic %llvm.amdgcn.workitem.id.x" in llc.stderr
