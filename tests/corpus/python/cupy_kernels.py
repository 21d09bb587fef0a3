"""CuPy as scientific scripts use it: two ``RawKernel``s (a SAXPY and a block sum with dynamic
shared memory), an ``ElementwiseKernel``, a ``ReductionKernel``, and CuPy's own reductions,
sort and matrix product (cuBLAS). CuPy compiles its kernels at run time with NVRTC (into
CUPY_CACHE_DIR, a fresh temporary folder by default) and loads them through the driver.
Inputs come from NumPy with a fixed seed.

    python3 cupy_kernels.py
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("CUPY_CACHE_DIR", tempfile.mkdtemp(prefix="mneme-cupy-"))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
from corpus_report import checksum, require, skip, timed  # noqa: E402

SAXPY = cp.RawKernel(r"""
extern "C" __global__ void mneme_saxpy(const float* x, float* y, float a, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = a * x[i] + y[i];
}
""", "mneme_saxpy")

BLOCK_SUM = cp.RawKernel(r"""
extern "C" __global__ void mneme_block_sum(const float* x, float* partial, int n) {
    extern __shared__ float tile[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) tile[threadIdx.x] += tile[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = tile[0];
}
""", "mneme_block_sum")

SCALED_DIFF = cp.ElementwiseKernel(
    "float32 x, float32 y, float32 scale", "float32 z", "z = (x - y) * scale", "mneme_scaled_diff")

L2_NORM = cp.ReductionKernel(
    "float32 x", "float32 y", "x * x", "a + b", "y = sqrt(a)", "0", "mneme_l2_norm")


def main() -> None:
    try:
        devices = cp.cuda.runtime.getDeviceCount()
    except cp.cuda.runtime.CUDARuntimeError as exc:
        skip(f"CuPy sees no CUDA device ({exc})")
    if devices == 0:
        skip("CuPy sees no CUDA device")
    rng = np.random.default_rng(0)
    n, threads = 1 << 20, 256
    x_host = rng.standard_normal(n, dtype=np.float32)
    y_host = rng.standard_normal(n, dtype=np.float32)
    x, y = cp.asarray(x_host), cp.asarray(y_host)

    with timed("raw_kernels", cp.cuda.Device().synchronize):
        SAXPY((256,), (threads,), (x, y, np.float32(0.5), np.int32(n)))
        blocks = (n + threads - 1) // threads
        partial = cp.empty(blocks, dtype=cp.float32)
        BLOCK_SUM((blocks,), (threads,), (y, partial, np.int32(n)), shared_mem=threads * 4)
    expected = 0.5 * x_host + y_host
    require(np.allclose(cp.asnumpy(y), expected, rtol=1e-6), "saxpy differs from NumPy")
    require(abs(float(partial.sum()) - float(expected.sum(dtype=np.float64))) < 1e-2 * np.sqrt(n),
            "block sums differ from NumPy")
    checksum("saxpy_abs_sum", float(cp.abs(y).sum()))
    checksum("block_sum_total", float(partial.astype(cp.float64).sum()))

    with timed("elementwise_and_reduction", cp.cuda.Device().synchronize):
        z = SCALED_DIFF(x, y, np.float32(3.0))
        norm = L2_NORM(z)
    require(np.allclose(cp.asnumpy(z), (x_host - expected) * 3.0, rtol=1e-5, atol=1e-5),
            "elementwise kernel differs from NumPy")
    checksum("scaled_diff_l2_norm", float(norm))
    checksum("scaled_diff_max", float(z.max()))

    with timed("library_calls", cp.cuda.Device().synchronize):
        keys = cp.asarray(rng.integers(0, 1 << 30, 1 << 16, dtype=np.int32))
        ordered = cp.sort(keys)
        a = cp.asarray(rng.standard_normal((256, 192), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((192, 128), dtype=np.float32))
        product = a @ b
    require(bool(cp.all(ordered[1:] >= ordered[:-1])), "sort output is not ordered")
    require(np.allclose(cp.asnumpy(product), cp.asnumpy(a) @ cp.asnumpy(b), rtol=1e-4, atol=1e-4),
            "matrix product differs from NumPy")
    checksum("sorted_weighted", int((ordered[::1024].astype(cp.int64) % 1000003).sum()))
    checksum("matmul_abs_sum", float(cp.abs(product).sum()))


if __name__ == "__main__":
    main()
