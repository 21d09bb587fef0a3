"""Triton kernels launched directly (``@triton.jit``, no PyTorch compiler): a row softmax and
a scaled add, compiled at run time into an empty cache (TRITON_CACHE_DIR defaults to a fresh
temporary folder) and launched through Triton's own launcher. The kernels' symbols are their
Python names, ``mneme_softmax_rows`` and ``mneme_add_scaled``.

    python3 triton_direct.py
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="mneme-triton-"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from corpus_report import checksum, require, skip, timed  # noqa: E402


@triton.jit
def mneme_softmax_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def mneme_add_scaled(x_ptr, y_ptr, out_ptr, alpha, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + alpha * y, mask=mask)


def main() -> None:
    if not torch.cuda.is_available():
        skip("torch has no CUDA device")
    torch.manual_seed(0)
    rows, cols = 256, 1000
    x = torch.randn(rows, cols, device="cuda")
    y = torch.empty_like(x)
    with timed("softmax_compile_and_run", torch.cuda.synchronize):
        mneme_softmax_rows[(rows,)](x, y, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
    require(torch.allclose(y, torch.softmax(x, -1), rtol=1e-5, atol=1e-7), "softmax differs from torch")
    weights = torch.randn(rows, cols, device="cuda")
    checksum("softmax_weighted_sum", (y * weights).sum().item())

    a, b = x.flatten(), weights.flatten()
    out = torch.empty_like(a)
    n = a.numel()
    with timed("add_scaled_compile_and_run", torch.cuda.synchronize):
        for alpha in (0.5, -2.0):  # two launches of one compiled kernel
            mneme_add_scaled[(triton.cdiv(n, 1024),)](a, b, out, alpha, n, BLOCK=1024)
            require(torch.allclose(out, a + alpha * b), f"add_scaled({alpha}) differs from torch")
            checksum(f"add_scaled_abs_sum_{alpha}", out.abs().sum().item())


if __name__ == "__main__":
    main()
