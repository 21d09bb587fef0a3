"""PTX → cubin in-process with nvJitLink, against the ptxas executable (both real)."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from mneme.replay.jit import (
    CompileConfig,
    JitToolchainError,
    compile_kernel,
    kernel_names,
    parse_module,
    parse_ptxas_report,
    run_ptxas,
)
from mneme.replay.jit import nvjitlink as nvjitlink_module
from mneme.replay.jit.compiler import toolchain_id
from mneme.replay.jit.ptxas import assembler_id, default_assembler

EM_CUDA = 190
ET_EXEC, ET_REL = 2, 1
# Kernels whose code does not depend on relocatable vs whole-program compilation (no
# global tables such as sinf's reduction table): both assemblers give the same report.
SAME_CODE = ["saxpy", "loops", "structs"]


def _elf_type_and_machine(cubin: bytes) -> tuple[int, int]:
    assert cubin[:4] == b"\x7fELF"
    return int.from_bytes(cubin[16:18], "little"), int.from_bytes(cubin[18:20], "little")


def _ptx_of(kernels, source: str, level: str = "O3") -> dict[str, str]:
    return {
        k: compile_kernel(kernels[source], CompileConfig.for_level(level), k).ptx
        for k in kernel_names(parse_module(kernels[source]))
    }


@pytest.fixture
def no_environment(monkeypatch):
    monkeypatch.delenv("MNEME_PTX_ASSEMBLER", raising=False)
    monkeypatch.delenv("MNEME_NVJITLINK", raising=False)
    nvjitlink_module._load.cache_clear()
    yield monkeypatch
    nvjitlink_module._load.cache_clear()


def test_nvjitlink_is_the_default_where_installed(no_environment, kernels):
    # nvidia-nvjitlink is a dependency of mneme-replay: the development env has it
    assert default_assembler() == "nvjitlink"
    library = nvjitlink_module.load_nvjitlink()
    assert library.version[0] == 13 and "nvidia" in str(library.path)
    ptx = _ptx_of(kernels, "saxpy")
    kernel, text = next(iter(ptx.items()))
    result = run_ptxas(text, "sm_90")
    assert result.assembler == "nvjitlink"
    assert _elf_type_and_machine(result.cubin) == (ET_EXEC, EM_CUDA)
    assert kernel.encode() in result.cubin
    assert result.metrics[kernel].registers > 0
    assert result.metrics[kernel].binary_size == len(result.cubin)
    assert assembler_id() == f"nvJitLink {library.version[0]}.{library.version[1]}"


@pytest.mark.parametrize("level", ["O0", "O3"])
@pytest.mark.parametrize("ptxas_level", [0, 3])
def test_same_report_as_the_ptxas_executable(kernels, level, ptxas_level):
    for source in SAME_CODE:
        for kernel, ptx in _ptx_of(kernels, source, level).items():
            linked = run_ptxas(ptx, "sm_90", ptxas_level, assembler="nvjitlink")
            assembled = run_ptxas(ptx, "sm_90", ptxas_level, assembler="ptxas")
            ours, theirs = linked.metrics[kernel].to_dict(), assembled.metrics[kernel].to_dict()
            # the cubins differ in size (the linker's sections), and only nvJitLink's
            # linker summary reports the constant bank
            for key in ("binary_size", "constant_bytes"):
                ours.pop(key), theirs.pop(key)
            assert ours == theirs, (source, kernel)
            assert linked.metrics[kernel].constant_bytes > 0


def test_ptxas_options_reach_ptxas_through_nvjitlink(kernels):
    ptx = _ptx_of(kernels, "loops")["_Z5loopsPfiii"]
    free = run_ptxas(ptx, "sm_90", assembler="nvjitlink")
    # 24 is sm_90's lower bound for a register cap
    capped = run_ptxas(ptx, "sm_90", extra_args=("--maxrregcount=24",), assembler="nvjitlink")
    assert free.metrics["_Z5loopsPfiii"].registers > 24
    assert capped.metrics["_Z5loopsPfiii"].registers == 24
    o0 = run_ptxas(ptx, "sm_90", 0, assembler="nvjitlink")
    assert o0.cubin != free.cubin


EXTERN_CALL = """.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b32 r) helper(.param .b32 x);
.visible .entry k(.param .u64 p)
{
  .reg .b32 %r<3>;
  .reg .b64 %rd<2>;
  ld.param.u64 %rd1, [p];
  ld.global.u32 %r1, [%rd1];
  { .param .b32 a; st.param.b32 [a], %r1; .param .b32 r;
    call.uni (r), helper, (a); ld.param.b32 %r2, [r]; }
  st.global.u32 [%rd1], %r2;
  ret;
}
"""


@pytest.mark.parametrize("assembler", ["nvjitlink", "ptxas"])
def test_external_calls_give_a_relocatable_cubin(assembler):
    result = run_ptxas(EXTERN_CALL, "sm_90", assembler=assembler)
    assert result.assembler == assembler
    assert _elf_type_and_machine(result.cubin) == (ET_REL, EM_CUDA)
    assert result.metrics["k"].registers > 0


def test_environment_picks_the_assembler(no_environment, kernels):
    ptx = next(iter(_ptx_of(kernels, "saxpy").values()))
    no_environment.setenv("MNEME_PTX_ASSEMBLER", "ptxas")
    assert run_ptxas(ptx, "sm_90").assembler == "ptxas"
    assert toolchain_id(CompileConfig()).endswith(assembler_id("ptxas"))
    no_environment.setenv("MNEME_PTX_ASSEMBLER", "nvcc")
    with pytest.raises(JitToolchainError, match="MNEME_PTX_ASSEMBLER='nvcc': use one of"):
        run_ptxas(ptx, "sm_90")


def test_missing_library_falls_back_to_ptxas(no_environment, tmp_path, kernels):
    before = toolchain_id(CompileConfig())
    no_environment.setenv("MNEME_NVJITLINK", str(tmp_path / "libnvJitLink.so.13"))
    nvjitlink_module._load.cache_clear()
    assert not nvjitlink_module.nvjitlink_available()
    with pytest.raises(JitToolchainError, match="pip install 'nvidia-nvjitlink"):
        nvjitlink_module.load_nvjitlink()
    assert default_assembler() == "ptxas"
    result = compile_kernel(kernels["saxpy"], CompileConfig(), "_Z5saxpyfPKfPfi")
    assert result.binary[:4] == b"\x7fELF" and result.metrics.registers > 0
    # the compile cache never mixes the two assemblers' cubins
    assert toolchain_id(CompileConfig()) != before
    # a file that is not the library: one line naming it
    (tmp_path / "libnvJitLink.so.13").write_bytes(b"not a library")
    nvjitlink_module._load.cache_clear()
    with pytest.raises(JitToolchainError, match="cannot load nvJitLink from"):
        nvjitlink_module.load_nvjitlink()


def test_parallel_compiles_agree(kernels):
    ptx = _ptx_of(kernels, "loops")
    texts = list(ptx.values()) * 2
    with ThreadPoolExecutor(2) as pool:
        parallel = list(pool.map(lambda t: run_ptxas(t, "sm_90", assembler="nvjitlink"), texts))
    serial = [run_ptxas(t, "sm_90", assembler="nvjitlink") for t in texts]
    assert [r.cubin for r in parallel] == [r.cubin for r in serial]


NVJITLINK_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3bigPf' for 'sm_90'
ptxas info    : Function properties for _Z3bigPf
ptxas         .     256 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 81.480 ms
info    : 0 bytes gmem
info    : Function properties for '_Z3bigPf':
info    : used 32 registers, used 1 barriers, 256 stack, 2048 bytes smem, 548 bytes cmem[0], 0 bytes lmem
"""


