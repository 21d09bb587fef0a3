"""Several kernels of one module in one process (issue 35 item 1).

The corpus program lut_kernels keeps six kernels and a __device__ lookup table in one .cu.
Replayed in one process, every kernel after the first failed with "this module was left
inconsistent by an earlier LLVM error": the binding marked a module broken whenever an
exception was in flight at the end of a pipeline *anywhere on the thread*, and in the
wheels (each native module with its own private libstdc++) one device error rethrown by
the LLVM module's exception translator leaves that runtime's count of exceptions in flight
at 1 for good. Here: every kernel compiles (PTX and cubin through ptxas) in one process,
after failing pipelines and LLVM fatal errors in between and with that count raised, and
its compiled module defines the globals its recording lists.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from jit_support import corpus_build, require_tools
from mneme.replay.jit import (
    CodegenError,
    CompileConfig,
    UnknownPassError,
    compile_kernel,
    parse_module,
)

PROGRAM = corpus_build.CORPUS_DIR / "cuda" / "lut_kernels"
# An instruction sm_70 does not have: NVPTX's instruction selection stops with a fatal error.
CANNOT_SELECT = """
target datalayout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @bad(ptr addrspace(1) %out) {
  %v = call i32 @llvm.nvvm.read.ptx.sreg.clusterid.x()
  store i32 %v, ptr addrspace(1) %out
  ret void
}
declare i32 @llvm.nvvm.read.ptx.sreg.clusterid.x()
"""


@pytest.fixture(scope="module")
def lut_kernels(tmp_path_factory):
    """The instrumented executable's kernels (IR, params, globals), as mneme record reads them."""
    require_tools("mneme-clang++")
    from mneme.instrument.section import read_kernels

    built = corpus_build.build_program(PROGRAM, tmp_path_factory.mktemp("lut"), compiler="mneme-clang++")
    kernels = read_kernels(Path(built.executable))
    assert len(kernels) == 6
    return kernels


def fail_in_between() -> None:
    """A pipeline LLVM refuses, and a fatal error inside code generation."""
    with pytest.raises(UnknownPassError):
        compile_kernel(CANNOT_SELECT, CompileConfig(pipeline="function(no-such-pass)", arch="sm_70"), "bad")
    with pytest.raises(CodegenError, match="Cannot select"):
        compile_kernel(CANNOT_SELECT, CompileConfig.for_level("O3", arch="sm_70"), "bad")


def defined_globals(ptx: str) -> set[str]:
    return set(re.findall(r"^\.visible \.global [^;]*?(\w+)(?:\[\d+\])?;", ptx, re.MULTILINE))


def compile_all(kernels) -> None:
    for kernel in kernels:
        fail_in_between()
        result = compile_kernel(kernel.ir, CompileConfig.for_level("O3", arch="sm_90"), kernel.name)
        assert result.binary and result.metrics.registers > 0, kernel.name
        wanted = {g.name for g in kernel.globals if g.address_space == 1}
        assert "lut" in wanted, kernel.name
        assert wanted <= defined_globals(result.ptx), (kernel.name, wanted, defined_globals(result.ptx))


def test_every_kernel_of_a_module_compiles_in_one_process(lut_kernels):
    require_tools("ptxas")
    compile_all(lut_kernels)
    compile_all(reversed(lut_kernels))  # and again, in the other order


def test_a_module_an_error_or_a_transformation_touched_is_never_reused(lut_kernels):
    kernel = lut_kernels[1]
    module = parse_module(kernel.ir)
    result = compile_kernel(module, CompileConfig.for_level("O3", arch="sm_90"), kernel.name)
    assert result.ptx
    # compile_kernel works on a copy: the caller's module is untouched and compiles again
    assert {f.name for f in module.functions if f.is_kernel} == {kernel.name}
    assert compile_kernel(module, CompileConfig.for_level("O1", arch="sm_90"), kernel.name).ptx
    # a module an LLVM error interrupted refuses further use; fresh parses are unaffected
    broken = parse_module(CANNOT_SELECT)
    broken.run_passes("default<O1>", "sm_70")
    with pytest.raises(CodegenError):
        broken.emit_assembly("sm_70", "", 2)
    with pytest.raises(Exception, match="parse it again"):
        broken.emit_assembly("sm_70", "", 2)
    assert compile_kernel(kernel.ir, CompileConfig.for_level("O3", arch="sm_90"), kernel.name).ptx


RAISED_COUNT = r"""
import ctypes, sys
sys.path.insert(0, {tests!r})
from mneme.replay.jit import CompileConfig, compile_kernel
from mneme.instrument.section import read_kernels

# The state a wheel's LLVM module is left in: its C++ runtime counts one exception in
# flight that nobody will catch (__cxa_eh_globals.uncaughtExceptions, this thread's).
class Globals(ctypes.Structure):
    _fields_ = [("caught", ctypes.c_void_p), ("uncaught", ctypes.c_uint)]
runtime = ctypes.CDLL({libstdcxx!r})
runtime.__cxa_get_globals.restype = ctypes.POINTER(Globals)
state = runtime.__cxa_get_globals().contents
state.uncaught += 1
try:
    for kernel in read_kernels({executable!r}):
        compile_kernel(kernel.ir, CompileConfig.for_level("O3", arch="sm_90"), kernel.name)
        print("compiled", kernel.name)
finally:
    state.uncaught -= 1
"""


def test_a_leaked_exception_count_does_not_break_later_modules(lut_kernels, tmp_path):
    """In a subprocess: the count is the process's C++ runtime state."""
    require_tools("ptxas")
    import mneme.replay.jit._llvm as binding

    libstdcxx = ctypes.util.find_library("stdc++") or "libstdc++.so.6"
    linked = subprocess.run(["ldd", binding.__file__], capture_output=True, text=True).stdout
    if "libstdc++" not in linked:
        pytest.skip("this build links libstdc++ privately: the count cannot be reached from here")
    executable = next(tmp_path.parent.glob("lut*/lut_kernels/lut_kernels"), None)
    if executable is None:
        built = corpus_build.build_program(PROGRAM, tmp_path, compiler="mneme-clang++")
        executable = Path(built.executable)
    script = RAISED_COUNT.format(tests=str(Path(__file__).parent), libstdcxx=libstdcxx,
                                 executable=str(executable))
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("compiled ") == 6, run.stdout
