"""Helpers of the recorder tests: instrumented corpus executables and `mneme record` runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from script_modules import load_script

corpus_build = load_script("tests/corpus/build.py")
checklines = load_script("tests/corpus/checklines.py")
PROGRAMS = {p.name: p for p in corpus_build.discover_programs("cuda")}


def executable(name: str, out: Path, compiler: str = "mneme-clang++") -> Path:
    """An instrumented build of a corpus program: MNEME_RECORD_PREBUILT=DIR (GPU hosts have
    no clang) or built now with the wrapper."""
    prebuilt = os.environ.get("MNEME_RECORD_PREBUILT")
    if prebuilt and compiler == "mneme-clang++":
        path = Path(prebuilt) / name / name
        if not path.is_file():
            pytest.skip(f"{path} was not prebuilt")
        return path
    if shutil.which(compiler) is None or shutil.which("clang++-22") is None:
        pytest.skip(f"{compiler} / clang++-22 not installed")
    result = corpus_build.build_program(PROGRAMS[name].directory, out / name, compiler=compiler)
    return result.executable


def mneme_record(db: Path, exe: Path, *options: str, args=None, env=None) -> subprocess.CompletedProcess:
    program = PROGRAMS.get(exe.name)
    argv = list(program.args if program and args is None else args or [])
    return subprocess.run(
        [sys.executable, "-m", "mneme.cli", "record", "-rdb", str(db), *options, "--", str(exe), *argv],
        capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})},
    )


def require_two_gpus() -> None:
    """Skips unless GPUs 0 and 1 exist and reach each other's memory (peer access)."""
    from mneme.runtime import can_access_peer, device_count, driver_available

    if not driver_available():
        pytest.skip("no usable CUDA driver")
    if device_count() < 2:
        pytest.skip("needs two GPUs (nvidia-h100-x2 / nvidia-h200-x2)")
    if not (can_access_peer(0, 1) and can_access_peer(1, 0)):
        pytest.skip("GPUs 0 and 1 cannot reach each other's memory")
