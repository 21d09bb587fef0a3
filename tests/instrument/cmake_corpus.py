"""The CUDA corpus as one CMake project through mneme's CMake package: a target per program,
each made recordable by add_mneme() (mneme-clang++ as the compiler and linker launcher of
clang++-22, the program's own flags). The session builds it once (conftest.py's
``cmake_corpus``): the CMake package's test asserts that every target built and embeds its
manifest's kernels, and the tests of instrumented corpus programs (``instrumented``) read
the same executables and objects, which mneme-clang++ compiled exactly as it compiles when
called as the compiler (the launcher only names clang++-22 itself)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from corpus_linking import MAX_JOBS
from instrument_support import corpus_build, run_mneme

BIN = Path(sys.executable).parent


def find_cmake() -> tuple[str | None, str | None]:
    """cmake and ninja (this environment's first), each None where it is not installed."""
    return (shutil.which("cmake", path=str(BIN)) or shutil.which("cmake"),
            shutil.which("ninja", path=str(BIN)) or shutil.which("ninja"))


def cmake_tools() -> tuple[str, str | None]:
    cmake, ninja = find_cmake()
    if not cmake:
        pytest.skip("cmake is not installed")
    return cmake, ninja


def target_lines(target: str, program, cuda: Path) -> list[str]:
    """The CMakeLists lines of an executable ``target`` built from ``program``'s sources
    as C++ (clang++-22's CUDA mode through the corpus's flags), linked as the corpus links."""
    sources = " ".join(f'"{program.directory / s}"' for s in program.sources)
    flags = corpus_build.cuda_compile_flags(cuda) + list(program.flags)
    link = corpus_build.cuda_link_flags(program, cuda)
    return [
        f"add_executable({target} {sources})",
        f"set_source_files_properties({sources} TARGET_DIRECTORY {target} PROPERTIES LANGUAGE CXX)",
        f"target_compile_options({target} PRIVATE " + " ".join(f'"{f}"' for f in flags) + ")",
        f"target_link_options({target} PRIVATE " + " ".join(f'"{f}"' for f in link) + ")",
    ]


def cmake_build(src: Path, build: Path, defines: list[str], *, cmake: str,
                        ninja: str | None, jobs: int | None = None,
                        keep_going: bool = False) -> list[tuple[list[str], subprocess.CompletedProcess]]:
    """CMake's configure (Ninja where there is one) and build of ``src`` in ``build``:
    each command with its result; the build is not tried after a failed configure."""
    generator = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []
    build_cmd = [cmake, "--build", str(build)]
    if jobs:
        build_cmd += ["-j", str(jobs)]
    if keep_going:  # (past a target that fails: the others are built)
        build_cmd += ["--", "-k", "0"] if ninja else ["--", "-k"]
    runs = [(cmd := [cmake, "-S", str(src), "-B", str(build), *generator, *defines],
             subprocess.run(cmd, capture_output=True, text=True))]
    if runs[0][1].returncode == 0:
        runs.append((build_cmd, subprocess.run(build_cmd, capture_output=True, text=True)))
    return runs


def failure_of(runs: list[tuple[list[str], subprocess.CompletedProcess]]) -> str | None:
    """The first command of ``runs`` that failed, with the end of its output; None when
    all passed."""
    for cmd, proc in runs:
        if proc.returncode != 0:
            return f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return None


@dataclass
class CMakeCorpus:
    """The built project: its programs (those `-lcuda` can be linked for here), the build
    folder, and the configure and build commands with their exit status and output."""

    programs: list
    build: Path
    runs: list[tuple[list[str], subprocess.CompletedProcess]]

    @property
    def failure(self) -> str | None:
        """The first command that failed, with the end of its output; None when all passed."""
        return failure_of(self.runs)

    def executable(self, name: str) -> Path:
        return self.build / name

    def objects(self, program) -> list[Path]:
        """The program's objects, in the order of its sources (CMake names each after its
        source's path: CMakeFiles/<target>.dir/<path>.o)."""
        found = {o.name: o for o in (self.build / "CMakeFiles" / f"{program.name}.dir").rglob("*.o")}
        return [found[f"{Path(s).name}.o"] for s in program.sources if f"{Path(s).name}.o" in found]


def build_cmake_corpus(root: Path) -> CMakeCorpus | None:
    """Writes the project under ``root`` and builds every target (ninja keeps going past a
    target that fails, so the others are still there for their own tests); None without
    cmake."""
    cmake, ninja = find_cmake()
    if cmake is None:
        return None
    cmakedir = run_mneme("config", "cmakedir", check=True).stdout.strip()
    cuda = corpus_build.find_cuda_root()
    programs = [p for p in corpus_build.discover_programs("cuda")
                if "-lcuda" not in p.link_flags or (cuda / "lib64" / "stubs" / "libcuda.so").exists()]
    lines = ["cmake_minimum_required(VERSION 3.21)", "project(corpus LANGUAGES CXX)",
             "find_package(mneme 0.1 REQUIRED)"]
    for program in programs:
        lines += [*target_lines(program.name, program, cuda), f"add_mneme({program.name})"]
    src = root / "src"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text("\n".join(lines) + "\n")
    build = root / "build"
    runs = cmake_build(src, build, ["-DCMAKE_CXX_COMPILER=clang++-22",
                                            f"-DCMAKE_PREFIX_PATH={cmakedir}"],
                               cmake=cmake, ninja=ninja, jobs=MAX_JOBS, keep_going=True)
    return CMakeCorpus(programs, build, runs)
