"""The CMake package: a corpus program built with CMake through mneme-clang++ as the compiler,
and one through find_package(mneme) + add_mneme() with plain clang++-22."""

import subprocess
from pathlib import Path

import pytest
from cmake_corpus import cmake_build, cmake_tools, failure_of, target_lines
from instrument_support import corpus_build, run_mneme
from mneme.instrument.section import read_kernels


def write_project(directory: Path, program, use_add_mneme: bool) -> None:
    lines = ["cmake_minimum_required(VERSION 3.21)", "project(corpus_app LANGUAGES CXX)",
             *target_lines("app", program, corpus_build.find_cuda_root())]
    if use_add_mneme:
        lines += ["find_package(mneme 0.1 REQUIRED)", "add_mneme(app)"]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "CMakeLists.txt").write_text("\n".join(lines) + "\n")


def configure_and_build(src: Path, build: Path, defines: list[str]) -> Path:
    cmake, ninja = cmake_tools()
    failure = failure_of(cmake_build(src, build, defines, cmake=cmake, ninja=ninja))
    assert failure is None, failure
    return build / "app"


def check_inspect(exe: Path, program) -> None:
    kernels = read_kernels(exe)
    assert sorted({k.demangled for k in kernels}) == list(program.kernels)
    assert all(k.complete for k in kernels)
    proc = run_mneme("inspect", str(exe), check=True)
    assert all(name in proc.stdout for name in program.kernels)


def test_cmake_with_wrapper_as_compiler(tmp_path):
    program = corpus_build.load_program(corpus_build.CORPUS_DIR / "cuda" / "multi_tu")
    cc = run_mneme("config", "cc", check=True).stdout.strip()
    cxx = run_mneme("config", "cxx", check=True).stdout.strip()
    write_project(tmp_path / "src", program, use_add_mneme=False)
    exe = configure_and_build(
        tmp_path / "src",
        tmp_path / "build",
        [f"-DCMAKE_C_COMPILER={cc}", f"-DCMAKE_CXX_COMPILER={cxx}"],
    )
    check_inspect(exe, program)


def test_cmake_find_package_add_mneme_rdc(tmp_path):
    program = corpus_build.load_program(corpus_build.CORPUS_DIR / "cuda" / "rdc_device_call")
    cmakedir = run_mneme("config", "cmakedir", check=True).stdout.strip()
    write_project(tmp_path / "src", program, use_add_mneme=True)
    exe = configure_and_build(
        tmp_path / "src",
        tmp_path / "build",
        ["-DCMAKE_CXX_COMPILER=clang++-22", f"-DCMAKE_PREFIX_PATH={cmakedir}"],
    )
    check_inspect(exe, program)
    assert all(k.stage == "link" for k in read_kernels(exe))  # the linker launcher ran too


def test_cmake_cuda_language_add_mneme_links_shared_cudart(tmp_path):
    """`project(... CUDA)` with clang++-22 as the CUDA compiler: add_mneme() instruments
    the CUDA objects and switches CMake's default static CUDA runtime to libcudart.so,
    which the recorder interposes."""
    program = corpus_build.load_program(corpus_build.CORPUS_DIR / "cuda" / "device_globals")
    cuda = corpus_build.find_cuda_root()
    includedir = run_mneme("config", "includedir", check=True).stdout.strip()
    cmakedir = run_mneme("config", "cmakedir", check=True).stdout.strip()
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.21)\n"
        "project(corpus_cuda LANGUAGES CXX CUDA)\n"
        f'add_executable(app "{program.directory / program.sources[0]}")\n'
        f'target_include_directories(app PRIVATE "{corpus_build.CUDA_COMMON_DIR}")\n'
        "find_package(mneme REQUIRED)\n"
        "add_mneme(app)\n"
    )
    # this toolkit has no curand and keeps CCCL apart: CMake's own CUDA checks need both
    cuda_flags = f"-I{includedir}/compat -I{cuda}/include/cccl -Wno-unknown-cuda-version"
    exe = configure_and_build(
        src,
        tmp_path / "build",
        [
            "-DCMAKE_CXX_COMPILER=clang++-22",
            "-DCMAKE_CUDA_COMPILER=clang++-22",
            "-DCMAKE_CUDA_ARCHITECTURES=90",
            f"-DCMAKE_CUDA_FLAGS={cuda_flags}",
            f"-DCMAKE_PREFIX_PATH={cmakedir}",
        ],
    )
    check_inspect(exe, program)
    needed = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True).stdout
    assert "libcudart.so" in needed


def test_every_corpus_program_builds_with_the_cmake_package(cmake_corpus):
    """One CMake project with a target per corpus program, each made recordable by
    add_mneme() (cmake_corpus.py, built once for the session): every one builds and embeds
    exactly its manifest's kernels."""
    if cmake_corpus is None:
        pytest.skip("cmake is not installed")
    assert cmake_corpus.failure is None, cmake_corpus.failure
    assert len(cmake_corpus.programs) >= 15
    for program in cmake_corpus.programs:
        kernels = read_kernels(cmake_corpus.executable(program.name))
        assert sorted({k.demangled for k in kernels}) == list(program.kernels), program.name
