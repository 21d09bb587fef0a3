"""PTX → cubin, and the static metrics ptxas's `-v` report gives.

Two assemblers give the same result type: nvJitLink in-process (the default wherever
the library is found, see nvjitlink.py) and the ``ptxas`` executable (the fallback, or
``MNEME_PTX_ASSEMBLER=ptxas``, or an explicit ``ptxas=`` path).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import JitToolchainError, PtxasError
from .toolchain import find_ptxas, ptxas_version

#: The assemblers run_ptxas knows; MNEME_PTX_ASSEMBLER picks one.
ASSEMBLERS = ("nvjitlink", "ptxas")


@dataclass(frozen=True)
class StaticMetrics:
    """What ptxas reports for one kernel, plus the size of the cubin.

    Attributes:
        registers: registers per thread.
        barriers: named barriers used.
        stack_frame_bytes: stack frame bytes per thread.
        spill_store_bytes: bytes of spill stores.
        spill_load_bytes: bytes of spill loads.
        shared_bytes: static shared memory bytes.
        local_bytes: local memory bytes per thread.
        constant_bytes: constant memory bytes (bank 0).
        binary_size: the cubin's size in bytes.
    """

    registers: int = 0
    barriers: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    shared_bytes: int = 0
    local_bytes: int = 0
    constant_bytes: int = 0
    binary_size: int = 0

    def to_dict(self) -> dict[str, int]:
        """The metrics as plain JSON data.

        Returns:
            Their fields.
        """
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> StaticMetrics:
        """Metrics from the data :meth:`to_dict` writes.

        Parameters:
            data: the fields.

        Returns:
            The metrics.
        """
        return cls(**data)


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_LMEM = re.compile(r"(\d+) bytes lmem")
_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")
_STACK = re.compile(r"(\d+) bytes cumulative stack size")
# nvJitLink -verbose: the linker's own summary per function, after ptxas's lines (or
# alone: nvJitLink 13.0 in a worker process on an H200 host logged only these).
_LINKED = re.compile(r"^info\s*: Function properties for '([^']+)':")
_LINKED_USED = re.compile(
    r"^info\s*: used (\d+) registers, used (\d+) barriers, (\d+) stack, (\d+) bytes smem, "
    r"(\d+) bytes cmem\[0\], (\d+) bytes lmem"
)


def parse_ptxas_report(text: str) -> dict[str, StaticMetrics]:
    """The static metrics of each function in an assembler's report.

    Parameters:
        text: ``ptxas -v`` output (entries and device functions), or nvJitLink's info
            log (ptxas's lines, then with ``-verbose`` the linker's summary, which fills
            what newer ptxas no longer prints: stack and constant bytes; or the summary
            alone, which gives every metric but the spill bytes).

    Returns:
        Function name -> its metrics.
    """
    values: dict[str, dict[str, int]] = {}
    linked: dict[str, dict[str, int]] = {}
    current: str | None = None
    linked_name: str | None = None
    for line in text.splitlines():
        if match := _LINKED.search(line):
            linked_name = match.group(1)
            current = None
            continue
        if linked_name is not None:
            if match := _LINKED_USED.search(line):
                registers, barriers, stack, smem, cmem, lmem = (int(g) for g in match.groups())
                linked[linked_name] = {"registers": registers, "barriers": barriers,
                                       "stack_frame_bytes": stack, "shared_bytes": smem,
                                       "local_bytes": lmem or stack, "constant_bytes": cmem}
            linked_name = None
            continue
        if match := _ENTRY.search(line) or _PROPERTIES.search(line):
            current = match.group(1)
            values.setdefault(current, {})
            continue
        if current is None:
            continue
        entry = values[current]
        if match := _FRAME.search(line):
            entry["stack_frame_bytes"], entry["spill_store_bytes"], entry["spill_load_bytes"] = (
                int(g) for g in match.groups()
            )
        if match := _USED.search(line):
            entry["registers"] = int(match.group(1))
            if m := _BARRIERS.search(line):
                entry["barriers"] = int(m.group(1))
            if m := _SMEM.search(line):
                entry["shared_bytes"] = int(m.group(1))
            entry["constant_bytes"] = sum(int(g) for g in _CMEM.findall(line))
            # Newer ptxas reports the stack instead of lmem; both are local memory.
            if m := _LMEM.search(line) or _STACK.search(line):
                entry["local_bytes"] = int(m.group(1))
    for name, extra in linked.items():
        if name not in values:  # the summary alone: every metric but the spill bytes (0)
            values[name] = extra
            continue
        entry = values[name]  # ptxas's lines, filled where newer ptxas prints nothing
        for key in ("local_bytes", "constant_bytes"):
            entry[key] = entry.get(key) or extra[key]
    return {name: StaticMetrics(**entry) for name, entry in values.items()}


# Functions ptxas resolves itself in whole-program mode (CUDA system calls).
_SYSTEM_CALLS = frozenset(
    {
        "vprintf",
        "malloc",
        "free",
        "__assertfail",
        "cudaGetParameterBufferV2",
        "cudaGetParameterBuffer",
        "cudaLaunchDeviceV2",
        "cudaLaunchDevice",
    }
)
_EXTERN_FUNC = re.compile(r"^\.extern \.func\s*(?:\([^)]*\)\s*)?([\w$.]+)", re.M)


def needs_relocatable(ptx: str) -> bool:
    """True when the PTX refers to device code or data of another unit (-fgpu-rdc):
    ptxas must then compile with -c instead of linking a whole program.

    ``.extern .shared`` is not such a reference: it is how PTX declares dynamic shared
    memory (``extern __shared__ T tile[]``), in whole-program code too. A relocatable
    cubin does not load as a module (CUDA_ERROR_INVALID_IMAGE / kernel not found)."""
    if re.search(r"^\.extern \.(?:global|const)\b", ptx, re.M):
        return True
    return any(name not in _SYSTEM_CALLS for name in _EXTERN_FUNC.findall(ptx))


@dataclass(frozen=True)
class PtxasResult:
    """What the assembler made of one PTX module.

    Attributes:
        cubin: the assembled cubin.
        metrics: function name -> its metrics.
        log: the assembler's log.
        seconds: the time it took.
        assembler: "nvjitlink" or "ptxas": which assembler produced it
    """

    cubin: bytes
    metrics: dict[str, StaticMetrics]
    log: str
    seconds: float
    assembler: str = "ptxas"


def default_assembler() -> str:
    """The PTX assembler used when none is named.

    Returns:
        ``MNEME_PTX_ASSEMBLER`` if set, else ``nvjitlink`` where the library loads, else
        ``ptxas``.

    Raises:
        JitToolchainError: ``MNEME_PTX_ASSEMBLER`` names an unknown assembler.
    """
    from .nvjitlink import nvjitlink_available

    chosen = os.environ.get("MNEME_PTX_ASSEMBLER", "").strip().lower()
    if chosen:
        if chosen not in ASSEMBLERS:
            raise JitToolchainError(
                f"MNEME_PTX_ASSEMBLER={chosen!r}: use one of {', '.join(ASSEMBLERS)}"
            )
        return chosen
    return "nvjitlink" if nvjitlink_available() else "ptxas"


def assembler_id(assembler: str | None = None) -> str:
    """Name and version of an assembler (part of the compile-cache key).

    Parameters:
        assembler: ``nvjitlink`` or ``ptxas``; None for :func:`default_assembler`.

    Returns:
        ``nvJitLink 13.0`` or ptxas's version line.
    """
    assembler = assembler or default_assembler()
    if assembler == "nvjitlink":
        from .nvjitlink import load_nvjitlink

        major, minor = load_nvjitlink().version
        return f"nvJitLink {major}.{minor}"
    return ptxas_version(_ptxas_or_advice())


def _ptxas_or_advice() -> Path:
    try:
        return find_ptxas()
    except JitToolchainError:
        raise JitToolchainError(
            "no PTX assembler: pip install 'nvidia-nvjitlink>=13,<14' (in-process, a "
            "dependency of mneme-replay), or install the CUDA toolkit and set CUDA_PATH to "
            "its root (bin/ptxas)"
        ) from None


def run_ptxas(
    ptx: str,
    arch: str,
    opt_level: int = 3,
    extra_args: tuple[str, ...] = (),
    ptxas: Path | None = None,
    assembler: str | None = None,
) -> PtxasResult:
    """Assemble PTX into a cubin. PTX that calls external device functions is compiled
    relocatable (ptxas -c, nvJitLink -r).

    Parameters:
        ptx: the PTX text.
        arch: the target (``sm_90``).
        opt_level: the assembler's optimization level, 0-3.
        extra_args: ptxas options (``--maxrregcount=N``, ``-c``, ...).
        ptxas: a ptxas executable to use (then the assembler is ptxas).
        assembler: ``nvjitlink`` or ``ptxas``; None for :func:`default_assembler`.

    Returns:
        The cubin, the metrics of its functions, the log and the time.

    Raises:
        JitToolchainError: an unknown or missing assembler.
        PtxasError: the assembler failed (with its message).
    """
    if ptxas is not None:
        assembler = "ptxas"
    assembler = assembler or default_assembler()
    if assembler not in ASSEMBLERS:
        raise JitToolchainError(f"unknown PTX assembler {assembler!r}; use one of {', '.join(ASSEMBLERS)}")
    if needs_relocatable(ptx) and "-c" not in extra_args:
        extra_args = (*extra_args, "-c")
    if assembler == "nvjitlink":
        return _run_nvjitlink(ptx, arch, opt_level, extra_args)
    return _run_ptxas_executable(ptx, arch, opt_level, extra_args, ptxas)


def _with_size(metrics: dict[str, StaticMetrics], cubin: bytes) -> dict[str, StaticMetrics]:
    return {
        name: StaticMetrics(**{**m.to_dict(), "binary_size": len(cubin)})
        for name, m in metrics.items()
    }


def nvjitlink_options(arch: str, opt_level: int, extra_args: tuple[str, ...]) -> list[str]:
    """nvJitLink options for ptxas's: -c becomes -r (a relocatable link), nvJitLink's own
    options (``-kernels-used=``) pass as they are, the others go to ptxas via -Xptxas."""
    options = [f"-arch={arch}", f"-Xptxas=-O{opt_level}", "-Xptxas=-v", "-verbose"]
    for arg in extra_args:
        if arg == "-c":
            options.append("-r")
        elif arg.startswith(("-kernels-used=", "-variables-used=")):
            options.append(arg)
        else:
            options.append(f"-Xptxas={arg}")
    return options


def _run_nvjitlink(
    ptx: str, arch: str, opt_level: int, extra_args: tuple[str, ...]
) -> PtxasResult:
    from .nvjitlink import INPUT_PTX, load_nvjitlink

    library = load_nvjitlink()
    options = nvjitlink_options(arch, opt_level, extra_args)
    start = time.perf_counter()
    cubin, log = library.link([(INPUT_PTX, ptx.encode(), "kernel.ptx")], options)
    seconds = time.perf_counter() - start
    metrics = _with_size(parse_ptxas_report(log), cubin)
    return PtxasResult(
        cubin=cubin, metrics=metrics, log=log.strip(), seconds=seconds, assembler="nvjitlink"
    )


def _run_ptxas_executable(
    ptx: str,
    arch: str,
    opt_level: int,
    extra_args: tuple[str, ...],
    ptxas: Path | None,
) -> PtxasResult:
    tool = ptxas or _ptxas_or_advice()
    # nvJitLink's -kernels-used=K is ptxas's -e K (compile only that entry)
    args: list[str] = []
    for arg in extra_args:
        if arg.startswith("-kernels-used="):
            args += ["-e", arg.split("=", 1)[1]]
        elif not arg.startswith("-variables-used="):
            args.append(arg)
    extra_args = tuple(args)
    with tempfile.TemporaryDirectory(prefix="mneme-ptxas-") as folder:
        source = Path(folder) / "kernel.ptx"
        output = Path(folder) / "kernel.cubin"
        source.write_text(ptx)
        command = [str(tool), f"-arch={arch}", f"-O{opt_level}", "-v", *extra_args]
        command += [str(source), "-o", str(output)]
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        log = (result.stdout + result.stderr).strip()
        if result.returncode != 0:
            errors = [line for line in log.splitlines() if "error" in line.lower()] or [log]
            raise PtxasError(f"ptxas failed for {arch}: " + " | ".join(errors[:3]))
        cubin = output.read_bytes()
    metrics = _with_size(parse_ptxas_report(log), cubin)
    return PtxasResult(cubin=cubin, metrics=metrics, log=log, seconds=seconds, assembler="ptxas")
