"""Shared helpers of the corpus checks: load the corpus modules, build the corpus once per session."""

import ctypes
import ctypes.util
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from corpus_linking import MAX_JOBS, build_corpus_program
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


def _build_cuda(program, out_root: Path, cuda_root: Path):
    return build_corpus_program(program, out_root / program.name, cuda_root=cuda_root)


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # reported by the test that looks at this program
        return exc


@pytest.fixture(scope="session")
def corpus_outputs(tmp_path_factory):
    """Builds of every program and the kernel list of its device IR, keyed by (language, name).

    Values are a BuildResult / list of names, or the exception that building raised.
    With MNEME_CORPUS_PREBUILT=DIR (a GPU host without clang), the CUDA executables are
    taken from DIR/<program>/<program>, as `tests/corpus/build.py --out DIR` leaves them.
    """
    prebuilt = os.environ.get("MNEME_CORPUS_PREBUILT")
    if prebuilt:
        return {
            ("build", "cuda", p.name): corpus_build.BuildResult(
                p, [], Path(prebuilt) / p.name / p.name, [])
            for p in CUDA_PROGRAMS
        }
    require_tools(corpus_build.DEFAULT_COMPILER, corpus_build.DEFAULT_CXXFILT)
    cuda_root = corpus_build.find_cuda_root()
    out_root = tmp_path_factory.mktemp("corpus")
    jobs = {}
    with ThreadPoolExecutor(max_workers=MAX_JOBS) as pool:
        for program in CUDA_PROGRAMS:
            jobs["build", "cuda", program.name] = pool.submit(
                _outcome, _build_cuda, program, out_root / "cuda", cuda_root
            )
        for program in HIP_PROGRAMS:
            jobs["build", "hip", program.name] = pool.submit(
                _outcome,
                corpus_build.build_program,
                program.directory,
                out_root / "hip" / program.name,
            )
        for program in CUDA_PROGRAMS + HIP_PROGRAMS:
            jobs["kernels", program.language, program.name] = pool.submit(
                _outcome, corpus_build.device_kernels, program.directory
            )
        return {key: future.result() for key, future in jobs.items()}


def outcome(outputs, *key):
    value = outputs[key]
    if isinstance(value, Exception):
        pytest.fail(f"{' '.join(key)}: {value}")
    return value
