"""Where the recorder says a kernel's code came from (its `origin`, docs/record.md
"Origins"), checked on a machine without a GPU: the rules are the recorder's own functions
(kernel_registry.cpp), called by a small program on objects it opens. That recorded
kernels carry them is exercised by the GPU tests (app_recording.py reports origins)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import mneme.runtime
import pytest

SOURCES = Path(__file__).with_name("origin")
STAND_IN_LIBCUDA = Path(__file__).with_name("entry_points") / "stand_in_libcuda.c"
RECORDER = Path(mneme.runtime.__file__).with_name("libmneme_recorder.so")
CC = shutil.which("clang-22") or shutil.which("cc")
CXX = shutil.which("clang++-22") or shutil.which("c++")


@pytest.fixture(scope="module")
def origins(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(the build folder, origin by line) of origin_app run against the recorder."""
    if CC is None or CXX is None:
        pytest.skip("no C/C++ compiler")
    if not RECORDER.is_file():
        pytest.skip(f"{RECORDER} not built")
    out = tmp_path_factory.mktemp("origin").resolve()
    (out / "sub").mkdir()
    def build(compiler, *args):
        subprocess.run([compiler, "-O1", "-w", *args], check=True, cwd=out)
    build(CC, "-shared", "-fPIC", str(STAND_IN_LIBCUDA), "-o", "libcuda.so.1")
    build(CC, "-shared", "-fPIC", str(SOURCES / "image_holder.c"), "-o", "libimage_holder.so")
    build(CC, "-shared", "-fPIC", str(SOURCES / "stand_in_cudart.c"), "-o", "libcudart.so.13")
    build(CXX, "-std=c++17", str(SOURCES / "origin_app.cpp"), "-o", "origin_app", str(RECORDER),
          "-ldl", "-Wl,-rpath," + str(RECORDER.parent))
    env = {**os.environ, "LD_LIBRARY_PATH": str(out), "LD_PRELOAD": str(RECORDER)}
    env.pop("MNEME_RECORD_DB", None)  # inactive: nothing is recorded
    result = subprocess.run([str(out / "origin_app"), str(out / "sub/../libimage_holder.so"),
                             str(out / "sub/../libcudart.so.13")],
                            capture_output=True, text=True, env=env, timeout=60, cwd=out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out, dict(line.split(" ", 1) for line in result.stdout.splitlines())


def test_the_main_program_is_the_resolved_executable(origins):
    out, lines = origins
    assert lines["executable"] == str(out / "origin_app")


def test_a_registered_image_belongs_to_the_object_holding_it(origins):
    out, lines = origins
    # named as the loader opened it, with "sub/.." normalised away
    assert lines["holder"] == str(out / "libimage_holder.so")


def test_memory_outside_every_object_has_no_origin(origins):
    assert origins[1]["heap"] == "-"


def test_a_loaded_module_belongs_to_the_object_that_loaded_it(origins):
    out, lines = origins
    assert lines["load_by_holder"] == str(out / "libimage_holder.so")


def test_the_shared_runtime_loading_a_registered_fatbinary_keeps_its_origin(origins):
    out, lines = origins
    assert lines["load_by_cudart_of_registered"] == str(out / "libimage_holder.so")
    assert lines["load_by_cudart_of_heap"] == str(out / "libcudart.so.13")


def test_a_file_load_is_the_file_as_an_absolute_path(origins):
    out, lines = origins
    assert lines["file"] == str(out / "kernels.cubin")
