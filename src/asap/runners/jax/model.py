"""A decoder-only transformer in plain ``jax.numpy``, from the same ``ModelSpec`` as ``asap.runners.torch.model``.

The same architecture as the reference PyTorch trainer, operator for operator, so that the two backends give
the same loss on the same weights and data: RMSNorm, rotary embeddings on interleaved pairs (x[2i], x[2i+1]),
causal grouped-query attention, SwiGLU (or tanh-GELU / squared-ReLU) MLPs, and Mixture-of-Experts layers (a
top-k softmax router with renormalised weights, dropless routed experts, shared experts, the Switch
Transformer load-balancing loss).

Parameters are a flat dict keyed by the PyTorch module names (``layers.0.attention.wq.weight`` ...), with the
PyTorch shapes (a linear layer's weight is (out, in)), so the torch model's initial weights load as they are
(``asap.runners.jax.weights``). No flax or equinox: neither is installed here, and a dict of arrays is all
``jax.jit`` with named shardings needs.

Routed experts: every expert runs on every token and the outputs are combined with the router's weights,
zero for the experts a token did not choose. That is the dropless top-k MoE exactly (no capacity factor, no
dropped token), at num_experts / top_k times the expert FLOPs: MaxText's "dense matmul" MoE without its
capacity limit. Sharded over the ``expert`` mesh axis, each device computes its own experts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from asap.spec.model import ModelSpec

AUX_LOSS_COEFF = 1e-2  # Switch Transformer's load-balancing coefficient (Fedus et al. 2021, sec. 2.2)
NORM_EPS = 1e-5
ROPE_THETA = 10000.0


def rms_norm(x: jax.Array, weight: jax.Array) -> jax.Array:
    """x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019), in fp32."""
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + NORM_EPS)
    return (y * weight.astype(jnp.float32)).astype(x.dtype)


def rope_table(head_dim: int, seq_len: int) -> tuple[jax.Array, jax.Array]:
    """cos and sin (seq, head_dim/2) of each position's angles pos * theta^(-2i/d) (Su et al. 2021)."""
    inv = 1.0 / (ROPE_THETA ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    ang = jnp.outer(jnp.arange(seq_len, dtype=jnp.float32), inv)
    return jnp.cos(ang), jnp.sin(ang)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x (batch, seq, heads, d): each pair (x[2i], x[2i+1]) rotated by its position's angle."""
    xf = x.astype(jnp.float32).reshape(*x.shape[:-1], -1, 2)
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    x0, x1 = xf[..., 0], xf[..., 1]
    out = jnp.stack((x0 * c - x1 * s, x0 * s + x1 * c), axis=-1)
    return out.reshape(x.shape).astype(x.dtype)


def linear(x: jax.Array, w: jax.Array) -> jax.Array:
    """x @ w.T with w stored (out, in), as torch.nn.Linear stores it."""
    return jnp.einsum("...i,oi->...o", x, w)


def activation(kind: str, x: jax.Array) -> jax.Array:
    if kind == "gelu":
        return jax.nn.gelu(x, approximate=True)
    if kind == "relu2":
        return jnp.square(jax.nn.relu(x))
    return jax.nn.silu(x)


def attention(p: dict, pre: str, x: jax.Array, spec: ModelSpec, rope) -> jax.Array:
    """Causal grouped-query attention: softmax(q k^T / sqrt(d) + causal mask) v (Vaswani et al. 2017)."""
    b, s, _ = x.shape
    d = spec.head_dim
    q = linear(x, p[pre + "wq.weight"]).reshape(b, s, -1, d)
    k = linear(x, p[pre + "wk.weight"]).reshape(b, s, -1, d)
    v = linear(x, p[pre + "wv.weight"]).reshape(b, s, -1, d)
    q, k = apply_rope(q, *rope), apply_rope(k, *rope)
    rep = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / jnp.sqrt(jnp.float32(d))
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    probs = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1).astype(v.dtype)
    out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, -1)
    return linear(out, p[pre + "wo.weight"])


