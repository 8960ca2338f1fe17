"""The operation record of the cost model and what is derived from a table of them (Calculon's unit, Isaev et
al. 2023: a layer as a list of operations, each with its FLOPs, bytes and stored tensors, priced together).

An ``Operation`` is one operator of a layer on one device for one micro-batch, vectorized over a batch of
strategies (its figures are numpy arrays, one entry per row): its kind (GEMM, flash attention, a memory-bound
kernel) and shape, the block it belongs to, the axis that shards it, the recompute modules that re-run it
(``RecomputeModule``; modules nest: ``moe`` covers the routed and shared experts), and the tensors it saves for
backward (``Saved``: the recompute modules, and the stack's selective policy, that drop each). ``OperationTable``
holds one layer kind's operations (``asap.cost.layer_ops`` builds them) and derives from them what the rest of
the cost model reads: forward and backward time (the roofline of ``asap.cost.roofline``), the memory-bound
share, what re-running each module costs, and the stored activation bytes under every recompute value.

Backward over forward per kind: a GEMM's data- and weight-gradient GEMMs are each the forward's size (2x);
flash attention's backward runs five matmuls against the forward's two (2.5x; Dao 2023, FlashAttention-2,
sec. 3.1); memory-bound kernels read and write about twice as much in backward (2x).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from asap.cost.roofline import BYTES, act_bytes, attention_time_s, elementwise_time_s, gemm_time_s
from asap.spec.hardware import Accelerator
from asap.spec.knobs import RecomputeModule, module_recomputed

BWD_GEMM = 2.0
BWD_ATTENTION = 2.5
BWD_ELEMENTWISE = 2.0


class OpKind(str, Enum):
    """How an operation is priced (``asap.cost.roofline``)."""

    GEMM = "gemm"  # max(FLOPs / achievable FLOP/s, bytes / bandwidth) + a launch gap
    ATTENTION = "attention"  # the fused (flash) kernel: compute-bound at the attention efficiency
    ELEMENTWISE = "elementwise"  # memory-bound: bytes over bandwidth + a launch gap per kernel


BACKWARD_OVER_FORWARD = {OpKind.GEMM: BWD_GEMM, OpKind.ATTENTION: BWD_ATTENTION, OpKind.ELEMENTWISE: BWD_ELEMENTWISE}


class Block(str, Enum):
    """The part of the model an operation belongs to."""

    ATTENTION = "attention"  # input norm, projections, the attention kernel, out projection, residual
    MLP = "mlp"  # pre-MLP norm, the dense MLP or the MoE block, residual
    EMBEDDING = "embedding"
    HEAD = "head"  # final norm, LM head, loss


class Axis(str, Enum):
    """What splits an operation's work over devices, beyond context parallelism (every operation's tokens are
    split by cp: T = b s / cp)."""

    TP = "tp"  # heads or FFN columns split by tensor parallelism (Megatron-Core's column/row-parallel linears)
    SP = "sp"  # tokens split by tp under sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2)
    EP = "ep"  # routed experts over ep, their columns over etp (Megatron-Core parallel folding)
    REPLICATED = "replicated"  # the whole operation on every tensor-parallel rank (MLA's down-projections)
    VOCAB = "vocab"  # the vocabulary split by tp (vocab-parallel embedding, head and loss)


@dataclass
class Saved:
    """A tensor an operation keeps for its backward, bytes per device per micro-batch. ``dropped_by``: the
    recompute modules that stop storing it (it is regenerated when they re-run); ``selective``: the kernels
    selective policy (norm and activation outputs recomputed) stops storing it."""

    bytes: np.ndarray
    dropped_by: tuple[RecomputeModule, ...] = ()
    selective: bool = False


@dataclass
class Operation:
    """One operator of a layer on one device for one micro-batch (figures are arrays over the strategies).

    GEMM: ``count`` GEMMs of (m, k) x (k, n) in ``precision`` (``grouped``: the routed experts' grouped GEMM);
    attention: ``flops`` over ``kernels`` launches; elementwise: ``bytes`` over ``kernels`` launches. ``memory_bound``: whether it counts
    in the layer's memory-bound share (``memory_bound_kernels``: the launches it counts there; None: all)."""

    name: str
    kind: OpKind
    block: Block
    axis: Axis
    modules: tuple[RecomputeModule, ...] = ()
    saves: tuple[Saved, ...] = ()
    precision: str = "bf16"
    m: np.ndarray | float = 0.0
    n: np.ndarray | float = 0.0
    k: np.ndarray | float = 0.0
    count: np.ndarray | float = 1.0
    grouped: bool = False
    flops: np.ndarray | float = 0.0  # attention: the kernel's forward FLOPs
    head_dims: tuple = (128.0, 128.0)  # attention: (d_qk, d_v) of a head
    kv_len: np.ndarray | float = 2048.0  # attention: keys per query per kernel call, on average
    sdpa: bool = False  # attention: PyTorch SDPA's default backend, at the family's ``sdpa_attention_rate``
    bytes: np.ndarray | float = 0.0  # elementwise: HBM bytes read and written
    kernels: np.ndarray | float = 1.0
    memory_bound: bool = True
    memory_bound_kernels: float | None = None
    _priced: tuple | None = field(default=None, repr=False, compare=False)  # (accelerator, forward seconds)

    @property
    def flops_fwd(self):
        """Forward FLOPs: 2 m n k per GEMM; the attention kernel's; none for memory-bound kernels."""
        if self.kind == OpKind.GEMM:
            return 2.0 * np.maximum(self.m, 1.0) * np.maximum(self.n, 1.0) * np.maximum(self.k, 1.0) * self.count
        return self.flops if self.kind == OpKind.ATTENTION else 0.0

    @property
    def flops_bwd(self):
        return self.flops_fwd * BACKWARD_OVER_FORWARD[self.kind]

    @property
    def bytes_moved(self):
        """Forward HBM bytes: a GEMM's operands and result once each; a memory-bound kernel's traffic."""
        if self.kind == OpKind.GEMM:
            m, n, k = (np.maximum(d, 1.0) for d in (self.m, self.n, self.k))
            return self.count * (BYTES[self.precision] * (m * k + k * n) + act_bytes(self.precision) * m * n)
        return self.bytes if self.kind == OpKind.ELEMENTWISE else 0.0

    @property
    def saved_bytes(self):
        return sum((s.bytes for s in self.saves), 0.0)

    def fwd_s(self, acc: Accelerator):
        """Forward seconds on ``acc`` (``asap.cost.roofline``), priced once per accelerator."""
        if self._priced is not None and self._priced[0] is acc:
            return self._priced[1]
        if self.kind == OpKind.GEMM:
            t = gemm_time_s(acc, self.precision, self.m, self.n, self.k, count=self.count, grouped=self.grouped)
        elif self.kind == OpKind.ATTENTION:
            t = attention_time_s(acc, self.precision, self.flops, d_qk=self.head_dims[0], d_v=self.head_dims[1],
                                 kv_len=self.kv_len, sdpa=self.sdpa, calls=self.kernels)
        else:
            t = elementwise_time_s(acc, self.bytes, kernels=self.kernels)
        self._priced = (acc, t)
        return t

    def memory_bound_s(self, acc: Accelerator):
        """Its part of the layer's memory-bound forward seconds (0 for GEMMs and the attention kernel)."""
        if self.kind != OpKind.ELEMENTWISE or not self.memory_bound:
            return 0.0
        if self.memory_bound_kernels is None or self.memory_bound_kernels == self.kernels:
            return self.fwd_s(acc)
        return elementwise_time_s(acc, self.bytes, kernels=self.memory_bound_kernels)


@dataclass
class OperationTable:
    """The operations of one layer kind (or of the embedding and the head), in execution order."""

    operations: list[Operation]
    rows: int  # strategies in the batch

    def select(self, block: Block | None = None, kind: OpKind | None = None, axis: Axis | None = None,
               module: RecomputeModule | None = None) -> list[Operation]:
        return [op for op in self.operations if (block is None or op.block == block)
                and (kind is None or op.kind == kind) and (axis is None or op.axis == axis)
                and (module is None or module in op.modules)]

    def _zero(self):
        return np.zeros(self.rows)

    def fwd_s(self, acc: Accelerator, ops: list[Operation] | None = None) -> np.ndarray:
        """Forward seconds of ``ops`` (every operation when None)."""
        ops = self.operations if ops is None else ops
        return sum((op.fwd_s(acc) for op in ops), self._zero())

    def bwd_s(self, acc: Accelerator, ops: list[Operation] | None = None) -> np.ndarray:
        """Backward seconds: each operation's forward times its kind's backward factor."""
        ops = self.operations if ops is None else ops
        return sum((op.fwd_s(acc) * BACKWARD_OVER_FORWARD[op.kind] for op in ops), self._zero())

    def memory_bound_s(self, acc: Accelerator) -> np.ndarray:
        return sum((op.memory_bound_s(acc) for op in self.operations), self._zero())

    def module_fwd_s(self, acc: Accelerator) -> dict[str, np.ndarray]:
        """What re-running each recompute module's forward costs (``RecomputeModule`` label -> seconds; modules
        with no operation in this table are absent)."""
        out = {}
        for m in RecomputeModule:
            ops = self.select(module=m)
            if ops:
                out[m.label] = self.fwd_s(acc, ops)
        return out

    def saved(self) -> list[Saved]:
        return [s for op in self.operations for s in op.saves]

    def input_bytes(self) -> np.ndarray:
        """The layer's input, which the first operation saves: all that full recompute keeps of a layer."""
        return self.operations[0].saves[0].bytes + self._zero()

    def stored_bytes(self, selective: bool = False) -> np.ndarray:
        """Stored activation bytes without recompute, or under the kernels selective policy."""
        return sum((s.bytes for s in self.saved() if not (selective and s.selective)), self._zero())

    def module_kept_bytes(self, recompute) -> np.ndarray:
        """Per row: what the layer stores when its recompute value is a module set (other rows: everything)."""
        out = self._zero()
        for s in self.saved():
            dropped = np.zeros(self.rows, dtype=bool)
            for m in s.dropped_by:
                dropped = dropped | module_recomputed(recompute, m)
            out = out + np.where(dropped, 0.0, s.bytes)
        return out
