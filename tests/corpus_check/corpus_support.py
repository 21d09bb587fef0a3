"""Shared helpers of the corpus checks: load the corpus modules, build the corpus once per session."""

import ctypes
import ctypes.util
import os
import shutil
from pathlib import Path

import early_builds
import pytest
from corpus_linking import MAX_JOBS  # noqa: F401  (the corpus_check modules import it here)
from script_modules import load_script

corpus_build = load_script("tests/corpus/build.py")
checklines = load_script("tests/corpus/checklines.py")

CUDA_PROGRAMS = corpus_build.discover_programs("cuda")
HIP_PROGRAMS = corpus_build.discover_programs("hip")


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


def gpu_available() -> bool:
    """True where a CUDA driver loads and reports at least one device."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return (
        libcuda.cuInit(0) == 0
        and libcuda.cuDeviceGetCount(ctypes.byref(count)) == 0
        and count.value > 0
    )


@pytest.fixture(scope="session")
def corpus_outputs(tmp_path_factory):
    """Builds of every program and the kernel list of its device IR, keyed by (language, name).

    Values are a BuildResult / list of names, or the exception that building raised.
    With MNEME_CORPUS_PREBUILT=DIR (a GPU host without clang), the CUDA executables are
    taken from DIR/<program>/<program>, as `tests/corpus/build.py --out DIR` leaves them.
    Under scripts/test.sh the builds were made before the run (tests/early_builds.py).
    """
    prebuilt = os.environ.get("MNEME_CORPUS_PREBUILT")
    if prebuilt:
        return {
            ("build", "cuda", p.name): corpus_build.BuildResult(
                p, [], Path(prebuilt) / p.name / p.name, [])
            for p in CUDA_PROGRAMS
        }
    require_tools(corpus_build.DEFAULT_COMPILER, corpus_build.DEFAULT_CXXFILT)
    made = early_builds.early("corpus_outputs", early_builds.corpus_outputs_meta())
    if made is not None:
        return made
    return early_builds.build_corpus_outputs(tmp_path_factory.mktemp("corpus"))


def outcome(outputs, *key):
    value = outputs[key]
    if isinstance(value, Exception):
        pytest.fail(f"{' '.join(key)}: {value}")
    return value
