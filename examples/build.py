"""Configure and build the mneme examples with CMake + Ninja (stdlib only).

Usable as a module (load it by path, e.g. with importlib, under a name of your choice)::

    result = build_examples("build/examples")          # configure + build
    result.executables                                  # {"cg_solver": Path, "stencil": Path}
    result.warnings                                     # compiler warning lines, if any
    prebuilt_executables("/some/dir")                   # already-built programs (GPU hosts)

and as a CLI::

    python examples/build.py [--out DIR] [--compiler CMD] [--cmake CMD] [-D VAR=VALUE] [-v]

The projects use ``find_package(mneme)`` + ``add_mneme()``, so every compile and link goes
through ``mneme-clang++``; ``CMAKE_PREFIX_PATH`` comes from ``mneme config cmakedir``. For
CMake's own CUDA compiler checks (which do not go through the wrapper) a minimal toolkit
needs the CCCL include folder and, without curand, the wrapper's empty
``curand_mtgp32_kernel.h``: both are added to ``CMAKE_CUDA_FLAGS`` when needed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parent
PROGRAMS = ("cg_solver", "stencil")
DEFAULT_COMPILER = "clang++-22"
CUDA_ARCHITECTURES = "90"


class ExamplesError(Exception):
    """The examples could not be configured or built; the message says why."""


@dataclass
class BuildResult:
    build_dir: Path
    executables: dict[str, Path]
    commands: list[list[str]]
    output: str = ""  # what configure and build printed (stdout and stderr)
    warnings: list[str] = field(default_factory=list)  # the compiler's "warning:" lines


def _tool(name: str) -> str | None:
    """A tool of the running Python environment first (pip's cmake/ninja, mneme), else PATH."""
    here = Path(sys.executable).parent
    return shutil.which(name, path=os.pathsep.join([str(here), os.environ.get("PATH", "")]))


def find_cuda_root() -> Path:
    candidates = [os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME")]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    candidates.append("/usr/local/cuda")
    for candidate in candidates:
        if candidate and (Path(candidate) / "include" / "cuda_runtime.h").is_file():
            return Path(candidate)
    raise ExamplesError(
        "no CUDA toolkit found: set CUDA_PATH to the CUDA root "
        "(the folder with include/cuda_runtime.h)"
    )


def mneme_config(key: str, mneme: str | None = None) -> str:
    command = mneme or _tool("mneme")
    if command is None:
        raise ExamplesError(
            "the mneme command is not installed: activate the environment "
            "where mneme-instrument is installed"
        )
    proc = subprocess.run([command, "config", key], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ExamplesError(f"mneme config {key} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def cmake_cuda_flags(cuda_root: Path, mneme_includedir: str) -> str:
    """CMAKE_CUDA_FLAGS that let CMake's own CUDA checks pass with clang on this toolkit."""
    flags = ["-Wno-unknown-cuda-version"]
    if (cuda_root / "include" / "cccl").is_dir():  # CUDA 13 keeps cuda/std there
        flags.append(f"-I{cuda_root / 'include' / 'cccl'}")
    if not (cuda_root / "include" / "curand_mtgp32_kernel.h").exists():
        flags.append(f"-I{Path(mneme_includedir) / 'compat'}")  # clang includes it always
    return " ".join(flags)


def configure_command(
    build_dir: str | os.PathLike,
    compiler: str = DEFAULT_COMPILER,
    cmake: str | None = None,
    ninja: str | None = None,
    cuda_root: Path | None = None,
    mneme: str | None = None,
    defines: Sequence[str] = (),
) -> list[str]:
    cmake = cmake or _tool("cmake")
    ninja = ninja or _tool("ninja")
    if cmake is None:
        raise ExamplesError("cmake not found: pip install cmake (or pass --cmake)")
    if ninja is None:
        raise ExamplesError("ninja not found: pip install ninja")
    root = cuda_root or find_cuda_root()
    includedir = mneme_config("includedir", mneme)
    cmakedir = mneme_config("cmakedir", mneme)
    return [
        cmake,
        "-S",
        str(EXAMPLES_DIR),
        "-B",
        str(build_dir),
        "-G",
        "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={ninja}",
        f"-DCMAKE_CXX_COMPILER={compiler}",
        f"-DCMAKE_CUDA_COMPILER={compiler}",
        f"-DCMAKE_CUDA_ARCHITECTURES={CUDA_ARCHITECTURES}",
        f"-DCMAKE_CUDA_FLAGS={cmake_cuda_flags(root, includedir)}",
        f"-DCMAKE_PREFIX_PATH={cmakedir}",
        f"-DCUDAToolkit_ROOT={root}",
        # the toolkit's folder as named (not resolved), as the corpus builds link it
        f"-DCMAKE_BUILD_RPATH={root / 'lib64'}",
        *(f"-D{d}" for d in defines),
    ]


def _run(cmd: list[str], verbose: bool) -> str:
    if verbose:
        print(shlex.join(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise ExamplesError(
            f"command failed (exit {proc.returncode}): {shlex.join(cmd)}\n{output.strip()[-6000:]}"
        )
    return output


def build_examples(
    build_dir: str | os.PathLike,
    compiler: str = DEFAULT_COMPILER,
    cmake: str | None = None,
    defines: Sequence[str] = (),
    jobs: int | None = None,
    verbose: bool = False,
) -> BuildResult:
    """Configure (or reconfigure) and build every example into build_dir."""
    build = Path(build_dir).resolve()
    configure = configure_command(build, compiler, cmake, defines=defines)
    command = [configure[0], "--build", str(build)] + (["-j", str(jobs)] if jobs else [])
    output = _run(configure, verbose) + _run(command, verbose)
    executables = {name: build / name / name for name in PROGRAMS}
    missing = [str(p) for p in executables.values() if not p.is_file()]
    if missing:
        raise ExamplesError(f"the build finished but did not produce {', '.join(missing)}")
    warnings = [line for line in output.splitlines() if "warning:" in line]
    return BuildResult(build, executables, [configure, command], output, warnings)


def prebuilt_executables(directory: str | os.PathLike) -> dict[str, Path]:
    """The programs in a folder of already-built examples: DIR/<name> or DIR/<name>/<name>
    (a build tree)."""
    found = {}
    for name in PROGRAMS:
        for candidate in (Path(directory) / name, Path(directory) / name / name):
            if candidate.is_file():
                found[name] = candidate
                break
        else:
            raise ExamplesError(
                f"{directory}: no {name} or {name}/{name} in it; build the "
                "examples (python examples/build.py --out DIR) and copy them"
            )
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build the mneme examples with CMake + Ninja through find_package(mneme)."
    )
    parser.add_argument(
        "--out", default="build/examples", help="build folder (default: %(default)s)"
    )
    parser.add_argument(
        "--compiler",
        default=DEFAULT_COMPILER,
        help="CXX and CUDA compiler, clang-22 (default: %(default)s)",
    )
    parser.add_argument("--cmake", help="cmake command (default: the environment's, else PATH)")
    parser.add_argument(
        "-D",
        dest="defines",
        action="append",
        default=[],
        metavar="VAR=VALUE",
        help="extra CMake cache entry (repeatable)",
    )
    parser.add_argument("-j", "--jobs", type=int, help="parallel build jobs")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each command")
    args = parser.parse_args(argv)
    try:
        result = build_examples(
            args.out, args.compiler, args.cmake, args.defines, args.jobs, args.verbose
        )
    except ExamplesError as exc:
        print(f"build.py: error: {exc}", file=sys.stderr)
        return 1
    for line in result.warnings:
        print(line, file=sys.stderr)
    for name, path in result.executables.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
