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


def run_mneme(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([MNEME, *args], capture_output=True, text=True, check=check)


def outcome(value):
    if isinstance(value, Exception):
        pytest.fail(str(value))
    return value
