"""Shared helpers of the corpus checks: load the corpus modules, build the corpus once per session."""

import ctypes
import ctypes.util
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from script_modules import load_script

MAX_JOBS = 2  # the machines have 2 cores shared with other work


corpus_build = load_script("tests/corpus/build.py")
checklines = load_script("tests/corpus/checklines.py")

CUDA_PROGRAMS = corpus_build.discover_programs("cuda")
HIP_PROGRAMS = corpus_build.discover_programs("hip")


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


def libcuda_linkable(cuda_root: Path) -> bool:
    """Whether `-lcuda` resolves: a toolkit stub or an installed driver library."""
    stubs = corpus_build.cuda_library_dir(cuda_root) / "stubs" / "libcuda.so"
    return stubs.exists() or ctypes.util.find_library("cuda") is not None


def make_link_only_libcuda(objects: list[Path], out_dir: Path, compiler: str) -> Path:
    """A libcuda.so defining exactly the cu* symbols the objects use, for linking only.

    This machine has no driver and the toolkit no stubs/ folder; the real libcuda.so.1
    comes with the driver wherever the program runs. Every function traps if called.
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
            compiler.replace("++", ""),
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
    out = out_root / program.name
    link_extra = []
    if "-lcuda" in program.link_flags and not libcuda_linkable(cuda_root):
        objects = []
        for cmd, obj in corpus_build.compile_commands(program, out / "probe", cuda_root=cuda_root):
            obj.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(cmd, check=True, capture_output=True)
            objects.append(obj)
        link_extra = [
            f"-L{make_link_only_libcuda(objects, out / 'libcuda', corpus_build.DEFAULT_COMPILER)}"
        ]
    return corpus_build.build_program(
        program.directory, out, extra_link_flags=link_extra, cuda_root=cuda_root
    )


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
