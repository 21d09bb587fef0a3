"""Batched greedy decoding over a paged KV cache in PyTorch, as an inference server keeps it
(vLLM's layout): at start the server takes most of the GPU's free memory as ONE raw byte
tensor (``torch.zeros``, vLLM's ``gpu_memory_utilization``), carves it into per-layer K and V
caches of fixed-size blocks, and hands blocks to sequences through block tables. Every
step writes each sequence's new key and value into its slot (``index_copy_``), gathers its
context through its block table (advanced indexing), attends (softmax) and runs the MLP
(cuBLAS GEMMs); the next token is the argmax. The blocks a sequence gets lie anywhere in
the pool (a server that has run a while), so most of the pool is never written and the
launches that index it can reach all of it.

Prints the time of prefill and decode, the generated tokens' checksum and the last
logits' sum.

    python3 torch_paged_kv_cache.py [STEPS]       (default 16)

MNEME_KV_FRACTION (default 0.6) sets the pool's share of the GPU's free memory.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from corpus_report import checksum, require, skip, timed  # noqa: E402

LAYERS, HEADS, HEAD_DIM, VOCAB, BLOCK = 2, 8, 64, 1024, 16
MODEL = HEADS * HEAD_DIM
PROMPTS = (37, 5, 64, 18, 29, 50, 11, 44)  # prompt lengths of the batch's sequences


class PagedCache:
    """Per-layer K and V caches of [blocks, BLOCK, HEADS, HEAD_DIM] half values, all views
    of one raw allocation, and the blocks each sequence holds."""

    def __init__(self, fraction: float, device: torch.device, generator: torch.Generator):
        free, _ = torch.cuda.mem_get_info(device)
        block_bytes = BLOCK * HEADS * HEAD_DIM * 2  # one block of K (or V) of one layer
        self.blocks = int(free * fraction) // (2 * LAYERS * block_bytes)
        require(self.blocks >= 1024, "the GPU has memory free for the cache")
        self.raw = torch.zeros(2 * LAYERS * self.blocks * block_bytes, dtype=torch.int8, device=device)
        shape = (self.blocks, BLOCK, HEADS, HEAD_DIM)
        per = self.blocks * block_bytes
        self.k = [self.raw[(2 * i) * per:(2 * i + 1) * per].view(torch.float16).view(shape) for i in range(LAYERS)]
        self.v = [self.raw[(2 * i + 1) * per:(2 * i + 2) * per].view(torch.float16).view(shape) for i in range(LAYERS)]
        # block ids handed out across the whole pool, none twice
        self._free = torch.randperm(self.blocks, generator=generator).tolist()
        self.tables: list[list[int]] = [[] for _ in PROMPTS]

    def slots(self, sequence: int, positions: range) -> list[int]:
        """The cache slots (block * BLOCK + offset) of ``positions``, new blocks as needed."""
        table = self.tables[sequence]
        while len(table) * BLOCK < positions.stop:
            table.append(self._free.pop())
        return [table[p // BLOCK] * BLOCK + p % BLOCK for p in positions]

    def block_table(self, device: torch.device) -> torch.Tensor:
        width = max(len(t) for t in self.tables)
        return torch.tensor([t + [0] * (width - len(t)) for t in self.tables], dtype=torch.int64, device=device)


def init(generator: torch.Generator, device: torch.device) -> dict[str, list[torch.Tensor] | torch.Tensor]:
    def dense(rows, cols):
        return (torch.randn(rows, cols, generator=generator) * rows ** -0.5).to(device, torch.float16)

    return {
        "embed": (torch.randn(VOCAB, MODEL, generator=generator) * 0.5).to(device, torch.float16),
        "qkv": [dense(MODEL, 3 * MODEL) for _ in range(LAYERS)],
        "out": [dense(MODEL, MODEL) for _ in range(LAYERS)],
        "up": [dense(MODEL, 4 * MODEL) for _ in range(LAYERS)],
        "down": [dense(4 * MODEL, MODEL) for _ in range(LAYERS)],
        "head": dense(MODEL, VOCAB),
    }


def forward(params, cache: PagedCache, tokens: torch.Tensor, slots: torch.Tensor, lengths: torch.Tensor,
            rows: torch.Tensor, device: torch.device) -> torch.Tensor:
    """One pass over ``tokens`` (one row per new token; ``rows`` its sequence): writes their
    K and V into ``slots``, attends each over its sequence's first ``lengths`` positions."""
    x = params["embed"][tokens]
    table = cache.block_table(device)[rows]  # [tokens, blocks]
    positions = torch.arange(table.shape[1] * BLOCK, device=device)
    visible = positions[None, :] < lengths[:, None]  # causal: each token sees up to itself
    for layer in range(LAYERS):
        h = torch.nn.functional.layer_norm(x.float(), (MODEL,)).half()
        q, k, v = (h @ params["qkv"][layer]).view(-1, 3, HEADS, HEAD_DIM).unbind(1)
        cache.k[layer].view(-1, HEADS, HEAD_DIM).index_copy_(0, slots, k)
        cache.v[layer].view(-1, HEADS, HEAD_DIM).index_copy_(0, slots, v)
        keys = cache.k[layer][table].flatten(1, 2)  # [tokens, context, HEADS, HEAD_DIM]
        values = cache.v[layer][table].flatten(1, 2)
        scores = torch.einsum("thd,tchd->thc", q.float(), keys.float()) * HEAD_DIM ** -0.5
        weights = torch.softmax(scores.masked_fill(~visible[:, None, :], float("-inf")), dim=-1)
        attended = torch.einsum("thc,tchd->thd", weights, values.float()).reshape(-1, MODEL).half()
        x = x + attended @ params["out"][layer]
        h = torch.nn.functional.layer_norm(x.float(), (MODEL,)).half()
        x = x + torch.nn.functional.gelu(h @ params["up"][layer]) @ params["down"][layer]
    return x @ params["head"]


