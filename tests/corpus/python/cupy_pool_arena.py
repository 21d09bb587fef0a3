"""A framework's preallocated memory pool, as JAX (XLA's BFC allocator) and inference servers
keep one: CuPy's allocator replaced by an arena carved out of ONE allocation of 75 % of the
GPU's memory, made at start; every array CuPy makes (RawKernel outputs, elementwise and
reduction temporaries, cuBLAS's matrix product) is a piece of it. A conjugate-gradient-like
loop on a 1-D Laplacian then runs a few iterations. Every launch can reach the whole pool,
most of which nothing ever writes.

    python3 cupy_pool_arena.py [ITERATIONS]       (default 8)

MNEME_ARENA_FRACTION (default 0.75) sets the pool's share of the GPU's memory.
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ.setdefault("CUPY_CACHE_DIR", tempfile.mkdtemp(prefix="mneme-cupy-"))

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
from corpus_report import checksum, require, skip, timed  # noqa: E402

LAPLACIAN = cp.RawKernel(r"""
extern "C" __global__ void mneme_laplacian(const double* x, double* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double left = i > 0 ? x[i - 1] : 0.0, right = i + 1 < n ? x[i + 1] : 0.0;
    y[i] = 2.0 * x[i] - left - right;
}
""", "mneme_laplacian")

AXPY = cp.ElementwiseKernel("float64 a, float64 x, float64 y", "float64 z", "z = a * x + y", "mneme_arena_axpy")


class Arena:
    """A bump allocator over one device allocation (frees are kept: the pool only grows,
    as a preallocated pool's addresses stay the application's)."""

    def __init__(self, fraction: float):
        free, total = cp.cuda.runtime.memGetInfo()
        self.size = min(int(total * fraction), free - (1 << 30)) // (2 << 20) * (2 << 20)
        require(self.size > 0, "the GPU has memory free for the pool")
        self.memory = cp.cuda.Memory(self.size)
        self.used = 0

    def malloc(self, size: int) -> cp.cuda.MemoryPointer:
        size = -(-max(size, 1) // 512) * 512
        if self.used + size > self.size:
            raise cp.cuda.memory.OutOfMemoryError(size, self.size - self.used, self.size)
        pointer = cp.cuda.MemoryPointer(self.memory, self.used)
        self.used += size
        return pointer


def main() -> None:
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    try:
        if cp.cuda.runtime.getDeviceCount() == 0:
            skip("CuPy sees no CUDA device")
    except cp.cuda.runtime.CUDARuntimeError as exc:
        skip(f"CuPy sees no CUDA device ({exc})")
    with timed("pool"):
        arena = Arena(float(os.environ.get("MNEME_ARENA_FRACTION", "0.75")))
        cp.cuda.set_allocator(arena.malloc)
    print(f"pool: {arena.size / 2**30:.1f} GiB in one allocation", flush=True)
    n, threads = 1 << 16, 256
    rng = np.random.default_rng(3)
    b = cp.asarray(rng.standard_normal(n))
    x = cp.zeros(n)
    with timed("solve", cp.cuda.Device().synchronize):
        r = b.copy()
        p = r.copy()
        rr = float(r @ r)
        ap = cp.empty_like(p)
        for _ in range(iterations):
            LAPLACIAN(((n + threads - 1) // threads,), (threads,), (p, ap, np.int32(n)))
            alpha = rr / float(p @ ap)
            x = AXPY(alpha, p, x)
            r = AXPY(-alpha, ap, r)
            new = float(r @ r)
            p = AXPY(new / rr, p, r)
            rr = new
    residual = float(cp.linalg.norm(r))
    checksum("x_sum", float(x.sum()))
    checksum("residual", residual)
    print(f"pool used: {arena.used / 2**20:.1f} MiB of {arena.size / 2**30:.1f} GiB", flush=True)
    require(residual < float(cp.linalg.norm(b)), "the residual fell")


if __name__ == "__main__":
    main()
