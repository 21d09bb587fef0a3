"""A PyTorch eager training step of a small transformer block, as training scripts run it.

One pre-norm block (layer norm, QKV projection, causal softmax attention with batched GEMMs,
dropout, GELU MLP) under bf16 autocast, a cross-entropy loss, backward, gradient clipping and
AdamW (foreach) steps. The GEMMs go to cuBLAS/cuBLASLt, everything else to PyTorch's own
kernels. Seeds are fixed and deterministic algorithms are asked for (with warnings only where
PyTorch has none, e.g. the loss's reduction), so a run under ``mneme record`` prints the same
CHECKSUM lines as a plain run.

    python3 torch_train_step.py [STEPS]          (default 3)

The memory allocator follows PYTORCH_CUDA_ALLOC_CONF (e.g. ``expandable_segments:True`` or
``backend:cudaMallocAsync``); the script prints which backend it got.
"""

from __future__ import annotations

import math
import os
import sys

# cuBLAS is deterministic only with a fixed workspace configuration (read at its first use).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from corpus_report import checksum, require, skip, timed  # noqa: E402
from torch import nn  # noqa: E402

BATCH, SEQ, DIM, HEADS, FFN, CLASSES = 8, 64, 256, 4, 1024, 512


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, FFN)
        self.fc2 = nn.Linear(FFN, DIM)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // HEADS)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attention = self.drop(F.softmax(scores.masked_fill(causal, float("-inf")), dim=-1))
        x = x + self.drop(self.proj((attention @ v).transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class TinyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.block(x)))


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if not torch.cuda.is_available():
        skip("torch has no CUDA device")
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    device = torch.device("cuda")
    print(f"allocator {torch.cuda.get_allocator_backend()}", flush=True)
    with timed("setup", torch.cuda.synchronize):
        model = TinyModel().to(device)  # initialised on the CPU: the same weights every run
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        x = torch.randn(BATCH, SEQ, DIM, device=device)
        target = torch.randint(0, CLASSES, (BATCH, SEQ), device=device)
    model.train()
    for step in range(steps):
        with timed(f"step{step}", torch.cuda.synchronize):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, CLASSES), target.view(-1))
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        require(math.isfinite(loss.item()), f"step {step}: loss {loss.item()}")
        if step == 0:  # an untrained classifier: about log(CLASSES)
            require(abs(loss.item() - math.log(CLASSES)) < 1.5, f"first loss {loss.item()}")
        checksum(f"loss_step{step}", loss.item())
        checksum(f"grad_norm_step{step}", grad_norm.item())
    with torch.no_grad():
        params = torch.cat([p.detach().float().flatten() for p in model.parameters()])
        checksum("param_sum", params.sum().item())
        checksum("param_abs_sum", params.abs().sum().item())
        model.eval()
        checksum("eval_logits_abs_sum", model(x).abs().sum().item())


if __name__ == "__main__":
    main()
