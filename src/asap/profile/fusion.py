"""Operator fusion: chains of memory-bound elementwise and normalization operators that one fused kernel would
replace, and the bytes and time that kernel would save on the device's roofline.

A chain is a run of operators, one after another on one lane (CPU thread or GPU stream), each of them
memory-bound (arithmetic intensity below the roofline's ridge) and fusible by kind (elementwise, casts,
activations, normalizations and their reductions: RMSNorm's pow/mean/rsqrt/mul, RoPE's muls and adds,
SwiGLU's silu and product, bias and residual adds), each one reading the previous one's output. A matrix
operator, a collective, or any other operator (embedding, loss, optimizer) ends it; views and output
initialisations (``fill_``, ``zero_``) do not. The trace records shapes, not tensor identities, so "reads
the previous one's output" is tested on shapes: one of the op's inputs has as many elements as the previous
op's output (views keep the count; a broadcast operand matches a norm's statistics).

Saved bytes. Unfused, every op reads its inputs from memory and writes its output to memory; the fused
kernel reads the chain's external inputs once and writes only the final output. For a chain of ops
1..n with outputs of o_i bytes (``asap.profile.ops.io_bytes``), each intermediate output (i < n) is written
once and read back once by the op after it, so

    saved_bytes = sum_{i<n} 2 * o_i,        saved_s = saved_bytes / B_mem

with B_mem the roofline's memory bandwidth. Repeated reads of an external input (RMSNorm reads x twice)
would also be saved and are not counted: a lower bound. Chains of one op save nothing and are not listed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from asap.profile.devices import Roofline
from asap.profile.ops import _ELEMENTWISE, REDUCTIONS, TensorIO
from asap.profile.trace import OpInstance, Timeline, is_matrix
from asap.profile.windows import US, window_index

# elementwise-like ops that a fused kernel cannot absorb: gathers, losses, optimizer steps
_NOT_FUSIBLE = {"embedding", "embedding_dense_backward", "index_select", "gather", "scatter", "scatter_add",
                "nll_loss_forward", "nll_loss_backward", "cross_entropy_loss", "argmax", "argmin",
                "_fused_adam", "_fused_adamw", "index", "index_put", "index_add", "index_copy", "sort", "topk"}
_EXTRA_FUSIBLE = {"stack", "sub", "rsub", "neg", "reciprocal", "nan_to_num", "gt", "ge", "lt", "le", "eq", "ne",
                  "logical_not", "maximum", "minimum", "square", "sin", "cos", "hardtanh", "leaky_relu", "elu",
                  "sigmoid_backward", "tanh_backward", "silu_backward", "gelu_backward", "pow_backward",
                  "native_layer_norm", "native_layer_norm_backward", "_fused_rms_norm_backward", "addcmul",
                  "exp", "log1p", "expm1", "sign", "softplus", "masked_fill", "where", "_unsafe_index"}
_INIT = {"fill_", "zero_", "fill", "zero"}  # output initialisations: they neither join nor end a chain
# device kernels that are elementwise or normalization work when no launching op names them
_KERNEL_WORDS = ("elementwise", "vectorized", "reduce_kernel", "layer_norm", "rms_norm", "softmax", "triton_poi",
                 "triton_red", "unrolled_elementwise", "CatArrayBatchedCopy")


def _base(name: str) -> str:
    return name.split("::", 1)[-1]


def fusible_name(name: str) -> bool:
    """Elementwise, cast, activation or normalization by its aten name (in-place spellings included)."""
    base = _base(name)
    plain = base.rstrip("_") or base
    if base in _NOT_FUSIBLE or plain in _NOT_FUSIBLE or base.startswith("_foreach_") or base in _INIT:
        return False
    if not name.startswith("aten::"):
        return any(w in name for w in _KERNEL_WORDS)
    return (base in _ELEMENTWISE or plain in _ELEMENTWISE or plain in REDUCTIONS or plain in _EXTRA_FUSIBLE
            or base == "copy_")


def _role(op: OpInstance, roofline: Roofline) -> str:
    """'skip' (views, wrappers, initialisations), 'link' (memory-bound, fusible, shapes known) or 'break'."""
    if not op.is_comm and (not op.leaf or _base(op.name) in _INIT or (op.io is not None and op.io.in_bytes
                                                                      + op.io.out_bytes == 0)):
        return "skip"
    if op.is_comm or op.io is None or is_matrix(op.name) or not fusible_name(op.name):
        return "break"
    if op.flops is not None and op.bytes and op.flops / op.bytes >= roofline.ridge(op.precision):
        return "break"  # compute-bound after all
    return "link"


def _io(op: OpInstance) -> TensorIO:
    """The tensors of a chain's op: its role is 'link', so its shapes are known."""
    assert op.io is not None
    return op.io


def _reads_previous(op: OpInstance, prev: OpInstance) -> bool:
    return _io(prev).out_numel > 0 and _io(prev).out_numel in _io(op).in_numels


def lane_chains(ops: list[OpInstance], roofline: Roofline) -> list[list[OpInstance]]:
    """The fusible chains (two ops or more) of one lane's ops, taken in start order."""
    chains: list[list[OpInstance]] = []
    current: list[OpInstance] = []
    for op in sorted(ops, key=lambda o: o.start_us):
        role = _role(op, roofline)
        if role == "skip":
            continue
        if role == "link" and current and _reads_previous(op, current[-1]):
            current.append(op)
            continue
        if len(current) >= 2:
            chains.append(current)
        current = [op] if role == "link" else []
    if len(current) >= 2:
        chains.append(current)
    return chains


def chain_saved_bytes(chain: list[OpInstance]) -> float:
    """sum over every op but the last of 2 x its output bytes: the intermediate's write and its read back."""
    return sum(2.0 * _io(op).out_bytes for op in chain[:-1])


@dataclass
class FusionRow:
    ops: list[str]
    calls: float  # per step and rank
    time_s: float  # the unfused chain's time per step (device time; CPU: self time)
    saved_bytes: float  # per step
    saved_s: float  # saved_bytes / memory bandwidth

    def to_dict(self) -> dict:
        return {"ops": self.ops, "calls": self.calls, "time_s": self.time_s, "saved_bytes": self.saved_bytes,
                "saved_s": self.saved_s}


def fusion_table(timelines: list[Timeline], roofline: Roofline) -> list[FusionRow]:
    """Chains grouped by their op names in order, per step and rank (calls counted in the step window where
    the chain starts, like operator_table), the largest saving first."""
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    n_ranks = max(len(timelines), 1)
    for tl in timelines:
        weight = 1.0 / (max(len(tl.window_names), 1) * n_ranks)
        lanes: dict[int, list[OpInstance]] = defaultdict(list)
        for op in tl.ops:
            lanes[op.lane].append(op)
        chains = [c for lane_ops in lanes.values() for c in lane_chains(lane_ops, roofline)]
        if not chains:
            continue
        inside = window_index(np.array([c[0].start_us for c in chains], dtype=np.float64), tl.windows_us) >= 0
        for chain, ok in zip(chains, inside.tolist(), strict=True):
            if ok:
                row = sums[tuple(op.name for op in chain)]
                row[0] += weight
                row[1] += sum(op.time_us for op in chain) * US * weight
                row[2] += chain_saved_bytes(chain) * weight
    rows = [FusionRow(list(names), calls, time_s, saved, saved / roofline.bytes_per_s)
            for names, (calls, time_s, saved) in sums.items()]
    rows.sort(key=lambda r: (-r.saved_s, -r.time_s, r.ops))
    return rows
