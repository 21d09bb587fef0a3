"""Every kernel of the CUDA instrumentation corpus compiles through the binding at every level."""

import pytest
from jit_support import LEVELS, corpus_build
from mneme.replay.jit import CompileConfig, compile_kernel, kernel_names, parse_module

PROGRAMS = [p.name for p in corpus_build.discover_programs("cuda")]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("program", PROGRAMS)
def test_corpus_kernels_compile(corpus_ir, program, level):
    config = CompileConfig.for_level(level)
    compiled = set()
    for bitcode_path in corpus_ir[program]:
        bitcode = bitcode_path.read_bytes()
        for kernel in kernel_names(parse_module(bitcode)):
            result = compile_kernel(bitcode, config, kernel, name=str(bitcode_path))
            assert result.binary[:4] == b"\x7fELF", kernel
            assert f".entry {kernel}(" in result.ptx
            assert result.metrics.registers > 0
            compiled.add(kernel)
    if level == "O0":
        manifest = corpus_build.load_program(corpus_build.CORPUS_DIR / "cuda" / program).kernels
        assert sorted(set(corpus_build.demangle(sorted(compiled)))) == sorted(manifest)
