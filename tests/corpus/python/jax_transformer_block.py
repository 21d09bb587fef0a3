"""A pre-norm transformer block trained with ``jax.jit`` and JAX's defaults, as a model
script runs it: JAX preallocates its pool (75 % of the GPU) at start, and XLA autotunes its
GEMM fusions while it compiles (each candidate timed behind XLA's delay kernel), then runs
the winners. Multi-head attention (softmax over the sequence), a GELU MLP, layer norms,
Adam written out, bfloat16 activations with float32 parameters; random data from a fixed
key. Prints each step's time and loss, and checksums of the parameters.

    python3 jax_transformer_block.py [STEPS]     (default 4)
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
from corpus_report import checksum, require, skip, timed

BATCH, SEQ, MODEL, HEADS, HIDDEN = 8, 256, 512, 8, 2048


def init(key):
    keys = jax.random.split(key, 4)

    def dense(k, shape):
        return jax.random.normal(k, shape, jnp.float32) * (shape[0] ** -0.5)

    return {
        "qkv": dense(keys[0], (MODEL, 3 * MODEL)), "out": dense(keys[1], (MODEL, MODEL)),
        "up": dense(keys[2], (MODEL, HIDDEN)), "down": dense(keys[3], (HIDDEN, MODEL)),
        "norm1": jnp.ones(MODEL), "norm2": jnp.ones(MODEL),
    }


def layer_norm(x, scale):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale


def block(params, x):
    b, s, _ = x.shape
    h = layer_norm(x, params["norm1"]).astype(jnp.bfloat16)
    qkv = (h @ params["qkv"].astype(jnp.bfloat16)).reshape(b, s, 3, HEADS, MODEL // HEADS)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / (MODEL // HEADS) ** 0.5
    mask = jnp.tril(jnp.ones((s, s), bool))
    weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1).astype(jnp.bfloat16)
    attended = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, s, MODEL)
    x = x + (attended @ params["out"].astype(jnp.bfloat16)).astype(jnp.float32)
    h = layer_norm(x, params["norm2"]).astype(jnp.bfloat16)
    h = jax.nn.gelu(h @ params["up"].astype(jnp.bfloat16))
    return x + (h @ params["down"].astype(jnp.bfloat16)).astype(jnp.float32)


def loss_fn(params, x, target):
    return jnp.mean((block(params, x) - target) ** 2)


@jax.jit
def train_step(params, moments, x, target, step):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, target)
    first, second = moments
    first = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, first, grads)
    second = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, second, grads)
    correction = jnp.sqrt(1 - 0.999 ** step) / (1 - 0.9 ** step)
    params = jax.tree_util.tree_map(lambda p, m, v: p - 1e-3 * correction * m / (jnp.sqrt(v) + 1e-8),
                                    params, first, second)
    return params, (first, second), loss


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    if jax.default_backend() != "gpu":
        skip(f"JAX runs on {jax.default_backend()}, not a GPU")
    key_params, key_x, key_target = jax.random.split(jax.random.PRNGKey(0), 3)
    params = init(key_params)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    moments = (zeros, zeros)
    x = jax.random.normal(key_x, (BATCH, SEQ, MODEL))
    target = jax.random.normal(key_target, (BATCH, SEQ, MODEL))
    losses = []
    for step in range(1, steps + 1):
        with timed(f"step{step}" + ("_with_compile" if step == 1 else "")):
            params, moments, loss = train_step(params, moments, x, target, step)
            loss = float(loss)  # waits for the step
        losses.append(loss)
        checksum(f"loss_step{step}", loss)
    require(losses[-1] < losses[0], f"the loss did not fall: {losses}")
    for name in sorted(params):
        checksum(f"param_{name}_abs_sum", float(jnp.abs(params[name]).sum()))


if __name__ == "__main__":
    main()
