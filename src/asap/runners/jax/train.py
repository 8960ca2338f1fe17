"""One training run on a JAX mesh, inside the process that owns the devices (``asap.runners.jax.worker``).

The step is one ``jax.jit`` over named shardings (GSPMD inserts the collectives): the loss and its gradient
over the whole global batch, then AdamW as the reference trainer configures it (torch.optim.AdamW, betas 0.9
and 0.95, eps 1e-8, weight decay 0.1 on every parameter; Loshchilov & Hutter 2019). Micro-batching (mbs) does
not change the gradient and is not replayed: each step is one pass over the global batch.

Timing: each step's wall time around the jitted call up to ``block_until_ready``; the first includes the
compilation and is the warm-up. With a profile directory the profiler runs from the second step on (or over
the only step), each step inside ``jax.profiler.StepTraceAnnotation("train", step_num=i)``.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path

import numpy as np

from asap.runners.jax import model as jm
from asap.runners.jax.shard import activation_spec, make_mesh, param_specs, token_spec
from asap.runners.jax.weights import Batches, initial_weights
from asap.spec.model import ModelSpec
from asap.spec.strategy import Strategy

BETA1, BETA2, EPS, WEIGHT_DECAY = 0.9, 0.95, 1e-8, 0.1  # asap.runners.torch.parallel.build_optimizer's AdamW


def adamw(p, g, m, v, step, lr):
    """One AdamW update of one array (torch.optim.AdamW's order: decay, moments, bias-corrected step)."""
    import jax.numpy as jnp

    p = p * (1 - lr * WEIGHT_DECAY)
    m = BETA1 * m + (1 - BETA1) * g
    v = BETA2 * v + (1 - BETA2) * g * g
    m_hat = m / (1 - BETA1 ** step)
    v_hat = v / (1 - BETA2 ** step)
    return p - lr * m_hat / (jnp.sqrt(v_hat) + EPS), m, v


def make_step(spec: ModelSpec, mesh, specs: dict, lr: float, bf16: bool):
    """The jitted train step: (params, m, v, step, inputs, labels) -> (params, m, v, loss)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    def named(tree):
        return {k: NamedSharding(mesh, sp) for k, sp in tree.items()}

    act = NamedSharding(mesh, activation_spec())
    tok = NamedSharding(mesh, token_spec())

    def constrain(x):
        return jax.lax.with_sharding_constraint(x, act)

    def objective(p, x, y):
        if bf16:
            p = {k: w.astype(jnp.bfloat16) for k, w in p.items()}
        return jm.loss_fn(p, x, y, spec, constrain)

    def step_fn(params, m, v, step, x, y):
        (_, ce), grads = jax.value_and_grad(objective, has_aux=True)(params, x, y)
        grads = {k: jax.lax.with_sharding_constraint(g, named(specs["grads"])[k]) for k, g in grads.items()}
        t = step.astype(jnp.float32)
        new = {k: adamw(params[k], grads[k], m[k], v[k], t, lr) for k in params}
        return ({k: u[0] for k, u in new.items()}, {k: u[1] for k, u in new.items()},
                {k: u[2] for k, u in new.items()}, ce)

    p_sh, o_sh = named(specs["params"]), named(specs["opt"])
    return jax.jit(step_fn, in_shardings=(p_sh, o_sh, o_sh, None, tok, tok),
                   out_shardings=(p_sh, o_sh, o_sh, None), donate_argnums=(0, 1, 2))


def _place(arrays: dict, shardings: dict):
    import jax

    return {k: jax.device_put(a, shardings[k]) for k, a in arrays.items()}


def peak_memory_gb() -> float:
    """The devices' peak bytes in use where the backend reports it (GPU, TPU), else this process's peak RSS."""
    import jax

    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in jax.local_devices()]
    known = [x for x in peaks if x is not None]
    if peaks and len(known) == len(peaks):
        return max(known) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # Linux: KiB


def write_hlo(profile_dir: str, text: str) -> None:
    """The compiled step's HLO beside the newest profile's trace: its operators' shapes, which XLA:CPU traces
    lack (``asap.profile.hlo`` reads it for their FLOPs and bytes)."""
    from asap.profile.hlo import HLO_SUFFIX

    runs = sorted(Path(profile_dir).glob("plugins/profile/*/"), key=lambda p: p.stat().st_mtime)
    if runs:
        (runs[-1] / ("jit_step_fn" + HLO_SUFFIX)).write_text(text)


def run_job(spec: ModelSpec, s: Strategy, global_batch: int, seq_len: int, steps: int, *, precision: str = "fp32",
            seed: int = 0, lr: float = 1e-3, data: str | None = None, profile_dir: str | None = None,
            log=lambda msg: None) -> dict:
    """Train ``steps`` steps; {losses, step_times_s, peak_memory_gb, mesh, devices, trace_dir}."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    mesh = make_mesh(s)
    weights = initial_weights(spec, seq_len, seed)
    specs = param_specs({k: w.shape for k, w in weights.items()}, s, dict(mesh.shape))
    step_fn = make_step(spec, mesh, specs, lr, precision == "bf16")
    params = _place(weights, {k: NamedSharding(mesh, sp) for k, sp in specs["params"].items()})
    opt_sh = {k: NamedSharding(mesh, sp) for k, sp in specs["opt"].items()}
    m = _place({k: np.zeros_like(w) for k, w in weights.items()}, opt_sh)
    v = _place({k: np.zeros_like(w) for k, w in weights.items()}, opt_sh)
    tok = NamedSharding(mesh, token_spec())
    data_src = Batches(spec, global_batch, seq_len, seed, data)
    losses, times = [], []
    tracing = False
    for i in range(steps):
        x, y = (jax.device_put(a, tok) for a in data_src.batch(i))  # ready before the clock starts
        if profile_dir and not tracing and i == steps - 1:  # the last step only: never timed
            Path(profile_dir).mkdir(parents=True, exist_ok=True)
            jax.profiler.start_trace(profile_dir, create_perfetto_trace=True)
            tracing = True
        t0 = time.perf_counter()
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            params, m, v, loss = step_fn(params, m, v, jnp.int32(i + 1), x, y)
            loss = float(jax.block_until_ready(loss))
        times.append(time.perf_counter() - t0)
        losses.append(loss)
        log(f"step {i + 1}/{steps} loss {loss:.5f} time {times[-1]:.3f}s")
    if tracing:
        jax.profiler.stop_trace()
        assert profile_dir is not None  # tracing only with a profile folder
        write_hlo(profile_dir, step_fn.lower(params, m, v, jnp.int32(steps), x, y).compile().as_text())
    return {"losses": losses, "step_times_s": times, "peak_memory_gb": peak_memory_gb(),
            "mesh": {k: int(n) for k, n in mesh.shape.items()}, "devices": int(mesh.size),
            "platform": jax.devices()[0].platform, "trace_dir": profile_dir if tracing else None}

