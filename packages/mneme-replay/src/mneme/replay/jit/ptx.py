"""Compile-only analysis of a PTX kernel (no LLVM IR): PTX + CompileConfig → cubin and
the same StaticMetrics the IR path gives.

    from mneme.replay.jit import CompileConfig, compile_ptx
    result = compile_ptx(ptx_text, CompileConfig(max_threads=256, min_blocks=2), "_Z5saxpyfPKfPfi")
    result.metrics.registers, result.metrics.spill_store_bytes, result.binary

A PTX kernel takes what ptxas can change: the architecture, ptxas's optimisation level,
launch bounds and a register cap (written into the entry as ``.maxntid``,
``.minnctapersm`` and ``.maxnreg`` directives, replacing the ones it has). What needs IR
(pass pipelines, argument or launch-dimension specialisation, codegen level, PTX
features) is refused with one line.
"""

from __future__ import annotations

import re
import time
from dataclasses import fields, replace

from .cache import CompileCache, compile_key
from .config import CompileConfig
from .errors import JitConfigError, JitError, PtxasError, SpecializationError
from .ptxas import StaticMetrics, assembler_id, default_assembler, needs_relocatable, run_ptxas
from .result import CompileResult

#: CompileConfig fields a PTX kernel takes; the others need the kernel's LLVM IR.
PTX_FIELDS = ("arch", "ptxas_opt_level", "max_threads", "min_blocks", "max_registers")
_DEFAULTS = CompileConfig()
# link_libdevice does not change a PTX compile (there is nothing left to link)
_IGNORED = ("link_libdevice",)

_ENTRY = re.compile(
    r"^[ \t]*((?:\.(?:visible|weak|extern)[ \t]+)*)\.entry[ \t]+([\w$.%]+)[ \t]*\(", re.M
)
_TUNING = re.compile(r"^[ \t]*\.(maxntid|minnctapersm|maxnreg)\b[^\n]*\n?", re.M)


def ptx_kernel_names(ptx: str) -> list[str]:
    """The kernels (``.entry`` functions) of a PTX module.

    Parameters:
        ptx: the PTX text.

    Returns:
        Their names, in order.
    """
    return [m.group(2) for m in _ENTRY.finditer(ptx) if "extern" not in m.group(1)]


def ptx_config_problems(config: CompileConfig) -> list[str]:
    """The fields of ``config`` that a PTX kernel cannot take (set away from defaults)."""
    return [
        f.name
        for f in fields(CompileConfig)
        if f.name not in PTX_FIELDS
        and f.name not in _IGNORED
        and getattr(config, f.name) != getattr(_DEFAULTS, f.name)
    ]


def check_ptx_config(config: CompileConfig) -> None:
    """Check that a compile configuration applies to a PTX kernel.

    Parameters:
        config: the configuration.

    Raises:
        JitConfigError: it targets another vendor, or asks for what needs the kernel's
            IR (a pipeline, specializations).
    """
    if config.target != "nvptx":
        raise JitConfigError(f"a PTX kernel compiles for NVIDIA architectures, not {config.arch}")
    problems = ptx_config_problems(config)
    if problems:
        raise JitConfigError(
            f"{', '.join(problems)} need{'s' if len(problems) == 1 else ''} the kernel's LLVM IR, "
            f"and this kernel is PTX; it takes {', '.join(PTX_FIELDS)}"
        )


def _entry_span(ptx: str, match: re.Match) -> tuple[int, int, int]:
    """(start of the entry, start of its body '{', end after its closing '}')."""
    depth, i = 0, match.end() - 1  # at the '(' of the parameter list
    while i < len(ptx):  # the parameter list (its parentheses may nest: .ptr .align)
        if ptx[i] == "(":
            depth += 1
        elif ptx[i] == ")":
            depth -= 1
            if depth == 0:
                break
        i += 1
    body = ptx.find("{", i)
    if body < 0:
        raise SpecializationError(f"entry {match.group(2)} has no body in the PTX")
    depth = 0
    for j in range(body, len(ptx)):
        if ptx[j] == "{":
            depth += 1
        elif ptx[j] == "}":
            depth -= 1
            if depth == 0:
                return match.start(), body, j + 1
    raise SpecializationError(f"entry {match.group(2)}: its body never closes")


def select_ptx_kernel(ptx: str, kernel: str | None) -> str:
    kernels = ptx_kernel_names(ptx)
    if kernel is None:
        if len(kernels) != 1:
            listed = ", ".join(kernels) if kernels else "none"
            raise SpecializationError(
                f"the PTX defines {len(kernels)} kernels ({listed}); name the one to compile"
            )
        return kernels[0]
    if kernel not in kernels:
        raise SpecializationError(
            f"no kernel named '{kernel}' in the PTX; it defines: {', '.join(kernels) or 'none'}"
        )
    return kernel


