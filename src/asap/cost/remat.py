"""MaxText's remat policies priced per layer (``asap.spec.remat``): what each named tensor stores on the
device, moves to host memory, or costs to recompute, from the layer's operation table (``asap.cost.layer_ops``).

A layer under ``jax.checkpoint`` with a ``save_only_these_names`` / ``save_and_offload_only_these_names`` policy
keeps its input (the scan carry, ``decoder_layer_input``) and the named tensors the policy saves; in backward
every other value a backward operation reads is re-run from the nearest kept ones, and nothing else (XLA drops
recomputed values no backward reads). The values of a layer, each with the operations that produce it, the
values those read, its bytes per device and micro-batch (the table's ``Saved`` figures) and the names that save
it (MaxText's ``checkpoint_name`` tags):

    X  layer input (input norm's input)       n1 input norm output       q, k, v  projections after RoPE
       (query_proj / key_proj / value_proj; kv_proj k and v; qkv_proj all three; each its share of the
       projection GEMMs by width)             lse  the kernel's log-sum-exp (context)
    o  the attention output (attention_out, context)      p  out projection output (out_proj)
    r1 mid-layer residual (X + p)             n2 pre-MLP norm output
    f0, f1 fc1 output halves (mlpwi_0 / mlpwi_1; mlpwi both)   a  fc2 input
    MoE: logits (router), d dispatched rows, e0/e1 expert fc1 halves (moe_mlpwi_0/1, mlpwi_0/1), ea expert fc2
    input, eo expert outputs (moe_mlpwo, mlpwo: combine's backward reads them for the routing weights)

Backward reads (each operation's inputs): the input norm X; the projections n1; the attention kernel q, k, v,
o and lse; out_proj o; the pre-MLP norm r1; fc1 (router, shared experts) n2; the activation f0, f1; fc2 a;
the top-k the logits; the experts' fc1 d; combine eo. A dense layer's fc2 output (mlpwo) is read by no
backward (the residual add's transpose reads nothing): saving it stores nothing.

Offloaded tensors leave the device after the layer's forward and come back before its backward, as
``offload_act`` prices it (``asap.cost.offload``). ``decoder_layer_input=remat`` is priced as ``device``: base.yml
says it cannot be rematerialised (it is the remat start point). ``context`` is the cuDNN flash kernel's tag
(``attention_op.cudnn_flash_attention``: its output and log-sum-exp); TPU's splash kernel tags nothing, so there
a policy that saves context keeps it only through ``attention_out``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asap.cost.layer_ops import Shapes
from asap.cost.operations import OperationTable
from asap.spec.hardware import Accelerator
from asap.spec.remat import Where, assignment, is_maxtext


@dataclass
class Value:
    bytes: np.ndarray | float
    producers: tuple[tuple[str, float], ...] = ()  # (operation name, share of it) re-run to regenerate it
    inputs: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # the checkpoint_name tags that save it


@dataclass
class RematFigures:
    """Per row of one layer kind (0 where the row's recompute is not a MaxText policy)."""

    recompute_s: np.ndarray  # forward seconds re-run in backward
    device_bytes: np.ndarray  # stored on the device per micro-batch
    offload_bytes: np.ndarray  # stored in host memory per micro-batch


def _op(table: OperationTable, name: str):
    return next((op for op in table.operations if op.name == name), None)


def _mlp_values(table: OperationTable, prefix: str, src: str, names0, names1, gated: bool) -> dict[str, Value]:
    fc1, act, fc2 = (_op(table, f"{prefix}_{s}") for s in ("fc1", "act", "fc2"))
    assert fc1 is not None and act is not None and fc2 is not None
    half = 0.5 if gated else 1.0
    out = {f"{prefix}.f0": Value(act.saves[0].bytes * half, ((fc1.name, half),), (src,), names0),
           f"{prefix}.a": Value(fc2.saves[0].bytes, ((act.name, 1.0),),
                                (f"{prefix}.f0", f"{prefix}.f1") if gated else (f"{prefix}.f0",))}
    if gated:
        out[f"{prefix}.f1"] = Value(act.saves[0].bytes * half, ((fc1.name, half),), (src,), names1)
    return out


def _attention_values(table: OperationTable, x: Shapes, widths: dict, heads) -> dict[str, Value]:
    """``widths``: q, k, v and the attention output per device (elements per token); ``heads``: query heads."""
    ops = [op.name for op in table.operations]
    proj = ops[ops.index("input_norm") + 1:ops.index("core_attn")]  # QKV (or MLA) projections and RoPE
    core, norm = _op(table, "core_attn"), _op(table, "input_norm")
    assert core is not None and norm is not None
    qkv_bytes = core.saves[0].bytes
    share = {t: widths[t] / (widths["q"] + widths["k"] + widths["v"]) for t in "qkv"}
    names = {"q": ("query_proj", "qkv_proj"), "k": ("key_proj", "kv_proj", "qkv_proj"),
             "v": ("value_proj", "kv_proj", "qkv_proj")}
    out = {"X": Value(norm.saves[0].bytes), "n1": Value(0.0, (("input_norm", 1.0),), ("X",))}
    for t in "qkv":
        out[t] = Value(qkv_bytes * share[t], tuple((p, share[t]) for p in proj), ("n1",), names[t])
    out["lse"] = Value(4.0 * x.T * heads, (("core_attn", 1.0),), ("q", "k", "v"), ("context",))
    out["o"] = Value(x.ab * x.T * widths["o"], (("core_attn", 1.0),), ("q", "k", "v"), ("attention_out", "context"))
    out["p"] = Value(norm.saves[0].bytes, (("out_proj", 1.0),), ("o",), ("out_proj",))
    out["r1"] = Value(0.0, (("attn_residual", 1.0),), ("X", "p"))
    out["n2"] = Value(0.0, (("pre_mlp_norm", 1.0),), ("r1",))
    return out


READS = ("X", "n1", "q", "k", "v", "o", "lse", "r1", "n2")  # the attention half's and the MLP input's readers


def layer_values(table: OperationTable, x: Shapes, model, moe: bool) -> tuple[dict[str, Value], tuple[str, ...]]:
    """The layer's values and the ones its backward operations read (module docstring)."""
    from asap.cost.layer_ops import attention_head_dims, kv_heads_per_device

    d_qk, dv = attention_head_dims(model)
    nh_dev = model.num_attention_heads / x.tp
    kv_dev = nh_dev if model.mla is not None else kv_heads_per_device(model, x.tp)  # MLA: up-projected per head
    widths = {"q": nh_dev * d_qk, "k": kv_dev * d_qk, "v": kv_dev * dv, "o": nh_dev * dv}
    values = _attention_values(table, x, widths, nh_dev)
    reads = list(READS)
    if not moe:
        values.update(_mlp_values(table, "mlp", "n2", ("mlpwi_0", "mlpwi"), ("mlpwi_1", "mlpwi"), model.gated))
        return values, tuple(reads + [k for k in values if k.startswith("mlp.")])
    router, dispatch = _op(table, "router"), _op(table, "dispatch")
    assert router is not None and dispatch is not None
    values["logits"] = Value(router.saves[1].bytes, (("router", 1.0),), ("n2",))
    values["d"] = Value(dispatch.saves[0].bytes, (("router_topk", 1.0), ("dispatch", 1.0)), ("n2", "logits"))
    experts = _mlp_values(table, "experts", "d", ("moe_mlpwi_0", "mlpwi_0"), ("moe_mlpwi_1", "mlpwi_1"), model.gated)
    values.update(experts)
    rows = dispatch.saves[0].bytes / (x.ab + x.gemm_in)  # routed rows x hidden
    values["eo"] = Value(rows * x.ab, (("experts_fc2", 1.0),), ("experts.a",), ("moe_mlpwo", "mlpwo"))
    reads += ["logits", "d", "eo", *experts]
    if _op(table, "shared_experts_fc1") is not None:
        shared = _mlp_values(table, "shared_experts", "n2", ("mlpwi_0", "mlpwi"), ("mlpwi_1", "mlpwi"), model.gated)
        values.update(shared)
        reads += list(shared)
    return values, tuple(reads)


def policy_figures(values: dict[str, Value], reads, where: dict[str, Where]):
    """(re-run (operation, share) totals, device bytes, offloaded bytes) of one policy: a walk from the values
    the backward reads back to the kept ones."""
    place = {"X": Where.OFFLOAD if where["decoder_layer_input"] == Where.OFFLOAD else Where.DEVICE}
    for key, v in values.items():
        kept = [where[n] for n in v.names if where[n] != Where.REMAT]
        if key != "X" and kept:
            place[key] = Where.DEVICE if Where.DEVICE in kept else Where.OFFLOAD
    rerun: dict[str, float] = {}
    seen: set[str] = set()
    stack = list(reads)
    while stack:
        key = stack.pop()
        if key in seen:
            continue
        seen.add(key)
        if key in place:
            continue
        for op, share in values[key].producers:
            rerun[op] = np.minimum(1.0, rerun.get(op, 0.0) + share)
        stack.extend(values[key].inputs)
    device = sum((values[k].bytes for k in seen if place.get(k) == Where.DEVICE), 0.0)
    offload = sum((values[k].bytes for k in seen if place.get(k) == Where.OFFLOAD), 0.0)
    return rerun, device, offload


def remat_figures(table: OperationTable, x: Shapes, model, codes, moe: bool, acc: Accelerator | None = None):
    """``RematFigures`` of one layer kind for every row (the rows without a MaxText policy: zeros); without
    ``acc`` the recompute seconds are left at 0 (memory alone)."""
    codes = np.asarray(codes)
    zero = np.zeros(len(codes))
    out = RematFigures(zero.copy(), zero.copy(), zero.copy())
    if not is_maxtext(codes).any():
        return out
    values, reads = layer_values(table, x, model, moe)
    for code in np.unique(codes[is_maxtext(codes)]):
        rerun, device, offload = policy_figures(values, reads, assignment(int(code)))
        rows = codes == code
        if acc is not None:
            seconds = sum((_op(table, op).fwd_s(acc) * share for op, share in rerun.items()), zero)
            out.recompute_s = np.where(rows, seconds, out.recompute_s)
        out.device_bytes = np.where(rows, device + zero, out.device_bytes)
        out.offload_bytes = np.where(rows, offload + zero, out.offload_bytes)
    return out
