"""A PyTorch inference pass over a 2 GB working set, about twenty kernel launches.

What a batch-inference or preprocessing script does: large fp32 activations and weights
(2 GiB live in PyTorch's caching allocator), a GEMM through cuBLAS, normalisation,
activation, softmax and reductions through PyTorch's own kernels, each launch touching
hundreds of MiB. It prints its own timing (TIME lines) and checksums (CHECKSUM lines), as
the other corpus scripts do; ``benchmarks/record_framework.py`` times it plain and under
``mneme record``.

    python3 torch_large_activations.py [GIB]      (default 2: the working set in GiB)
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from corpus_report import checksum, require, skip, timed  # noqa: E402


def main() -> None:
    if not torch.cuda.is_available():
        skip("PyTorch has no CUDA device")
    gib = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    device = torch.device("cuda")
    # Four tensors of a quarter of the working set each (x, scratch, out and the one GELU
    # returns): rows of 4096 fp32 values.
    width = 4096
    rows = max(1024, int(gib * (1 << 30) / 4 / (4 * width)))
    with timed("setup", torch.cuda.synchronize):
        x = torch.randn(rows, width, device=device)          # 1 launch
        weight = torch.randn(width, width, device=device) / width ** 0.5
        bias = torch.randn(width, device=device)
        scratch = torch.empty_like(x)
        out = torch.empty_like(x)
    with timed("forward", torch.cuda.synchronize):
        torch.matmul(x, weight, out=scratch)                  # cuBLAS GEMM
        scratch.add_(bias)                                    # broadcast add
        mean = scratch.mean(dim=1, keepdim=True)              # row reduction
        var = scratch.var(dim=1, keepdim=True, unbiased=False)
        torch.sub(scratch, mean, out=out)
        out.div_(torch.sqrt(var + 1e-5))                      # layer norm by hand
        torch.nn.functional.gelu(out, approximate="tanh")     # out of place: a new buffer
        out.relu_()
        torch.softmax(out, dim=1, out=scratch)                # row softmax
        x.mul_(0.5).add_(scratch)                             # residual
        top = x.amax(dim=1)
        total = x.sum(dtype=torch.float64)
    torch.cuda.synchronize()
    require(bool(torch.isfinite(total)), "the activations are finite")
    checksum("rows", rows)
    checksum("max_of_row_maxima", float(top.max()))
    checksum("total", float(total))


if __name__ == "__main__":
    main()