def set_ptx_launch_bounds(
    ptx: str,
    kernel: str,
    max_threads: int | None = None,
    min_blocks: int | None = None,
    max_registers: int | None = None,
) -> str:
    """Set a PTX kernel's performance directives: each given value replaces the entry's
    own directive of that kind; the others stay as they are.

    Parameters:
        ptx: the PTX text.
        kernel: the kernel's name.
        max_threads: ``.maxntid max_threads, 1, 1``; None keeps the entry's.
        min_blocks: ``.minnctapersm min_blocks``; None keeps the entry's.
        max_registers: ``.maxnreg max_registers``; None keeps the entry's.

    Returns:
        The PTX with the directives set.

    Raises:
        SpecializationError: the PTX has no such kernel.
    """
    wanted = {
        "maxntid": f"{max_threads}, 1, 1" if max_threads else None,
        "minnctapersm": str(min_blocks) if min_blocks else None,
        "maxnreg": str(max_registers) if max_registers else None,
    }
    if not any(wanted.values()):
        return ptx
    match = next((m for m in _ENTRY.finditer(ptx) if m.group(2) == kernel), None)
    if match is None:
        raise SpecializationError(f"no kernel named '{kernel}' in the PTX")
    _, body, _ = _entry_span(ptx, match)
    close = ptx.rfind(")", match.end(), body)  # end of the parameter list
    directives = ptx[close + 1 : body]
    kept = _TUNING.sub(lambda m: "" if wanted[m.group(1)] else m.group(0), directives)
    added = "".join(f".{name} {value}\n" for name, value in wanted.items() if value)
    kept = kept if kept.endswith("\n") else kept + "\n"
    return ptx[: close + 1] + kept + added + ptx[body:]


def keep_only_ptx_kernel(ptx: str, kernel: str) -> str:
    """The PTX without the other ``.entry`` functions (their directives and bodies): the
    assembler then compiles one kernel, as the IR path does with keep_only_kernel."""
    spans = [_entry_span(ptx, m) for m in _ENTRY.finditer(ptx) if m.group(2) != kernel and "extern" not in m.group(1)]
    out, last = [], 0
    for start, _, end in spans:
        out.append(ptx[last:start])
        last = end
    out.append(ptx[last:])
    return "".join(out)


def compile_ptx(
    ptx: str,
    config: CompileConfig | None = None,
    kernel: str | None = None,
    *,
    cache: CompileCache | None = None,
    assembler: str | None = None,
) -> CompileResult:
    """Compile one kernel of a PTX module under a configuration (arch, assembler level,
    launch bounds, register cap) and report what the assembler reports, as
    ``compile_kernel`` does for IR.

    Parameters:
        ptx: the PTX text.
        config: the configuration; None for the default.
        kernel: the kernel's name; None for the module's only kernel.
        cache: a CompileCache to look the compile up in and keep it in; None compiles.
        assembler: ``nvjitlink`` or a ``ptxas`` path; None for :func:`default_assembler`.

    Returns:
        The compiled kernel; its ``ptx`` is the PTX that was assembled (one kernel,
        directives set).

    Raises:
        JitError: ``config`` or ``ptx`` of the wrong type; a configuration a PTX kernel
            cannot take (JitConfigError); no such kernel (SpecializationError); the
            assembler failed (PtxasError) or is missing (JitToolchainError).
    """
    config = config or CompileConfig()
    if not isinstance(config, CompileConfig):
        raise JitError(f"config must be a CompileConfig, not {type(config).__name__}")
    if not isinstance(ptx, str):
        raise JitError(f"ptx must be PTX text (str), not {type(ptx).__name__}")
    check_ptx_config(config)
    start = time.perf_counter()
    assembler = assembler or default_assembler()
    kernel_name = select_ptx_kernel(ptx, kernel)
    key = ""
    if cache is not None:
        toolchain = f"ptx; {assembler_id(assembler)}"
        key = compile_key(ptx.encode(), kernel_name, config.to_json(), toolchain)
        hit = cache.get(key)
        if hit is not None:
            return replace(hit, from_cache=True)

    timings: dict[str, float] = {}
    alone = keep_only_ptx_kernel(ptx, kernel_name)
    source = set_ptx_launch_bounds(
        alone, kernel_name, config.max_threads, config.min_blocks, config.max_registers
    )
    timings["prepare"] = time.perf_counter() - start
    try:
        assembled = run_ptxas(source, config.arch, config.ptxas_opt_level, assembler=assembler)
    except PtxasError:
        if alone == ptx:
            raise
        # another entry was needed (e.g. launched from this one): keep the whole module
        # and drop the other kernels from the cubin instead
        source = set_ptx_launch_bounds(
            ptx, kernel_name, config.max_threads, config.min_blocks, config.max_registers
        )
        keep = () if needs_relocatable(source) else (f"-kernels-used={kernel_name}",)
        assembled = run_ptxas(source, config.arch, config.ptxas_opt_level, keep, assembler=assembler)
    timings["ptxas"] = assembled.seconds
    timings["total"] = time.perf_counter() - start
    binary = assembled.cubin
    result = CompileResult(
        kernel=kernel_name,
        config=config,
        binary=binary,
        ptx=source,
        metrics=assembled.metrics.get(kernel_name, StaticMetrics(binary_size=len(binary))),
        timings=timings,
        key=key,
    )
    if cache is not None:
        cache.put(key, result)
    return result
