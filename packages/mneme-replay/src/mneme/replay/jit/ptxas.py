"""PTX → cubin with ptxas, and the static metrics its `-v` report gives."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import PtxasError
from .toolchain import find_ptxas


@dataclass(frozen=True)
class StaticMetrics:
    """What ptxas reports for one kernel, plus the size of the cubin."""

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
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> StaticMetrics:
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


def parse_ptxas_report(text: str) -> dict[str, StaticMetrics]:
    """Per-function metrics from `ptxas -v` output (entries and device functions)."""
    values: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
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
    cubin: bytes
    metrics: dict[str, StaticMetrics]
    log: str
    seconds: float


def run_ptxas(
    ptx: str,
    arch: str,
    opt_level: int = 3,
    extra_args: tuple[str, ...] = (),
    ptxas: Path | None = None,
) -> PtxasResult:
    """Assemble PTX for `arch` (e.g. 'sm_90'); PtxasError carries ptxas's message.

    PTX that calls external device functions is compiled relocatable (-c)."""
    tool = ptxas or find_ptxas()
    if needs_relocatable(ptx) and "-c" not in extra_args:
        extra_args = (*extra_args, "-c")
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
    metrics = {
        name: StaticMetrics(**{**m.to_dict(), "binary_size": len(cubin)})
        for name, m in parse_ptxas_report(log).items()
    }
    return PtxasResult(cubin=cubin, metrics=metrics, log=log, seconds=seconds)
