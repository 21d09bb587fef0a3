"""Helpers of the mneme-instrument tests: the corpus modules, the wrappers, one build per session."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from script_modules import load_script

BIN_DIR = Path(sys.executable).parent
MNEME_CLANGXX = str(BIN_DIR / "mneme-clang++")
MNEME_CLANG = str(BIN_DIR / "mneme-clang")
MNEME = str(BIN_DIR / "mneme")


corpus_build = load_script("tests/corpus/build.py")
CUDA_PROGRAMS = corpus_build.discover_programs("cuda")
HIP_PROGRAMS = corpus_build.discover_programs("hip")


def require_toolchain() -> None:
    missing = [t for t in ("clang++-22", "llvm-objcopy-22", "ptxas") if shutil.which(t) is None]
    if missing and not Path("/usr/local/cuda/bin/ptxas").exists():
        pytest.skip(f"not installed: {', '.join(missing)}")
    if not Path(MNEME_CLANGXX).exists():
        pytest.skip("mneme-clang++ is not installed in this environment")


def make_link_only_libcuda(objects: list[Path], out_dir: Path) -> Path:
    """A libcuda.so defining the cu* symbols the objects use (link only; traps if called).

    This machine has no driver and the toolkit no stubs/ folder; a GPU host links the
    real library.
    """
    undefined = subprocess.run(
        ["nm", "-u", *map(str, objects)], capture_output=True, text=True, check=True
    ).stdout.split()
    symbols = sorted({s for s in undefined if s.startswith("cu") and s[2:3].isupper()})
    out_dir.mkdir(parents=True, exist_ok=True)
    source = out_dir / "libcuda_link_only.c"
    source.write_text("".join(f"void {s}(void) {{ __builtin_trap(); }}\n" for s in symbols))
    subprocess.run(
        [
            "clang-22",
            "-shared",
            "-fPIC",
            "-x",
            "c",
            str(source),
            "-Wl,-soname,libcuda.so.1",
            "-o",
            str(out_dir / "libcuda.so"),
        ],
        check=True,
    )
    return out_dir


def needs_link_only_libcuda(program) -> bool:
    if "-lcuda" not in program.link_flags:
        return False
    root = corpus_build.find_cuda_root()
    stubs = corpus_build.cuda_library_dir(root) / "stubs" / "libcuda.so"
    import ctypes.util

    return not stubs.exists() and ctypes.util.find_library("cuda") is None


def build_with(program, out: Path, compiler: str):
    """Build a corpus program with `compiler` (objects first if -lcuda needs a stub)."""
    link_extra = []
    if needs_link_only_libcuda(program):
        objects = []
        for cmd, obj in corpus_build.compile_commands(program, out / "probe"):
            obj.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(cmd, check=True, capture_output=True)
            objects.append(obj)
        link_extra = [f"-L{make_link_only_libcuda(objects, out / 'libcuda')}"]
    return corpus_build.build_program(
        program.directory, out, compiler=compiler, extra_link_flags=link_extra
    )


def run_mneme(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([MNEME, *args], capture_output=True, text=True, check=check)


def outcome(value):
    if isinstance(value, Exception):
        pytest.fail(str(value))
    return value