def test_linker_summary_fills_what_ptxas_leaves_out():
    metrics = parse_ptxas_report(NVJITLINK_LOG)
    assert list(metrics) == ["_Z3bigPf"]
    m = metrics["_Z3bigPf"]
    assert (m.registers, m.barriers, m.shared_bytes) == (32, 1, 1024)  # ptxas's own numbers
    assert (m.stack_frame_bytes, m.spill_store_bytes, m.spill_load_bytes) == (256, 8, 4)
    assert (m.local_bytes, m.constant_bytes) == (256, 548)  # from the linker's summary


#: what nvJitLink 13.0 logged in a worker process on an H200 host: the linker's summary
#: alone, no ptxas line (compile-only workers reported 0 registers there)
SUMMARY_ONLY_LOG = """info    : 0 bytes gmem
info    : Function properties for '_Z5saxpyfPKfPfi':
info    : used 10 registers, used 0 barriers, 0 stack, 0 bytes smem, 556 bytes cmem[0], 0 bytes lmem
info    : Function properties for '_Z3bigPf':
info    : used 32 registers, used 1 barriers, 256 stack, 2048 bytes smem, 548 bytes cmem[0], 0 bytes lmem
"""


def test_the_linker_summary_alone_gives_the_metrics():
    metrics = parse_ptxas_report(SUMMARY_ONLY_LOG)
    assert list(metrics) == ["_Z5saxpyfPKfPfi", "_Z3bigPf"]
    saxpy, big = metrics["_Z5saxpyfPKfPfi"], metrics["_Z3bigPf"]
    assert (saxpy.registers, saxpy.barriers, saxpy.constant_bytes, saxpy.local_bytes) == (10, 0, 556, 0)
    assert (big.registers, big.barriers, big.shared_bytes) == (32, 1, 2048)
    assert (big.stack_frame_bytes, big.local_bytes, big.constant_bytes) == (256, 256, 548)
    assert (big.spill_store_bytes, big.spill_load_bytes) == (0, 0)  # (the summary has none)


def test_no_assembler_at_all_says_what_to_install(no_environment, tmp_path, kernels):
    from mneme.replay.jit import toolchain

    ptx = next(iter(_ptx_of(kernels, "saxpy").values()))
    no_environment.setenv("MNEME_NVJITLINK", str(tmp_path / "missing.so"))
    no_environment.setenv("CUDA_PATH", str(tmp_path))
    no_environment.setenv("PATH", str(tmp_path))
    no_environment.setattr(toolchain, "cuda_root_candidates", lambda: [tmp_path])
    nvjitlink_module._load.cache_clear()
    toolchain.find_ptxas.cache_clear()
    try:
        with pytest.raises(JitToolchainError, match="no PTX assembler: pip install 'nvidia-nvjitlink"):
            run_ptxas(ptx, "sm_90")
    finally:
        toolchain.find_ptxas.cache_clear()
