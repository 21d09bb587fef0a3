"""The recorder's entry-point resolution on a machine without a GPU (issue 21): libraries
that take driver functions themselves — dlopen + dlsym on libcuda, or cuGetProcAddress, as
the CUDA runtime (shared or static), cuBLAS, Triton, CuPy and JAX do — are served the
recorder's wrappers, exactly for the versions it wraps, and other lookups are untouched.

No driver runs here, so libcuda.so.1 is a stand-in (entry_points/stand_in_libcuda.c) whose
functions return markers: a test sees which function a call reached. Like the real driver,
it binds its own symbols (-Bsymbolic): what its cuGetProcAddress returns is its own function,
which the recorder must recognise, not a preloaded definition of the same name.

CUDA graphs are followed only if every driver function that instantiates, changes, destroys
or launches an executable graph (or begins or ends a capture) is wrapped, in every version
the driver exports: one left unwrapped, reached by a lookup, would change a graph behind its
mirror. GRAPH_FUNCTIONS lists them; one test checks the list against cuda.h. The real driver is
exercised by the GPU tests that record Python frameworks and static-runtime builds
(test_record_frameworks_gpu.py, test_record_static_runtime_gpu.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import mneme.runtime
import pytest

SOURCES = Path(__file__).with_name("entry_points")
RECORDER = Path(mneme.runtime.__file__).with_name("libmneme_recorder.so")
CC = shutil.which("clang-22") or shutil.which("cc")
CUDA_H = Path("/usr/local/cuda-13.0/include/cuda.h")

#: Every exported version of every driver function that instantiates, changes, destroys or
#: launches an executable graph, or begins or ends a stream capture (graph_driver_api.cpp).
GRAPH_FUNCTIONS = [
    "cuGraphInstantiate", "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags",
    "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz",
    "cuGraphExecKernelNodeSetParams", "cuGraphExecKernelNodeSetParams_v2",
    "cuGraphExecMemcpyNodeSetParams", "cuGraphExecMemsetNodeSetParams", "cuGraphExecHostNodeSetParams",
    "cuGraphExecChildGraphNodeSetParams", "cuGraphExecEventRecordNodeSetEvent",
    "cuGraphExecEventWaitNodeSetEvent", "cuGraphExecNodeSetParams", "cuGraphNodeSetEnabled",
    "cuGraphExecExternalSemaphoresSignalNodeSetParams", "cuGraphExecExternalSemaphoresWaitNodeSetParams",
    "cuGraphExecBatchMemOpNodeSetParams", "cuGraphExecUpdate", "cuGraphExecUpdate_v2",
    "cuGraphExecDestroy", "cuGraphLaunch", "cuGraphLaunch_ptsz",
    "cuStreamBeginCapture", "cuStreamBeginCapture_ptsz", "cuStreamBeginCapture_v2",
    "cuStreamBeginCapture_v2_ptsz", "cuStreamBeginCaptureToGraph", "cuStreamBeginCaptureToGraph_ptsz",
    "cuStreamEndCapture", "cuStreamEndCapture_ptsz",
]
#: cuda.h functions of those families that change nothing, so need no wrapper.
GRAPH_READERS = {"cuGraphExecGetFlags"}


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
    cc("-shared", "-fPIC", "-Wl,-Bsymbolic", str(SOURCES / "stand_in_libcuda.c"), "-o", "libcuda.so.1")
    cc("-shared", "-fPIC", str(SOURCES / "next_first.c"), "-o", "libnext_first.so", "-ldl")
    cc("-shared", "-fPIC", str(SOURCES / "next_second.c"), "-o", "libnext_second.so")
    cc("-shared", "-fPIC", str(SOURCES / "stand_in_libcudart.c"), "-o", "libcudart.so.13", "-ldl")
    cc(str(SOURCES / "lookup_app.c"), "-o", "lookup_app", "-L.", "-lnext_first", "-lnext_second",
       "-l:libcudart.so.13", "-ldl", "-Wl,-rpath," + str(out))
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


def test_cooperative_launches_are_served_their_wrappers(lookups):
    """cuLaunchCooperativeKernel (and its per-thread-stream version), which a static CUDA
    runtime's cudaLaunchCooperativeKernel takes from cuGetProcAddress, reach the recorder's
    wrappers, which reach exactly the driver's function of that version (issue 35)."""
    assert lookups["dlsym cuLaunchCooperativeKernel"] == [RECORDER.name, "706"]
    assert lookups["proc cuLaunchCooperativeKernel"] == [RECORDER.name, "706"]
    assert lookups["proc cuLaunchCooperativeKernel/ptsz"] == [RECORDER.name, "707"]


