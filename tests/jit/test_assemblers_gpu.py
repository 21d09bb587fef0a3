"""Cubins from nvJitLink and from the ptxas executable load and compute the same on a GPU
(IR path and PTX path); skipped without a driver."""

import numpy as np
import pytest
from jit_support import KERNELS_DIR
from mneme.replay.jit import CompileConfig, compile_kernel, compile_ptx, run_ptxas
from test_ptx import nvcc_ptx

pytestmark = pytest.mark.gpu

BASE = 0x260000000000
N = 1 << 16


@pytest.fixture(scope="module")
def device():
    from mneme.runtime import Device, driver_available

    if not driver_available():
        pytest.skip("no usable CUDA driver (libcuda.so.1 missing or cuInit failed)")
    return Device(0)


def run_math_mix(device, cubin: bytes, name: str, values: np.ndarray) -> np.ndarray:
    module = device.load_module(cubin)
    kernel = module.function(name)
    with device.address_space(BASE, 64 << 20) as space:
        x = space.allocate(values.nbytes)
        device.copy_to_device(x, values)
        kernel((N // 256, 1, 1), (256, 1, 1), x, N)
        device.synchronize()
        return device.read(x, N, np.float32)


@pytest.mark.parametrize("path", ["ir", "ptx"])
def test_both_assemblers_compute_the_same(device, kernels, tmp_path, path):
    """math_mix (expf, sinf, powf) is the kernel whose code differs between relocatable
    (nvJitLink) and whole-program (ptxas) compilation: the results must not."""
    values = np.linspace(-4.0, 4.0, N, dtype=np.float32)
    name = "_Z8math_mixPfi"
    if path == "ir":
        ptx = compile_kernel(kernels["math"], CompileConfig(), name).ptx
        cubins = {a: run_ptxas(ptx, "sm_90", assembler=a).cubin for a in ("nvjitlink", "ptxas")}
    else:
        ptx = nvcc_ptx(KERNELS_DIR / "math.cu", tmp_path / "math.ptx")
        cubins = {a: compile_ptx(ptx, CompileConfig(), name, assembler=a).binary
                  for a in ("nvjitlink", "ptxas")}
    outputs = {a: run_math_mix(device, cubin, name, values) for a, cubin in cubins.items()}
    expected = np.exp(values) + np.sin(values) * np.power(values, 1.5, where=values >= 0,
                                                          out=np.full_like(values, np.nan))
    for a, out in outputs.items():
        finite = np.isfinite(expected)
        assert np.allclose(out[finite], expected[finite], rtol=1e-5, atol=1e-5), a
    assert outputs["nvjitlink"].tobytes() == outputs["ptxas"].tobytes()


def test_ptx_launch_bounds_hold_on_the_gpu(device, tmp_path):
    """A kernel compiled with .maxntid 128 reports 128 threads per block at most."""
    ptx = nvcc_ptx(KERNELS_DIR / "math.cu", tmp_path / "math.ptx")
    bounded = compile_ptx(ptx, CompileConfig(max_threads=128), "_Z8math_mixPfi")
    module = device.load_module(bounded.binary)
    kernel = module.function("_Z8math_mixPfi")
    assert kernel.attributes.max_threads_per_block == 128
