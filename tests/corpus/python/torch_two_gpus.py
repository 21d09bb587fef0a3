"""PyTorch split over two GPUs by hand (pipeline model parallelism, as people do it before
reaching for a framework): the first half of an MLP on cuda:0, the second on cuda:1, the
activations moved across with ``.to("cuda:1")`` (a peer copy), the loss's gradient back the
same way, an SGD step on each GPU; at the end each GPU's weights are combined with the
other's through explicit copies. Seeds are fixed; a run under ``mneme record`` prints the same
CHECKSUM lines as a plain run. With one GPU the script says so and exits 77 (skip).

    python3 torch_two_gpus.py [STEPS]          (default 3)
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from corpus_report import checksum, require, skip, timed  # noqa: E402
from torch import nn  # noqa: E402

BATCH, DIM, HIDDEN, CLASSES = 64, 512, 1024, 100


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        skip("needs two CUDA devices")
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    first, second = torch.device("cuda:0"), torch.device("cuda:1")
    with timed("setup", lambda: (torch.cuda.synchronize(first), torch.cuda.synchronize(second))):
        front = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.ReLU()).to(first)
        back = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)).to(second)
        opt_front = torch.optim.SGD(front.parameters(), lr=0.01)
        opt_back = torch.optim.SGD(back.parameters(), lr=0.01)
        x = torch.randn(BATCH, DIM).to(first)
        target = torch.randint(0, CLASSES, (BATCH,)).to(second)
    for step in range(steps):
        with timed(f"step{step}", lambda: (torch.cuda.synchronize(first), torch.cuda.synchronize(second))):
            opt_front.zero_grad(set_to_none=True)
            opt_back.zero_grad(set_to_none=True)
            hidden = front(x).to(second)  # cuda:0 -> cuda:1
            loss = nn.functional.cross_entropy(back(hidden), target)
            loss.backward()  # the gradient of `hidden` travels back to cuda:0
            opt_front.step()
            opt_back.step()
        checksum(f"loss{step}", loss.item())
    # each GPU combines its parameters with the other's (explicit copies)
    w0 = front[0].weight.detach()
    w1 = back[0].weight.detach()
    mixed = (w0.sum(dim=1).to(second) + w1.sum(dim=0)[:HIDDEN]).to(first)
    require(mixed.device == first and torch.isfinite(mixed).all().item(), "finite mixed sums on cuda:0")
    checksum("mixed", mixed.double().sum().item())
    checksum("front", sum(p.double().sum().item() for p in front.parameters()))
    checksum("back", sum(p.double().sum().item() for p in back.parameters()))


if __name__ == "__main__":
    main()
