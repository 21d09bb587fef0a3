"""A ``jax.jit``ted training step of a small MLP (value_and_grad, softmax cross-entropy, SGD
update): XLA compiles it at run time into fused kernels and GEMMs (cuBLAS or XLA's Triton
GEMM emitter) and loads them through the driver. Random numbers come from JAX's threefry on
the GPU with a fixed key.

    python3 jax_jit_mlp.py [STEPS]               (default 3)

JAX's defaults hold, as users run it: it preallocates one pool of 75 % of the GPU at
start (the recorder copies that pool once, then only the chunks written since:
docs/record.md). The allocator follows XLA_PYTHON_CLIENT_ALLOCATOR (``platform``
allocates and frees each buffer through the driver; the default BFC allocator).
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
from corpus_report import checksum, require, skip, timed

FEATURES, HIDDEN, CLASSES, BATCH = 64, 256, 10, 128


def init(key):
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (FEATURES, HIDDEN)) * 0.1,
        "b1": jnp.zeros(HIDDEN),
        "w2": jax.random.normal(k2, (HIDDEN, CLASSES)) * 0.1,
        "b2": jnp.zeros(CLASSES),
    }


def loss_fn(params, x, labels):
    hidden = jax.nn.gelu(x @ params["w1"] + params["b1"])
    logits = hidden @ params["w2"] + params["b2"]
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.sum(log_probs * jax.nn.one_hot(labels, CLASSES), axis=-1))


@jax.jit
def train_step(params, x, labels):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, labels)
    return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), loss


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if jax.default_backend() != "gpu":
        skip(f"JAX runs on {jax.default_backend()}, not a GPU")
    print(f"allocator {os.environ.get('XLA_PYTHON_CLIENT_ALLOCATOR', 'default')}", flush=True)
    key_params, key_x, key_labels = jax.random.split(jax.random.PRNGKey(0), 3)
    params = init(key_params)
    x = jax.random.normal(key_x, (BATCH, FEATURES))
    labels = jax.random.randint(key_labels, (BATCH,), 0, CLASSES)
    losses = []
    for step in range(steps):
        with timed(f"step{step}" + ("_with_compile" if step == 0 else "")):
            params, loss = train_step(params, x, labels)
            loss = float(loss)  # waits for the step
        losses.append(loss)
        checksum(f"loss_step{step}", loss)
    require(losses[-1] < losses[0], f"the loss did not fall: {losses}")
    for name in sorted(params):
        checksum(f"param_{name}_abs_sum", float(jnp.abs(params[name]).sum()))


if __name__ == "__main__":
    main()