def test_rtld_next_from_another_library_keeps_its_meaning(lookups):
    """dlsym(RTLD_NEXT) searches after the caller's library, not after the recorder that
    now answers every dlsym: an interposing library still finds the one it wraps."""
    assert lookups["rtld_next 2"] == ["libnext_second.so"]


def test_the_shared_runtime_gets_the_drivers_own_functions(lookups):
    """libcudart.so is followed at its own API: its lookups are never served the wrappers,
    so one launch or graph change is seen once (entry_points.cpp, in_shared_runtime)."""
    for key in ("cudart_dlsym cuGraphLaunch", "cudart_dlsym cuLaunchKernel",
                "cudart_proc cuGraphInstantiate", "cudart_proc cuGraphExecUpdate"):
        assert lookups[key] == ["libcuda.so.1"], key


@pytest.mark.parametrize("name", GRAPH_FUNCTIONS)
def test_dlsym_serves_every_version_of_the_graph_functions(lookups, name):
    """By name on libcuda (JAX/XLA's cuda stub): the wrapper, which calls exactly the
    driver's function of that name (its marker comes back)."""
    owner, returned, expected = lookups[f"graph_dlsym {name}"]
    assert owner == RECORDER.name
    assert returned == expected


def test_cu_get_proc_address_serves_every_version_of_the_graph_functions(lookups):
    """By cuGetProcAddress (a static CUDA runtime, XLA): whatever version the CUDA version
    and the per-thread flag pick is served as its wrapper, which reaches that version."""
    served = {}
    for key, (name, owner, returned, expected) in ((k, v) for k, v in lookups.items() if k.startswith("graph_proc ")):
        assert (owner, returned) == (RECORDER.name, expected), f"{key} -> {name}"
        served[name] = key
    assert sorted(served) == sorted(GRAPH_FUNCTIONS)
    # the version decides: CUDA 11 gets the five-argument cuGraphInstantiate_v2, CUDA 12 WithFlags
    assert lookups["graph_proc cuGraphInstantiate@11000"][0] == "cuGraphInstantiate_v2"
    assert lookups["graph_proc cuGraphInstantiate@12000"][0] == "cuGraphInstantiateWithFlags"
    assert lookups["graph_proc cuGraphLaunch@10000/ptsz"][0] == "cuGraphLaunch_ptsz"


def _exported_versions(header: str) -> set[str]:
    """The exported names cuda.h declares or maps a name to: every CUDAAPI declaration (the
    internal block keeps the old versions), each macro target (#define f f_v2), and the
    _ptsz variants of __CUDA_API_PTSZ(f)."""
    names = set(re.findall(r"CUresult\s+CUDAAPI\s+(\w+)\s*\(", header))
    for target in re.findall(r"#define\s+\w+\s+__CUDA_API_PTSZ\((\w+)\)", header):
        names |= {target, target + "_ptsz"}
    names |= set(re.findall(r"#define\s+cu\w+\s+(cu\w+)\s*$", header, re.MULTILINE))
    return names


def _changes_graphs(name: str) -> bool:
    base = re.sub(r"(_v\d+)?(_ptsz)?$", "", name)
    return (base.startswith(("cuGraphExec", "cuGraphInstantiate", "cuStreamBeginCapture"))
            or base in {"cuGraphNodeSetEnabled", "cuGraphLaunch", "cuStreamEndCapture"})


def test_every_graph_changing_driver_function_of_cuda_h_is_wrapped():
    """A future CUDA that adds a function (or a version of one) changing executable graphs
    fails here until the recorder wraps it (graph_driver_api.cpp, kWrappedDriverFunctions)
    and GRAPH_FUNCTIONS lists it, or GRAPH_READERS says it changes nothing."""
    if not CUDA_H.is_file():
        pytest.skip(f"{CUDA_H} not here")
    if not RECORDER.is_file():
        pytest.skip(f"{RECORDER} not built")
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    wanted = {n for n in _exported_versions(CUDA_H.read_text()) if _changes_graphs(n)} - GRAPH_READERS
    assert {"cuGraphInstantiate_v2", "cuGraphExecUpdate_v2", "cuGraphLaunch_ptsz"} <= wanted  # the parse works
    listing = subprocess.run([nm, "-D", "--defined-only", str(RECORDER)], capture_output=True, text=True,
                             check=True).stdout
    defined = {line.split()[-1] for line in listing.splitlines() if " T " in line}
    assert sorted(wanted - defined) == [], "graph driver functions the recorder does not wrap"
    assert sorted(wanted - set(GRAPH_FUNCTIONS)) == [], "wrapped but not tested as served"
    entry_points = (Path(__file__).parents[2] / "packages/mneme-runtime/native/src/entry_points.cpp").read_text()
    served = set(re.findall(r'"(cu\w+)"', entry_points))
    assert sorted(set(GRAPH_FUNCTIONS) - served) == [], "missing from kWrappedDriverFunctions"