def feed_forward(p: dict, pre: str, x: jax.Array, kind: str) -> jax.Array:
    """SwiGLU w2(silu(w1 x) * w3 x) (Shazeer 2020), or w2(act(w1 x))."""
    h = activation(kind, linear(x, p[pre + "w1.weight"]))
    if pre + "w3.weight" in p:
        h = h * linear(x, p[pre + "w3.weight"])
    return linear(h, p[pre + "w2.weight"])


def moe(p: dict, pre: str, x: jax.Array, spec: ModelSpec) -> tuple[jax.Array, jax.Array]:
    """Top-k routed experts (dropless) plus shared experts -> (output, load-balancing loss)."""
    assert spec.moe is not None  # called for the MoE layers of a MoE model only
    b, s, h = x.shape
    t = x.reshape(-1, h)
    probs = jax.nn.softmax(linear(t, p[pre + "router.weight"]).astype(jnp.float32), axis=-1)
    top_v, top_i = jax.lax.top_k(probs, spec.moe.top_k)
    top_v = top_v / jnp.sum(top_v, axis=-1, keepdims=True)
    chosen = jax.nn.one_hot(top_i, spec.moe.num_experts, dtype=jnp.float32)  # (tokens, k, experts)
    gate = jnp.einsum("tk,tke->te", top_v, chosen).astype(x.dtype)
    w1, w2 = p[pre + "experts.w1"], p[pre + "experts.w2"]
    hid = activation(spec.activation, jnp.einsum("td,edf->tef", t, w1))
    if pre + "experts.w3" in p:
        hid = hid * jnp.einsum("td,edf->tef", t, p[pre + "experts.w3"])
    y = jnp.einsum("tef,efd,te->td", hid, w2, gate)
    if spec.moe.shared_experts:
        y = y + feed_forward(p, pre + "shared_experts.", t, spec.activation)
    # Switch Transformer load balancing: E * sum_i f_i P_i, f_i the share of routed copies sent to expert i
    f = jnp.sum(chosen, axis=(0, 1)) / (t.shape[0] * spec.moe.top_k)
    aux = spec.moe.num_experts * jnp.sum(jax.lax.stop_gradient(f) * jnp.mean(probs, axis=0))
    return y.reshape(b, s, h), aux


def is_moe_layer(spec: ModelSpec, i: int) -> bool:
    return spec.moe is not None and i >= spec.moe.first_dense_layers


def forward(p: dict, tokens: jax.Array, spec: ModelSpec, constrain=lambda x: x) -> tuple[jax.Array, jax.Array]:
    """tokens (batch, seq) -> (logits (batch, seq, vocab), summed load-balancing loss). ``constrain`` pins the
    activations' sharding between layers (``asap.runners.jax.shard``)."""
    rope = rope_table(spec.head_dim, tokens.shape[1])
    h = constrain(jnp.take(p["tok_embeddings.weight"], tokens, axis=0))
    aux = jnp.zeros((), jnp.float32)
    for i in range(spec.num_layers):
        pre = f"layers.{i}."
        h = constrain(h + attention(p, pre + "attention.", rms_norm(h, p[pre + "attention_norm.weight"]), spec, rope))
        x = rms_norm(h, p[pre + "ffn_norm.weight"])
        if is_moe_layer(spec, i):
            y, a = moe(p, pre + "moe.", x, spec)
            aux = aux + a
        else:
            y = feed_forward(p, pre + "feed_forward.", x, spec.activation)
        h = constrain(h + y)
    h = rms_norm(h, p["norm.weight"])
    out_w = p["tok_embeddings.weight"] if spec.tie_embeddings else p["output.weight"]
    return linear(h, out_w).astype(jnp.float32), aux


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean token cross entropy: mean(logsumexp(z) - z[label])."""
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    return jnp.mean(logz - picked)


def loss_fn(p: dict, inputs: jax.Array, labels: jax.Array, spec: ModelSpec, constrain=lambda x: x):
    """(training objective CE + coeff * aux, CE): the reported loss is the cross entropy alone, as torch's."""
    logits, aux = forward(p, inputs, spec, constrain)
    ce = cross_entropy(logits, labels)
    return ce + AUX_LOSS_COEFF * aux, ce
