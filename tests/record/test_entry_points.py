"""The recorder's entry-point resolution on a machine without a GPU (issue 21): libraries
that take driver functions themselves — dlopen + dlsym on libcuda, or cuGetProcAddress, as
the CUDA runtime (shared or static), cuBLAS, Triton, CuPy and JAX do — are served the
recorder's wrappers, exactly for the versions it wraps, and other lookups are untouched.

No driver runs here, so libcuda.so.1 is a stand-in (entry_points/stand_in_libcuda.c) whose
functions return markers: a test sees which function a call reached. The real driver is
exercised by the GPU tests that record Python frameworks and static-runtime builds
(test_record_frameworks_gpu.py, test_record_static_runtime_gpu.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import mneme.runtime
import pytest

SOURCES = Path(__file__).with_name("entry_points")
RECORDER = Path(mneme.runtime.__file__).with_name("libmneme_recorder.so")
CC = shutil.which("clang-22") or shutil.which("cc")


@pytest.fixture(scope="module")
def lookups(tmp_path_factory) -> dict[str, list[str]]:
    """The lookup program's lines (by their first two words), run with the recorder preloaded."""
    if CC is None:
        pytest.skip("no C compiler (clang-22 or cc)")
    if not RECORDER.is_file():
        pytest.skip(f"{RECORDER} not built")
    out = tmp_path_factory.mktemp("entry_points")
    def cc(*args):
        subprocess.run([CC, "-O1", "-w", *args], check=True, cwd=out)
    cc("-shared", "-fPIC", str(SOURCES / "stand_in_libcuda.c"), "-o", "libcuda.so.1")
    cc("-shared", "-fPIC", str(SOURCES / "next_first.c"), "-o", "libnext_first.so", "-ldl")
    cc("-shared", "-fPIC", str(SOURCES / "next_second.c"), "-o", "libnext_second.so")
    cc(str(SOURCES / "lookup_app.c"), "-o", "lookup_app", "-L.", "-lnext_first", "-lnext_second",
       "-ldl", "-Wl,-rpath," + str(out))
    env = {**os.environ, "LD_LIBRARY_PATH": str(out), "LD_PRELOAD": str(RECORDER)}
    env.pop("MNEME_RECORD_DB", None)  # inactive: wrappers pass every call through
    result = subprocess.run([str(out / "lookup_app")], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return {" ".join(line.split()[:2]): line.split()[2:] for line in result.stdout.splitlines()}


def test_dlsym_on_libcuda_serves_the_wrapper_which_reaches_the_driver(lookups):
    owner, returned = lookups["dlsym cuLaunchKernel"]
    assert owner == RECORDER.name
    assert returned == "701"  # the stand-in's cuLaunchKernel ran behind the wrapper


def test_dlsym_leaves_unwrapped_driver_functions_alone(lookups):
    assert lookups["dlsym cuMemcpy"] == ["libcuda.so.1"]
    assert lookups["dlsym getpid"][0].startswith("libc.so")


def test_cu_get_proc_address_is_itself_served(lookups):
    assert lookups["dlsym cuGetProcAddress_v2"] == [RECORDER.name]
    assert lookups["proc cuGetProcAddress"] == [RECORDER.name]


def test_cu_get_proc_address_serves_wrappers_by_version(lookups):
    owner, returned = lookups["proc cuLaunchKernel"]
    assert (owner, returned) == (RECORDER.name, "701")
    # cuMemAlloc at CUDA 13 is cuMemAlloc_v2, which the recorder serves from its range...
    assert lookups["proc cuMemAlloc@13000"] == [RECORDER.name]
    # ...while the 32-bit version 1 is not wrapped and reaches the driver unchanged
    assert lookups["proc cuMemAlloc@2000"] == ["libcuda.so.1", "703"]
    assert lookups["proc cuMemcpy"] == ["libcuda.so.1"]


def test_rtld_next_from_another_library_keeps_its_meaning(lookups):
    """dlsym(RTLD_NEXT) searches after the caller's library, not after the recorder that
    now answers every dlsym: an interposing library still finds the one it wraps."""
    assert lookups["rtld_next 2"] == ["libnext_second.so"]
