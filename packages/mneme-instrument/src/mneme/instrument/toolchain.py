"""Where clang-22 / LLVM 22, the CUDA toolkit and mneme's own files are (stdlib only).

Search order (the first hit wins):

* LLVM: ``$LLVM_INSTALL_PATH/bin``; ``llvm-config-22 --bindir`` (PATH, then
  /usr/lib/llvm-22/bin); ``clang++-22`` / ``clang-22`` on PATH.
* CUDA: ``$CUDA_PATH`` (then ``$CUDA_HOME``); the parent of the folder holding ``nvcc`` on
  PATH; /usr/local/cuda. A root counts when it has ``include/cuda_runtime.h``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from .errors import ToolchainError

PACKAGE_DIR = Path(__file__).resolve().parent
LIB_DIR = PACKAGE_DIR / "lib"
INCLUDE_DIR = PACKAGE_DIR / "include"
CMAKE_DIR = PACKAGE_DIR / "cmake"
COMPAT_INCLUDE_DIR = INCLUDE_DIR / "compat"
PLUGIN_NAME = "libMnemeInstrument.so"
LLVM_MAJOR = 22
# GPU architecture of a CUDA compile that names none (clang's own default, sm_52, is
# refused by CUDA 13's ptxas): $MNEME_CUDA_ARCH, else this machine's GPU, else this.
CUDA_ARCH_ENV = "MNEME_CUDA_ARCH"
DEFAULT_CUDA_ARCH = "sm_90"


class Llvm:
    """clang-22's bin folder and drivers."""

    def __init__(self, bindir: Path, clang: Path, clangxx: Path) -> None:
        self.bindir, self.clang, self.clangxx = bindir, clang, clangxx

    def tool(self, name: str) -> Path:
        """An LLVM tool (llvm-objcopy, opt, llvm-link, llvm-dis) next to clang."""
        for candidate in (
            self.bindir / name,
            self.bindir / f"{name}-{LLVM_MAJOR}",
        ):
            if candidate.exists():
                return candidate
        found = shutil.which(f"{name}-{LLVM_MAJOR}")
        if found:
            return Path(found)
        raise ToolchainError(
            f"{name} (LLVM {LLVM_MAJOR}) not found next to {self.clang}; install the llvm-{LLVM_MAJOR} package"
        )


def _llvm_from_bindir(bindir: Path) -> Llvm | None:
    for c, cxx in (("clang", "clang++"), (f"clang-{LLVM_MAJOR}", f"clang++-{LLVM_MAJOR}")):
        if (bindir / cxx).exists() and (bindir / c).exists():
            return Llvm(bindir, bindir / c, bindir / cxx)
    return None


@lru_cache(maxsize=1)
def find_llvm() -> Llvm:
    """clang-22 and its tools; ToolchainError (one line) if LLVM 22 is not installed."""
    root = os.environ.get("LLVM_INSTALL_PATH")
    if root:
        found = _llvm_from_bindir(Path(root) / "bin")
        if found:
            return found
        raise ToolchainError(
            f"LLVM_INSTALL_PATH={root} has no bin/clang++; point it at an LLVM {LLVM_MAJOR} install root"
        )
    for config in (
        shutil.which(f"llvm-config-{LLVM_MAJOR}"),
        f"/usr/lib/llvm-{LLVM_MAJOR}/bin/llvm-config",
    ):
        if config and Path(config).exists():
            # distributions install llvm-config-22 as a link into <root>/bin: no need to run it
            found = _llvm_from_bindir(Path(config).resolve().parent)
            if found:
                return found
            try:
                bindir = subprocess.run(
                    [config, "--bindir"], capture_output=True, text=True, check=True
                ).stdout.strip()
            except (OSError, subprocess.CalledProcessError):
                continue
            found = _llvm_from_bindir(Path(bindir))
            if found:
                return found
    clangxx = shutil.which(f"clang++-{LLVM_MAJOR}")
    clang = shutil.which(f"clang-{LLVM_MAJOR}")
    if clangxx and clang:
        return Llvm(Path(clangxx).resolve().parent, Path(clang), Path(clangxx))
    raise ToolchainError(
        f"clang-{LLVM_MAJOR} not found: install clang-{LLVM_MAJOR} (apt-get install clang-{LLVM_MAJOR}), "
        f"or set LLVM_INSTALL_PATH to an LLVM {LLVM_MAJOR} root, or put llvm-config-{LLVM_MAJOR} on PATH"
    )


