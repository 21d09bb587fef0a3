"""The examples build through the CMake package (find_package(mneme) + add_mneme()) with
clang-22, warning-free, and embed exactly their kernels; what needs no GPU runs here."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from examples_support import (
    EXAMPLES,
    KERNELS,
    PROGRAMS,
    corpus_build,
    require_toolchain,
    run_mneme,
)
from mneme.runtime import driver_available


@pytest.fixture
def built(examples_build_result):
    if examples_build_result is None:
        pytest.skip("MNEME_EXAMPLES_PREBUILT: not built here")
    return examples_build_result


def test_both_programs_build_warning_free_through_the_cmake_package(built):
    assert sorted(built.executables) == sorted(PROGRAMS)
    assert built.warnings == [], "\n".join(built.warnings)
    ninja = (built.build_dir / "build.ninja").read_text()
    assert "mneme-clang++ --mneme-launcher" in ninja  # add_mneme() set the launchers
    configure = built.commands[0]
    assert any(a.startswith("-DCMAKE_PREFIX_PATH=") for a in configure)
    for exe in built.executables.values():
        dynamic = subprocess.run(
            ["readelf", "-d", str(exe)], capture_output=True, text=True, check=True
        ).stdout
        assert "libcudart.so" in dynamic  # the shared runtime, which the recorder interposes


@pytest.mark.parametrize("name", PROGRAMS)
def test_inspect_lists_exactly_the_expected_kernels(examples, name):
    proc = run_mneme("inspect", str(examples[name]), "--json")
    assert proc.returncode == 0, proc.stderr
    kernels = json.loads(proc.stdout)["kernels"]
    assert sorted(k["demangled"] for k in kernels) == sorted(KERNELS[name])
    for k in kernels:
        assert k["complete"] and k["unresolved"] == [], k["demangled"]
        assert k["target"] == "nvptx64-nvidia-cuda" and k["arch"] == "sm_90"


@pytest.mark.parametrize("name", PROGRAMS)
def test_checksum_lines_name_the_embedded_kernels(name):
    """The kernel names the program prints in its MNEME-CHECK lines are the demangled names
    of its kernels (the recorder's names), every kernel once."""
    source = (EXAMPLES / name / f"{name}.cu").read_text()
    printed = re.findall(r'^const char K_\w+\[\] = "([^"]+)";', source, re.M)
    assert sorted(printed) == sorted(KERNELS[name])


@pytest.mark.parametrize("name", PROGRAMS)
def test_kernel_ir_has_no_contractible_arithmetic(examples, name):
    """Bit-identical results need the same rounding in the application, the host reference
    and every replay pipeline: only explicit fma(), no contract/fast flags, no fmuladd."""
    contractible = re.compile(r"= (fadd|fsub|fmul|fdiv)\b[^\n=]*\b(contract|fast|reassoc)\b")
    for kernel in KERNELS[name]:
        bare = kernel.split("(")[0]
        proc = run_mneme("inspect", str(examples[name]), "--ir", bare)
        assert proc.returncode == 0, proc.stderr
        assert "llvm.fmuladd" not in proc.stdout, kernel
        assert not contractible.search(proc.stdout), kernel


@pytest.mark.parametrize("name", PROGRAMS)
def test_device_code_does_not_depend_on_fp_contraction(name):
    """The application's own build (clang's CUDA default -ffp-contract=fast lets the backend
    fuse any multiply feeding an add) computes exactly what a build without contraction
    computes: the PTX differs at most in the .rn marks that allow ptxas to fuse, and there
    is nothing left to fuse."""
    require_toolchain()
    flags = corpus_build.cuda_compile_flags(corpus_build.find_cuda_root())
    ptx = {}
    for mode in ("fast", "off"):
        proc = subprocess.run(
            [
                "clang++-22",
                *flags,
                "-O3",
                "-std=c++17",
                f"-I{EXAMPLES / 'common'}",
                f"-ffp-contract={mode}",
                "--cuda-device-only",
                "-S",
                str(EXAMPLES / name / f"{name}.cu"),
                "-o",
                "-",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        ptx[mode] = re.sub(r"\.rn(?=\.f(32|64)\b)", "", proc.stdout)
    assert ptx["fast"] == ptx["off"]
    assert re.search(r"\bmul\.f32\b", ptx["off"]) is None  # the stencil multiplies only in fmaf


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("cg_solver", ["--n", "1"], "--n wants an integer in [2, 1000], not '1'"),
        ("cg_solver", ["--tol", "x"], "--tol wants a number"),
        ("cg_solver", ["--block", "2048"], "--block wants an integer in [1, 1024]"),
        ("cg_solver", ["--iters"], "option '--iters' needs a value"),
        ("stencil", ["--block", "64x32"], "--block wants BX, BXxBY or BXxBYxBZ"),
        ("stencil", ["--nx=2"], "--nx wants an integer in [3, 32768], not '2'"),
        ("stencil", ["--frobnicate", "1"], "unknown option '--frobnicate'"),
    ],
)
def test_bad_arguments_exit_64_with_one_line(examples, name, args, message):
    proc = subprocess.run([str(examples[name]), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 64
    first, usage = proc.stderr.splitlines()
    assert first.startswith(f"{name}: error: ") and message in first
    assert usage.startswith(f"usage: {name} ")
    assert "MNEME-CHECK" not in proc.stdout


@pytest.mark.parametrize("name", PROGRAMS)
def test_fails_cleanly_without_gpu(examples, name):
    """Without a GPU the first CUDA call fails: exit 1 and one clear line, no checksums."""
    if driver_available():
        pytest.skip("a GPU is present; test_examples_gpu runs the programs for real")
    proc = subprocess.run([str(examples[name])], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("corpus: ") and " failed: " in proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    assert "MNEME-CHECK" not in proc.stdout


def test_build_script_cli_rebuilds_in_place(built):
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "build.py"), "--out", str(built.build_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"{n}: {p}" for n, p in built.executables.items()]
