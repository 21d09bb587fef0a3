"""A ``torch.compile``d function, forward and backward: Inductor generates Triton kernels
(fused pointwise, reductions, softmax; ``triton_*`` names), compiled here at run time into an
empty cache and loaded through the driver; its matrix products stay cuBLAS calls.

    python3 torch_compile_fn.py [CALLS]          (default 3)

TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR default to fresh temporary folders (the GPU host
has no network and no warm cache), TORCHINDUCTOR_COMPILE_THREADS to 1 (no compile worker
processes: the compile stays in this process).
"""

from __future__ import annotations

import os
import sys
import tempfile

_cache = tempfile.mkdtemp(prefix="mneme-inductor-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", _cache)
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_cache, "triton"))
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from corpus_report import checksum, require, skip, timed  # noqa: E402


def mlp_rmsnorm_softmax(x, w1, b1, w2):
    hidden = F.gelu(x @ w1 + b1)
    y = hidden @ w2
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)
    return torch.softmax(y, dim=-1)


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if not torch.cuda.is_available():
        skip("torch has no CUDA device")
    torch.manual_seed(0)
    device = torch.device("cuda")
    x = torch.randn(512, 128, device=device)
    w1 = (torch.randn(128, 256, device=device) * 0.05).requires_grad_()
    b1 = torch.zeros(256, device=device).requires_grad_()
    w2 = (torch.randn(256, 128, device=device) * 0.05).requires_grad_()
    weights = torch.randn(512, 128, device=device)
    compiled = torch.compile(mlp_rmsnorm_softmax, fullgraph=True)

    with timed("compile_forward_backward", torch.cuda.synchronize):
        out = compiled(x, w1, b1, w2)
        (out * weights).sum().backward()
    grads = [p.grad.clone() for p in (w1, b1, w2)]
    for p in (w1, b1, w2):
        p.grad = None
    # the eager function computes the same (to float rounding)
    reference = mlp_rmsnorm_softmax(x, w1, b1, w2)
    (reference * weights).sum().backward()
    require(torch.allclose(out, reference, rtol=1e-4, atol=1e-6), "compiled forward differs from eager")
    for name, got, p in zip(("w1", "b1", "w2"), grads, (w1, b1, w2), strict=True):
        require(torch.allclose(got, p.grad, rtol=1e-3, atol=1e-6), f"compiled grad of {name} differs")
        checksum(f"grad_{name}_abs_sum", got.abs().sum().item())

    with torch.no_grad():
        for call in range(calls):
            with timed(f"call{call}", torch.cuda.synchronize):
                out = compiled(x * (1.0 + 0.25 * call), w1, b1, w2)
            checksum(f"weighted_sum_call{call}", (out * weights).sum().item())
            checksum(f"row_max_sum_call{call}", out.max(-1).values.sum().item())


if __name__ == "__main__":
    main()
