"""Where the CUDA pieces the compiler needs live: ptxas and libdevice."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from .errors import JitToolchainError

LIBDEVICE_RELATIVE = Path("nvvm") / "libdevice" / "libdevice.10.bc"


def cuda_root_candidates() -> list[Path]:
    """CUDA_PATH, CUDA_HOME, the folder above nvcc or ptxas on PATH, /usr/local/cuda."""
    candidates = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME")]
    for tool in ("nvcc", "ptxas"):
        found = shutil.which(tool)
        if found:
            candidates.append(str(Path(found).resolve().parent.parent))
    candidates.append("/usr/local/cuda")
    seen: list[Path] = []
    for candidate in candidates:
        if candidate and Path(candidate) not in seen:
            seen.append(Path(candidate))
    return seen


@functools.cache
def find_ptxas() -> Path:
    for root in cuda_root_candidates():
        if (root / "bin" / "ptxas").is_file():
            return root / "bin" / "ptxas"
    found = shutil.which("ptxas")
    if found:
        return Path(found)
    raise JitToolchainError(
        "ptxas not found: install the CUDA toolkit or set CUDA_PATH to its root (the folder with bin/ptxas)"
    )


@functools.cache
def find_libdevice() -> Path:
    for root in cuda_root_candidates():
        if (root / LIBDEVICE_RELATIVE).is_file():
            return root / LIBDEVICE_RELATIVE
    raise JitToolchainError(
        f"libdevice not found: set CUDA_PATH to a CUDA toolkit root that has {LIBDEVICE_RELATIVE}"
    )


@functools.cache
def ptxas_version(ptxas: Path) -> str:
    """The last line of `ptxas --version` (part of the compile-cache key)."""
    result = subprocess.run([str(ptxas), "--version"], capture_output=True, text=True, check=False)
    lines = result.stdout.strip().splitlines()
    return lines[-1] if lines else "unknown"