def _is_cuda_root(path: Path) -> bool:
    return (path / "include" / "cuda_runtime.h").is_file()


@lru_cache(maxsize=1)
def find_cuda() -> Path:
    """The CUDA toolkit root; ToolchainError (one line) if there is none."""
    for var in ("CUDA_PATH", "CUDA_HOME"):
        value = os.environ.get(var)
        if value:
            if _is_cuda_root(Path(value)):
                return Path(value)
            raise ToolchainError(
                f"{var}={value} is not a CUDA toolkit (no include/cuda_runtime.h); fix or unset it"
            )
    nvcc = shutil.which("nvcc")
    if nvcc and _is_cuda_root(Path(nvcc).resolve().parent.parent):
        return Path(nvcc).resolve().parent.parent
    default = Path("/usr/local/cuda")
    if _is_cuda_root(default):
        return default
    raise ToolchainError(
        "no CUDA toolkit found: set CUDA_PATH to the CUDA root (the folder with include/cuda_runtime.h), "
        "or put nvcc on PATH"
    )


def cuda_libdir(root: Path) -> Path:
    for name in ("lib64", "lib"):
        if (root / name).is_dir():
            return root / name
    return root / "lib64"


def _normalize_arch(value: str) -> str:
    """"sm_90", "90", "9.0" or "compute_90" -> "sm_90" (anything else is returned as given)."""
    v = value.strip()
    if v.startswith("compute_"):
        v = "sm_" + v[len("compute_") :]
    if v.replace(".", "", 1).isdigit():
        v = "sm_" + v.replace(".", "") if "." in v else "sm_" + v
    return v


@lru_cache(maxsize=1)
def local_gpu_arch() -> str | None:
    """The compute capability of this machine's first NVIDIA GPU ("sm_90"), or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        proc = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.split()
    if proc.returncode != 0 or not lines or not lines[0].replace(".", "", 1).isdigit():
        return None
    return _normalize_arch(lines[0])


def default_cuda_arch() -> tuple[str, str]:
    """(arch, where it came from) for CUDA compiles that name no GPU architecture."""
    value = os.environ.get(CUDA_ARCH_ENV, "").strip()
    if value:
        return _normalize_arch(value), f"${CUDA_ARCH_ENV}"
    local = local_gpu_arch()
    if local:
        return local, "this machine's GPU"
    return DEFAULT_CUDA_ARCH, "default"


def plugin_path() -> Path:
    """The pass plugin built with this package."""
    path = LIB_DIR / PLUGIN_NAME
    if not path.exists():
        raise ToolchainError(
            f"the mneme pass plugin is missing ({path}); reinstall mneme-instrument "
            "(pip install --force-reinstall mneme-instrument)"
        )
    return path


def cuda_compile_flags(root: Path) -> list[str]:
    """What the wrappers add to a CUDA compile (unless the user gave the same kind of flag)."""
    flags = [f"--cuda-path={root}"]
    cccl = root / "include" / "cccl"
    if cccl.is_dir():  # CUDA 13 moved cuda/std (cooperative_groups needs it) here; nvcc adds it
        flags.append(f"-I{cccl}")
    if not (root / "include" / "curand_mtgp32_kernel.h").exists():
        # clang's CUDA wrapper header includes it unconditionally; minimal toolkits lack it
        flags.append(f"-I{COMPAT_INCLUDE_DIR}")
    return flags


def cuda_link_flags(root: Path) -> list[str]:
    libdir = cuda_libdir(root)
    return [f"-L{libdir}", "-lcudart", f"-Wl,-rpath,{libdir}"]
