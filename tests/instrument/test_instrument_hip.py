"""The same wrapper on HIP sources (-x hip --offload-arch=gfx90a, no ROCm): the objects carry
the AMDGPU kernels' IR, each module compiling alone to a gfx90a code object (compile level)."""

import pytest
from instrument_support import HIP_PROGRAMS, outcome
from mneme.instrument.section import read_kernels

NAMES = [p.name for p in HIP_PROGRAMS]
PROGRAMS = {p.name: p for p in HIP_PROGRAMS}


@pytest.mark.parametrize("name", NAMES)
def test_hip_port_embeds_amdgpu_kernels(instrumented_hip, name):
    build = outcome(instrumented_hip[name])
    kernels = [k for obj in build.objects for k in read_kernels(obj)]
    assert sorted({k.demangled for k in kernels}) == list(PROGRAMS[name].kernels)
    jit = pytest.importorskip("mneme.replay.jit")
    for k in kernels:
        assert k.target == "amdgcn-amd-amdhsa" and k.arch == "gfx90a" and k.complete
        assert k.launch_bounds.get("max_threads")  # amdgpu-flat-work-group-size
        module = jit.parse_module(k.ir, k.name)
        assert "amdgpu_kernel" in str(module.function(k.name))
        result = jit.compile_kernel(k.ir, jit.CompileConfig.for_level("O3", arch="gfx90a"), k.name)
        assert result.binary[:4] == b"\x7fELF"


def test_hip_by_value_struct_layout(instrumented_hip):
    build = outcome(instrumented_hip["struct_by_value"])
    kernels = {k.demangled.split("(")[0]: k for k in read_kernels(build.objects[0])}
    weigh = kernels["weigh"]
    assert weigh.params[0].byval and weigh.params[0].size == 128
    assert weigh.params[1].pointer and weigh.params[1].address_space == 1
