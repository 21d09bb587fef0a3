"""The LLVM 22 binding (parse, inspect, transform, codegen) and the compile-only pipeline.

from mneme.replay.jit import CompileConfig, compile_kernel
result = compile_kernel(bitcode, CompileConfig.for_level("O3", arch="sm_90"))
result.ptx, result.binary, result.metrics.registers, result.timings
"""

from ._llvm import (
    LLVM_VERSION,
    Argument,
    BasicBlock,
    Function,
    Instruction,
    Module,
    check_pipeline,
    registered_targets,
)
from .analysis import instruction_mix
from .cache import CompileCache, compile_key, default_cache_dir
from .compiler import CompileResult, compile_kernel, prepare_module, select_kernel
from .config import OPT_LEVELS, CompileConfig
from .errors import (
    CodegenError,
    InvalidIRError,
    JitConfigError,
    JitError,
    JitToolchainError,
    LinkError,
    PipelineError,
    PtxasError,
    SpecializationError,
    StaleHandleError,
    UnknownPassError,
)
from .ir import kernel_names, load_module, needs_libdevice, parse_module
from .nvjitlink import nvjitlink_available
from .ptx import (
    check_ptx_config,
    compile_ptx,
    ptx_kernel_names,
    set_ptx_launch_bounds,
)
from .ptxas import (
    PtxasResult,
    StaticMetrics,
    assembler_id,
    default_assembler,
    parse_ptxas_report,
    run_ptxas,
)

__all__ = [
    "LLVM_VERSION",
    "OPT_LEVELS",
    "Argument",
    "BasicBlock",
    "CodegenError",
    "CompileCache",
    "CompileConfig",
    "CompileResult",
    "Function",
    "Instruction",
    "InvalidIRError",
    "JitConfigError",
    "JitError",
    "JitToolchainError",
    "LinkError",
    "Module",
    "PipelineError",
    "PtxasError",
    "PtxasResult",
    "SpecializationError",
    "StaleHandleError",
    "StaticMetrics",
    "UnknownPassError",
    "assembler_id",
    "check_pipeline",
    "check_ptx_config",
    "compile_key",
    "compile_kernel",
    "compile_ptx",
    "default_assembler",
    "default_cache_dir",
    "instruction_mix",
    "kernel_names",
    "load_module",
    "needs_libdevice",
    "nvjitlink_available",
    "parse_module",
    "parse_ptxas_report",
    "ptx_kernel_names",
    "prepare_module",
    "registered_targets",
    "run_ptxas",
    "select_kernel",
    "set_ptx_launch_bounds",
]
