"""`project(... LANGUAGES CUDA)` with `-DCMAKE_CUDA_COMPILER=$(mneme config cxx)` and no
other flag: CMake identifies the wrapper as Clang (its own checks compile through it, so
they get the arch, CCCL and curand set-up), builds, and the executable carries its kernels.
The project (sources/cmake_cuda) is a plain nvcc-style CUDA project."""

import subprocess
from pathlib import Path

import pytest
from cmake_corpus import cmake_build, cmake_tools, failure_of
from instrument_support import require_toolchain, run_mneme
from mneme.instrument.section import read_kernels

PROJECT = Path(__file__).resolve().parent / "sources" / "cmake_cuda"
KERNEL = "scale(float*, float, int)"
STATIC_RUNTIME_WARNING = "linking the static CUDA runtime"


def build_cuda_project(build: Path, *defines: str) -> tuple[Path, str]:
    """Configure and build the project; (executable, everything CMake and the build printed)."""
    require_toolchain()
    cmake, ninja = cmake_tools()
    runs = cmake_build(PROJECT, build, list(defines), cmake=cmake, ninja=ninja)
    failure = failure_of(runs)
    assert failure is None, failure
    return build / "app", "".join(proc.stdout + proc.stderr for _, proc in runs)


def cuda_compiler() -> str:
    return f"-DCMAKE_CUDA_COMPILER={run_mneme('config', 'cxx', check=True).stdout.strip()}"


def needed_libraries(exe: Path) -> str:
    return subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True).stdout


def test_cuda_language_with_the_wrapper_and_no_other_flag(tmp_path):
    exe, output = build_cuda_project(tmp_path / "build", cuda_compiler())
    assert "CUDA compiler identification is Clang 22" in output
    kernels = read_kernels(exe)
    assert [k.demangled for k in kernels] == [KERNEL] and kernels[0].complete
    proc = run_mneme("inspect", str(exe), check=True)
    assert KERNEL in proc.stdout and "_Z5scalePffi" in proc.stdout
    # CMake links its default, the static CUDA runtime, which `mneme record` cannot
    # interpose: the build works and the wrapper says so once, naming the fix
    assert output.count(STATIC_RUNTIME_WARNING) == 1
    assert "CMAKE_CUDA_RUNTIME_LIBRARY=Shared" in output


def test_cuda_language_with_the_shared_runtime_is_recordable(tmp_path):
    exe, output = build_cuda_project(
        tmp_path / "build", cuda_compiler(), "-DCMAKE_CUDA_RUNTIME_LIBRARY=Shared"
    )
    assert STATIC_RUNTIME_WARNING not in output
    assert "libcudart.so" in needed_libraries(exe)
    assert [k.demangled for k in read_kernels(exe)] == [KERNEL]


@pytest.mark.gpu
def test_cuda_language_build_records(tmp_path):
    from mneme.replay.db import Database
    from mneme.runtime import driver_available

    if not driver_available():
        pytest.skip("no usable CUDA driver")
    exe, _ = build_cuda_project(
        tmp_path / "build", cuda_compiler(), "-DCMAKE_CUDA_RUNTIME_LIBRARY=Shared"
    )
    db = tmp_path / "app.rdb"
    proc = run_mneme("record", "-rdb", str(db), "--", str(exe))
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr
    assert [k.demangled_name for k in Database.open(db).kernels()] == [KERNEL]