def main() -> None:
    if not torch.cuda.is_available():
        skip("PyTorch has no CUDA device")
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    device = torch.device("cuda")
    generator = torch.Generator().manual_seed(0)
    with timed("cache", torch.cuda.synchronize):
        cache = PagedCache(float(os.environ.get("MNEME_KV_FRACTION", "0.6")), device, generator)
    print(f"KV cache: {cache.raw.numel() / 2**30:.1f} GiB in one allocation, {cache.blocks} blocks per layer",
          flush=True)
    params = init(generator, device)
    prompts = [torch.randint(0, VOCAB, (n,), generator=generator) for n in PROMPTS]
    with torch.inference_mode():
        with timed("prefill", torch.cuda.synchronize):  # every prompt token at once
            rows = torch.cat([torch.full((n,), s) for s, n in enumerate(PROMPTS)]).to(device)
            slots = torch.tensor([x for s, n in enumerate(PROMPTS) for x in cache.slots(s, range(n))], device=device)
            lengths = torch.cat([torch.arange(1, n + 1) for n in PROMPTS]).to(device)
            logits = forward(params, cache, torch.cat(prompts).to(device), slots, lengths, rows, device)
            ends = torch.tensor(PROMPTS, device=device).cumsum(0) - 1
            tokens = logits[ends].argmax(-1)
        generated = [tokens]
        with timed("decode", torch.cuda.synchronize):  # one new token per sequence a step
            rows = torch.arange(len(PROMPTS), device=device)
            for step in range(steps - 1):
                at = [n + step for n in PROMPTS]
                slots = torch.tensor([cache.slots(s, range(p, p + 1))[0] for s, p in enumerate(at)], device=device)
                lengths = torch.tensor(at, device=device) + 1
                logits = forward(params, cache, tokens, slots, lengths, rows, device)
                tokens = logits.argmax(-1)
                generated.append(tokens)
    out = torch.stack(generated, 1).cpu()
    require(bool(torch.isfinite(logits.float()).all()), "the logits are finite")
    checksum("tokens_generated", int(out.numel()))
    checksum("token_id_sum", int(out.sum()))
    checksum("last_logits_sum", float(logits.float().sum()))
    used = sum(len(t) for t in cache.tables) * LAYERS * 2
    print(f"KV cache used: {used} of {2 * LAYERS * cache.blocks} blocks", flush=True)


if __name__ == "__main__":
    main()
