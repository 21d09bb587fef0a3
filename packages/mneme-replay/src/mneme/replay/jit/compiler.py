"""Kernel IR + CompileConfig → PTX → cubin (or AMDGPU code object) with static metrics.

Compile-only: nothing here needs a GPU. The replay engine calls `compile_kernel`
once per candidate configuration; a `CompileCache` makes repeats free.
"""

from __future__ import annotations

import time
from dataclasses import replace

from . import _llvm
from .cache import CompileCache, compile_key
from .config import GUARD_RANGES, CompileConfig
from .errors import JitError, SpecializationError
from .ir import kernel_names, needs_libdevice, parse_module
from .ptxas import StaticMetrics, assembler_id, run_ptxas
from .result import CompileResult
from .toolchain import find_libdevice

Module = _llvm.Module


def select_kernel(module: Module, kernel: str | None) -> str:
    """The kernel of a module to compile.

    Parameters:
        module: the module.
        kernel: a kernel's name; None for the module's only kernel.

    Returns:
        The kernel's name, checked.

    Raises:
        SpecializationError: no such kernel, or no name and not exactly one kernel.
    """
    kernels = kernel_names(module)
    if kernel is None:
        if len(kernels) != 1:
            listed = ", ".join(kernels) if kernels else "none"
            raise SpecializationError(
                f"the module defines {len(kernels)} kernels ({listed}); name the one to compile"
            )
        return kernels[0]
    if kernel not in kernels:
        raise SpecializationError(
            f"no kernel named '{kernel}' in the module; it defines: {', '.join(kernels) or 'none'}"
        )
    return kernel


def prepare_module(module: Module, kernel: str, config: CompileConfig) -> None:
    """Everything before the pipeline, in place: the module cut down to one kernel,
    libdevice linked where it is needed, the specializations and launch bounds of the
    configuration applied.

    Parameters:
        module: the module (changed).
        kernel: the kernel kept.
        config: the compile configuration.
    """
    module.keep_only_kernel(kernel)
    if config.target == "nvptx" and config.link_libdevice and needs_libdevice(module):
        # Linked before the user's pipeline (as clang does) so it can inline and
        # drop what is unused; internalized, so nothing leaks into the PTX.
        module.link_libdevice(str(find_libdevice()))
    if config.specialize_args:
        module.specialize_arguments(kernel, config.specialize_args)
    if config.block_dim or config.grid_dim:
        module.specialize_launch_dims(kernel, block=config.block_dim, grid=config.grid_dim)
    if config.max_threads or config.min_blocks or config.max_registers:
        module.set_launch_bounds(
            kernel,
            max_threads=config.max_threads,
            min_blocks=config.min_blocks,
            max_registers=config.max_registers,
        )


def toolchain_id(config: CompileConfig) -> str:
    """Versions that change the output for the same IR and configuration."""
    parts = [f"llvm {_llvm.LLVM_VERSION}"]
    if config.target == "nvptx":
        parts.append(assembler_id())
    return "; ".join(parts)


def compile_kernel(
    ir: bytes | str | Module,
    config: CompileConfig | None = None,
    kernel: str | None = None,
    *,
    cache: CompileCache | None = None,
    name: str = "<ir>",
) -> CompileResult:
    """Compile one kernel: the configuration's pipeline, then code generation (PTX and
    a cubin from the assembler, or an AMDGPU code object).

    Parameters:
        ir: bitcode, IR text or a Module (which is left as it was).
        config: the compile configuration; None for the default (``default<O3>``,
            sm_90).
        kernel: the kernel's name; None for the module's only kernel.
        cache: a CompileCache to look the compile up in and keep it in; None compiles.
        name: the module's name in messages.

    Returns:
        The compiled code with its static metrics and per-stage timings.

    Raises:
        JitError: ``config`` is not a CompileConfig; the IR does not parse
            (InvalidIRError), the kernel is not there (SpecializationError), the
            pipeline fails (PipelineError, UnknownPassError), code generation fails
            (CodegenError), or the assembler does (PtxasError, JitToolchainError).
    """
    config = config or CompileConfig()
    if not isinstance(config, CompileConfig):
        raise JitError(f"config must be a CompileConfig, not {type(config).__name__}")
    start = time.perf_counter()
    timings: dict[str, float] = {}

    if isinstance(ir, Module):
        ir_bytes = ir.bitcode() if cache is not None else b""
        module = ir.clone()
    else:
        ir_bytes = ir.encode() if isinstance(ir, str) else bytes(ir)
        module = None

    key = ""
    if cache is not None:
        key = compile_key(ir_bytes, kernel or "", config.to_json(), toolchain_id(config))
        hit = cache.get(key)
        if hit is not None:
            return replace(hit, from_cache=True)

    if module is None:
        module = parse_module(ir_bytes, name)
    timings["parse"] = time.perf_counter() - start
    kernel_name = select_kernel(module, kernel)

    stage = time.perf_counter()
    prepare_module(module, kernel_name, config)
    timings["prepare"] = time.perf_counter() - stage

    stage = time.perf_counter()
    module.run_passes(config.pipeline, config.arch)
    if config.guard:  # after the pipeline: the accesses the code makes, as it makes them
        module.guard_memory_accesses(GUARD_RANGES)
    timings["passes"] = time.perf_counter() - stage

    stage = time.perf_counter()
    ptx = metrics = None
    if config.target == "nvptx":
        ptx = module.emit_assembly(config.arch, config.ptx_features, config.codegen_opt_level)
        timings["codegen"] = time.perf_counter() - stage
        assembled = run_ptxas(ptx, config.arch, config.ptxas_opt_level)
        timings["ptxas"] = assembled.seconds
        binary = assembled.cubin
        metrics = assembled.metrics.get(kernel_name, StaticMetrics(binary_size=len(binary)))
    else:
        binary = module.emit_object(config.arch, "", config.codegen_opt_level)
        timings["codegen"] = time.perf_counter() - stage
        metrics = None
    timings["total"] = time.perf_counter() - start

    result = CompileResult(
        kernel=kernel_name,
        config=config,
        binary=binary,
        ptx=ptx,
        metrics=metrics,
        timings=timings,
        key=key,
    )
    if cache is not None:
        cache.put(key, result)
    return result
