"""A decoder-only transformer built from the same ``ModelSpec`` the cost model reads (nanoGPT style: one file).

RMSNorm, rotary position embeddings, grouped-query attention through ``scaled_dot_product_attention``,
SwiGLU (or GELU / squared-ReLU) MLPs, Mixture-of-Experts layers (a top-k softmax router, routed and shared
experts, a load-balancing loss) and, optionally, DeepSeek's multi-head latent attention (MLA).

The module layout follows torchtitan so that ``asap.runners.torch.parallel`` can parallelize it with PyTorch's own
APIs: ``tok_embeddings``, ``layers`` (a ``ModuleDict`` keyed "0".."L-1", so pipeline stages can drop layers),
``norm`` and ``output``; a pipeline stage sets the modules it does not own to ``None``. Inside a block:
``attention_norm``, ``attention`` (``wq wk wv wo``), ``ffn_norm`` and ``feed_forward`` (``w1 w2 w3``) or
``moe`` (``router``, ``experts``, ``shared_experts``).

Weights are initialised from one seed on the full, unsharded model, so every parallel layout starts from the
same numbers (the trainer builds the full model on every rank, then shards it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from asap.spec.model import ModelSpec

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

AUX_LOSS_COEFF = 1e-2  # Switch Transformer's load-balancing coefficient (Fedus et al. 2021, sec. 2.2)


@dataclass
class ModelArgs:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    ffn_dim: int
    activation: str = "swiglu"
    tie_embeddings: bool = False
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 2048
    # MoE
    n_experts: int = 0
    top_k: int = 0
    expert_ffn_dim: int = 0
    n_shared_experts: int = 0
    first_dense_layers: int = 0
    # MLA
    mla: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    @classmethod
    def from_spec(cls, spec: ModelSpec, max_seq_len: int) -> "ModelArgs":
        a = cls(dim=spec.hidden_size, n_layers=spec.num_layers, n_heads=spec.num_attention_heads,
                n_kv_heads=spec.num_kv_heads, head_dim=spec.head_dim, vocab_size=spec.vocab_size,
                ffn_dim=spec.ffn_hidden_size, activation=spec.activation, tie_embeddings=spec.tie_embeddings,
                max_seq_len=max_seq_len)
        if spec.moe is not None:
            a.n_experts, a.top_k = spec.moe.num_experts, spec.moe.top_k
            a.expert_ffn_dim, a.n_shared_experts = spec.moe.expert_ffn_hidden_size, spec.moe.shared_experts
            a.first_dense_layers = spec.moe.first_dense_layers
        if spec.mla is not None:
            m = spec.mla
            a.mla, a.q_lora_rank, a.kv_lora_rank = True, m.q_lora_rank or 0, m.kv_lora_rank
            a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
        return a

    def is_moe_layer(self, i: int) -> bool:
        return self.n_experts > 0 and i >= self.first_dense_layers

    @property
    def rope_dim(self) -> int:
        return self.qk_rope_head_dim if self.mla else self.head_dim


# ------------------------------------------------------------------------------------------------------------
# Building blocks
# ------------------------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).type_as(x)


def rope_table(head_dim: int, seq_len: int, theta: float) -> torch.Tensor:
    """(seq, head_dim/2, 2): cos and sin of each position's rotation angles."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)
    return torch.stack((ang.cos(), ang.sin()), dim=-1)


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """x: (batch, seq, heads, d) with pairs (x[2i], x[2i+1]) rotated; rope: (seq, d/2, 2)."""
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    rope = rope[: xf.shape[1]]
    cos = rope[..., 0].view(1, xf.shape[1], 1, xf.shape[-2])
    sin = rope[..., 1].view(1, xf.shape[1], 1, xf.shape[-2])
    x0, x1 = xf[..., 0], xf[..., 1]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.flatten(-2).type_as(x)


def core_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   mask: torch.Tensor | None = None) -> torch.Tensor:
    """(batch, heads, seq, d) causal attention; grouped-query keys/values are repeated to the query heads.
    ``mask`` (batch, 1, seq, seq), True where a query may attend: packed documents (``document_mask``)."""
    if k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, recompute: bool,
           mask: torch.Tensor | None = None) -> torch.Tensor:
    """core_attention, checkpointed under selective recompute (its activations are rebuilt in backward)."""
    if recompute and torch.is_grad_enabled():
        return torch.utils.checkpoint.checkpoint(core_attention, q, k, v, mask, use_reentrant=False)
    return core_attention(q, k, v, mask)


def document_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """(batch, 1, seq, seq) bool: query i attends to key j when j <= i and both are in the same packed document
    (document masking, as varlen flash attention runs packed samples)."""
    s = doc_ids.shape[1]
    same = doc_ids.unsqueeze(2) == doc_ids.unsqueeze(1)
    causal = torch.ones(s, s, dtype=torch.bool, device=doc_ids.device).tril()
    return (same & causal).unsqueeze(1)


def set_document_mask(model: nn.Module, doc_ids: torch.Tensor | None) -> None:
    """Give every attention layer of ``model`` the document mask of the next forward (None: plain causal)."""
    mask = None if doc_ids is None else document_mask(doc_ids)
    for m in model.modules():
        if isinstance(m, Attention):
            m.doc_mask = mask


class Attention(nn.Module):
    """Grouped-query attention. Head counts are read off the (possibly tensor-parallel) weight shapes."""

    def __init__(self, a: ModelArgs):
        super().__init__()
        self.head_dim = a.head_dim
        self.wq = nn.Linear(a.dim, a.n_heads * a.head_dim, bias=False)
        self.wk = nn.Linear(a.dim, a.n_kv_heads * a.head_dim, bias=False)
        self.wv = nn.Linear(a.dim, a.n_kv_heads * a.head_dim, bias=False)
        self.wo = nn.Linear(a.n_heads * a.head_dim, a.dim, bias=False)
        self.recompute_core = False  # selective activation recomputation (Korthikanti et al. 2022)
        self.doc_mask: torch.Tensor | None = None  # packed documents (set_document_mask); None: causal

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = attend(q, k, v, recompute=self.recompute_core, mask=self.doc_mask)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class MLAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 sec. 2.1), without the inference-time
    absorption tricks: queries through an optional low-rank bottleneck, keys and values from a shared
    compressed latent plus one decoupled rotary key shared by all heads."""

    def __init__(self, a: ModelArgs):
        super().__init__()
        self.n_heads, self.nope, self.rope_d, self.v_d = a.n_heads, a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim
        self.kv_lora = a.kv_lora_rank
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            self.wq_a = nn.Linear(a.dim, a.q_lora_rank, bias=False)
            self.q_norm = RMSNorm(a.q_lora_rank, a.norm_eps)
            self.wq_b = nn.Linear(a.q_lora_rank, a.n_heads * qk, bias=False)
            self.wq = None
        else:
            self.wq = nn.Linear(a.dim, a.n_heads * qk, bias=False)
        self.wkv_a = nn.Linear(a.dim, a.kv_lora_rank + a.qk_rope_head_dim, bias=False)
        self.kv_norm = RMSNorm(a.kv_lora_rank, a.norm_eps)
        self.wkv_b = nn.Linear(a.kv_lora_rank, a.n_heads * (a.qk_nope_head_dim + a.v_head_dim), bias=False)
        self.wo = nn.Linear(a.n_heads * a.v_head_dim, a.dim, bias=False)
        self.recompute_core = False

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x) if self.wq is not None else self.wq_b(self.q_norm(self.wq_a(x)))
        q = q.view(b, s, self.n_heads, self.nope + self.rope_d)
        q_nope, q_pe = q.split([self.nope, self.rope_d], dim=-1)
        q = torch.cat([q_nope, apply_rope(q_pe, rope)], dim=-1)
        kv, k_pe = self.wkv_a(x).split([self.kv_lora, self.rope_d], dim=-1)
        k_pe = apply_rope(k_pe.unsqueeze(2), rope)
        kv = self.wkv_b(self.kv_norm(kv)).view(b, s, self.n_heads, self.nope + self.v_d)
        k_nope, v = kv.split([self.nope, self.v_d], dim=-1)
        k = torch.cat([k_nope, k_pe.expand(-1, -1, self.n_heads, -1)], dim=-1)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = attend(q, k, v, recompute=self.recompute_core)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


def _act(activation: str, x: torch.Tensor) -> torch.Tensor:
    if activation == "gelu":
        return F.gelu(x, approximate="tanh")
    if activation == "relu2":
        return F.relu(x).square()
    return F.silu(x)


class FeedForward(nn.Module):
    """Gated (SwiGLU: w2(silu(w1 x) * w3 x)) or plain (w2(act(w1 x))) MLP."""

    def __init__(self, dim: int, hidden: int, activation: str):
        super().__init__()
        self.activation = activation
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False) if activation == "swiglu" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = _act(self.activation, self.w1(x))
        if self.w3 is not None:
            h = h * self.w3(x)
        return self.w2(h)


class GroupedExperts(nn.Module):
    """The routed experts this rank holds: weights (local experts, in, out). ``first_expert`` is the global
    index of the first one (expert parallelism slices the full set)."""

    def __init__(self, n_experts: int, dim: int, hidden: int, activation: str):
        super().__init__()
        self.activation = activation
        self.first_expert = 0
        self.w1 = nn.Parameter(torch.empty(n_experts, dim, hidden))
        self.w2 = nn.Parameter(torch.empty(n_experts, hidden, dim))
        self.w3 = nn.Parameter(torch.empty(n_experts, dim, hidden)) if activation == "swiglu" else None

    @property
    def num_local(self) -> int:
        return self.w1.shape[0]

    def forward(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """x: tokens sorted by local expert, ``counts[e]`` of them for local expert e."""
        outs = []
        for e, xe in enumerate(torch.split(x, counts, dim=0)):
            if xe.shape[0] == 0:  # no token for this expert (its gradient stays zero)
                outs.append(xe)
                continue
            h = _act(self.activation, xe @ self.w1[e])
            if self.w3 is not None:
                h = h * (xe @ self.w3[e])
            outs.append(h @ self.w2[e])
        return torch.cat(outs, dim=0)


def _a2a(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
    """all_to_all_single with autograd (its backward is the reverse all-to-all)."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd, wait_tensor

    return wait_tensor(all_to_all_single_autograd(x, out_splits, in_splits, group))


def _expert_major(counts: torch.Tensor, device) -> torch.Tensor:
    """Tokens laid out [source, expert] (``counts[s, e]`` of each) -> the permutation that groups them by
    expert, keeping source order inside each expert."""
    n_src, n_exp = counts.shape
    seg_expert = torch.arange(n_exp, device=device).repeat(n_src)
    tok_expert = torch.repeat_interleave(seg_expert, counts.reshape(-1))
    return torch.argsort(tok_expert, stable=True)


class _AuxLossGrad(torch.autograd.Function):
    """Attach a load-balancing loss to an activation: identity forward; backward also sends ``scale`` into
    the auxiliary loss (Megatron-Core's MoEAuxLossAutoScaler), so pipeline stages need no extra plumbing."""

    @staticmethod
    def forward(ctx, out: torch.Tensor, aux: torch.Tensor, scale: float):
        ctx.save_for_backward(aux)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad):
        (aux,) = ctx.saved_tensors
        return grad, torch.full_like(aux, ctx.scale), None


class MoE(nn.Module):
    """Top-k routed experts plus always-on shared experts, dropless (no token capacity)."""

    def __init__(self, a: ModelArgs):
        super().__init__()
        self.n_experts, self.top_k = a.n_experts, a.top_k
        self.router = nn.Linear(a.dim, a.n_experts, bias=False)
        self.experts = GroupedExperts(a.n_experts, a.dim, a.expert_ffn_dim, a.activation)
        self.shared_experts = (FeedForward(a.dim, a.expert_ffn_dim * a.n_shared_experts, a.activation)
                               if a.n_shared_experts else None)
        # set by asap.runners.torch.parallel
        self.tp_mesh: DeviceMesh | None = None  # tensor-parallel mesh: tokens split over it (sequence) in the layer
        self.sequence_parallel = False  # input already split over tp along the sequence
        self.ep_group = None  # expert-parallel process group (token all-to-all)
        self.ep_size = 1
        self.etp_group = None  # expert-tensor-parallel group (each holds a slice of every local expert)
        self.etp_size = 1
        self.dispatcher = "alltoall"  # or "dedup": the two-level exchange across nodes (_dedup_dispatch_combine)
        self.ep_node_of: list[int] | None = None  # node of each ep rank (asap run --devices-per-node)
        self.ep_per_node = 1  # dedup: ep ranks per node, node i holding ep ranks i*m .. i*m+m-1
        self.rail_group = None  # dedup: the ep ranks with this rank's index on every node (one per node)
        self.node_group = None  # dedup: this node's ep ranks
        self.internode_dispatch_bytes = 0  # hidden-state bytes this rank sent to other nodes, dispatches only
        self.dispatch_remote_domains = 0  # sum over dispatched tokens of the remote nodes holding its experts
        self.aux_loss_scale = AUX_LOSS_COEFF
        self.last_aux_loss: float | None = None

    # -- token dispatch ----------------------------------------------------------------------------------
    def _routed(self, x: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        t, h = x.shape
        if self.ep_node_of is not None:
            self._count_remote_domains(idx)
        if self.dispatcher == "dedup":
            return self._dedup_dispatch_combine(x, idx, weights)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        xs = x[order // self.top_k]
        counts = torch.bincount(flat, minlength=self.n_experts)
        if self.ep_size == 1 and self.etp_size == 1:
            ys = self.experts(xs, counts.tolist())
        else:
            ys = self._dispatch_combine(xs, counts)
        y = torch.zeros_like(xs).index_copy(0, order, ys)
        return (y.view(t, self.top_k, h) * weights.unsqueeze(-1).to(y.dtype)).sum(1)

    def _dispatch_combine(self, xs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Expert parallelism: all-to-all the sorted tokens to the ranks holding their experts, run the
        local experts (through expert tensor parallelism when etp > 1), all-to-all the results back
        (Megatron-Core's alltoall token dispatcher)."""
        if self.ep_node_of is not None:
            self._count_flat_internode(xs, counts)
        return self._exchange(xs, counts, self.ep_group, self.ep_size)

    def _exchange(self, xs: torch.Tensor, counts: torch.Tensor, group, size: int) -> torch.Tensor:
        """The flat exchange over ``group`` (``size`` ranks, ``num_local`` experts each): xs sorted by the
        group's experts, ``counts`` of each; returns each copy's expert output in the same order."""
        n_local = self.experts.num_local
        if size == 1:
            return self._expert_compute(xs, counts)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts, group=group)  # [src rank, local expert]
        send_splits = counts.view(size, n_local).sum(1).tolist()
        recv = recv_counts.view(size, n_local)
        recv_splits = recv.sum(1).tolist()
        got = _a2a(xs, recv_splits, send_splits, group)
        # received: source-rank major, expert minor -> expert major for the grouped computation
        perm = _expert_major(recv, xs.device)
        out = self._expert_compute(got[perm], recv.sum(0))
        back = torch.empty_like(out).index_copy(0, perm, out)
        return _a2a(back, send_splits, recv_splits, group)

    def _count_flat_internode(self, xs: torch.Tensor, counts: torch.Tensor) -> None:
        """Flat dispatch: every routed copy bound for an ep rank on another node crosses on its own."""
        assert self.ep_node_of is not None  # called only with the nodes known
        me = self.ep_node_of[dist.get_rank(self.ep_group)]
        per_rank = counts.view(self.ep_size, -1).sum(1).tolist()
        remote = sum(c for r, c in enumerate(per_rank) if self.ep_node_of[r] != me)
        self.internode_dispatch_bytes += remote * xs.shape[1] * xs.element_size()

    def _count_remote_domains(self, idx: torch.Tensor) -> None:
        """From the routing alone: per token, the distinct nodes of its experts other than this rank's own."""
        assert self.ep_node_of is not None  # called only with the nodes known
        node_of = torch.tensor(self.ep_node_of, device=idx.device)
        nodes = node_of[idx // (self.n_experts // self.ep_size)]  # (tokens, top_k)
        distinct = (nodes.sort(dim=1).values.diff(dim=1) != 0).sum(1) + 1
        own = (nodes == self.ep_node_of[dist.get_rank(self.ep_group)]).any(1)
        self.dispatch_remote_domains += int((distinct - own.long()).sum())

    def _dedup_dispatch_combine(self, x: torch.Tensor, idx: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Two-level exchange (the MoE training report's gather-dedup-all-to-all; DeepEP): each token goes
        once to every node hosting one of its experts, to the rail peer there (the rank with this rank's
        index on that node), with its routing; the peer spreads it over the node (``_exchange`` on the node
        group), sums the weighted expert outputs of each token, and sends one vector back per token and node.
        x (tokens, dim), idx and weights (tokens, top_k) -> the weighted routed output (tokens, dim)."""
        t, h = x.shape
        m, n_local = self.ep_per_node, self.experts.num_local
        me = dist.get_rank(self.ep_group) // m
        node = idx // (n_local * m)  # (tokens, top_k): the node of each chosen expert
        hit = torch.zeros(t, self.ep_size // m, dtype=torch.bool, device=x.device)
        hit[torch.arange(t, device=x.device).unsqueeze(1), node] = True
        dst, tok = hit.T.nonzero(as_tuple=True)  # one row per (token, node), destination-node major
        on = node[tok] == dst.unsqueeze(1)
        rx, rw, rids, send_splits, recv_splits = self._rail_dispatch(
            x[tok], torch.where(on, weights[tok], 0.0), torch.where(on, idx[tok], -1), hit.sum(0).tolist())
        self.internode_dispatch_bytes += (sum(send_splits) - send_splits[me]) * h * x.element_size()
        row, slot = (rids >= 0).nonzero(as_tuple=True)  # the received rows' copies for this node's experts
        rel = rids[row, slot] - me * m * n_local  # expert index inside the node: node-rank major
        order = torch.argsort(rel, stable=True)
        row, slot = row[order], slot[order]
        ys = self._exchange(rx[row], torch.bincount(rel, minlength=m * n_local), self.node_group, m)
        per_row = torch.zeros_like(rx).index_add(0, row, ys * rw[row, slot].unsqueeze(-1).to(ys.dtype))
        back = _a2a(per_row, send_splits, recv_splits, self.rail_group)
        return torch.zeros_like(x).index_add(0, tok, back.to(x.dtype))

    def _rail_dispatch(self, x: torch.Tensor, w: torch.Tensor, ids: torch.Tensor, send_splits: list[int]):
        """The inter-node level: ``send_splits[j]`` rows (hidden state, the weights and expert ids of the
        experts on node j, -1 elsewhere) to rail peer j; returns what arrived and the splits both ways."""
        sent = torch.tensor(send_splits, dtype=torch.int64, device=x.device)
        got = torch.empty_like(sent)
        dist.all_to_all_single(got, sent, group=self.rail_group)
        recv_splits = got.tolist()
        rids = ids.new_empty((sum(recv_splits), ids.shape[1]))
        dist.all_to_all_single(rids, ids.contiguous(), recv_splits, send_splits, group=self.rail_group)
        rx = _a2a(x, recv_splits, send_splits, self.rail_group)
        rw = _a2a(w.contiguous(), recv_splits, send_splits, self.rail_group)
        return rx, rw, rids, send_splits, recv_splits

    def _expert_compute(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """x: tokens grouped by local expert (``counts`` each). With etp > 1 the experts' hidden dimension is
        split over the etp group: gather the group's tokens, run this rank's slice, and send every partial
        output back to its token's rank, which sums them (all-gather and reduce-scatter by all-to-all)."""
        if self.etp_size == 1:
            return self.experts(x, counts.tolist())
        etp, n_mine = self.etp_size, x.shape[0]
        peers = [torch.empty_like(counts) for _ in range(etp)]
        dist.all_gather(peers, counts, group=self.etp_group)
        cnt = torch.stack(peers)  # [peer, local expert]
        n_each = cnt.sum(1).tolist()
        gathered = _a2a(torch.cat([x] * etp), n_each, [n_mine] * etp, self.etp_group)
        perm = _expert_major(cnt, x.device)
        out = self.experts(gathered[perm], cnt.sum(0).tolist())
        back = torch.empty_like(out).index_copy(0, perm, out)
        partial = _a2a(back, [n_mine] * etp, n_each, self.etp_group)
        return partial.view(etp, n_mine, -1).sum(0)

    def _local_forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (tokens, dim) that are this rank's own (distinct from every other rank's)."""
        from torch.distributed.tensor import DTensor, Shard

        tp = self.tp_mesh is not None and self.tp_mesh.size() > 1
        # router and shared experts are tensor-parallel-replicated: run them on DTensors sharded over the
        # tokens so that their weight gradients are summed over the tp ranks
        xin = DTensor.from_local(x, self.tp_mesh, [Shard(0)]) if tp else x
        logits = self.router(xin)
        logits = logits.to_local() if tp else logits
        probs = logits.float().softmax(dim=-1)
        topv, topi = probs.topk(self.top_k, dim=-1)
        topv = topv / topv.sum(dim=-1, keepdim=True)
        y = self._routed(x, topi, topv)
        if self.shared_experts is not None:
            s = self.shared_experts(xin)
            y = y + (s.to_local() if tp else s)
        if self.training and torch.is_grad_enabled():
            # load balancing (Switch Transformer): E * sum_i f_i P_i over the sequence. Under tp each rank
            # holds a slice of it: the token counts f are summed over tp (no gradient flows through them),
            # and each slice contributes its share of P, so the slices add up to the whole-sequence loss.
            counts = torch.bincount(topi.reshape(-1), minlength=self.n_experts).float()
            n_tokens = x.shape[0]
            if tp:
                import torch.distributed as dist

                assert self.tp_mesh is not None  # tp: a mesh of more than one rank
                dist.all_reduce(counts, group=self.tp_mesh.get_group())
                n_tokens *= self.tp_mesh.size()
            f = counts / (n_tokens * self.top_k)
            aux = self.n_experts * (f * probs.sum(0) / n_tokens).sum()
            self.last_aux_loss = float(aux.detach())
            y = _AuxLossGrad.apply(y, aux, self.aux_loss_scale)
        return y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        tp = self.tp_mesh is not None and self.tp_mesh.size() > 1
        if tp and not self.sequence_parallel:
            # replicated input: each tp rank takes its slice of the sequence (backward: all-gather)
            from torch.distributed.tensor import DTensor, Replicate, Shard

            xs = DTensor.from_local(x, self.tp_mesh, [Replicate()]).redistribute(placements=[Shard(1)]).to_local()
            y = self._local_forward(xs.reshape(-1, h)).view(xs.shape)
            return DTensor.from_local(y, self.tp_mesh, [Shard(1)]).redistribute(placements=[Replicate()]).to_local()
        return self._local_forward(x.reshape(-1, h)).view(b, s, h)


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, a: ModelArgs):
        super().__init__()
        self.layer_id = layer_id
        # norms, MoE and FeedForward: the modules or their checkpoint wrappers (asap.runners.torch.parallel.apply_ac)
        self.attention_norm: nn.Module = RMSNorm(a.dim, a.norm_eps)
        self.attention = MLAttention(a) if a.mla else Attention(a)
        self.ffn_norm: nn.Module = RMSNorm(a.dim, a.norm_eps)
        self.moe: nn.Module | None
        self.feed_forward: nn.Module | None
        if a.is_moe_layer(layer_id):
            self.moe = MoE(a)
            self.feed_forward = None
        else:
            self.moe = None
            self.feed_forward = FeedForward(a.dim, a.ffn_dim, a.activation)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope)
        ffn = self.moe if self.moe is not None else self.feed_forward
        assert ffn is not None  # a block has one or the other
        return h + ffn(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.args = a
        self.tok_embeddings = nn.Embedding(a.vocab_size, a.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(i, a) for i in range(a.n_layers)})
        self.norm = RMSNorm(a.dim, a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab_size, bias=False)
        if a.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.register_buffer("rope", rope_table(a.rope_dim, a.max_seq_len, a.rope_theta), persistent=False)

    @torch.no_grad()
    def init_weights(self, seed: int) -> None:
        """Deterministic init of the full model (GPT-2 / Megatron: N(0, 0.02); output projections of each
        residual branch scaled by 1/sqrt(2 L))."""
        g = torch.Generator().manual_seed(seed)
        std = 0.02
        out_std = std / math.sqrt(2 * self.args.n_layers)
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if name.endswith("norm.weight"):
                p.fill_(1.0)
                continue
            is_out = (name.endswith("wo.weight") or name.endswith("w2.weight")
                      or (".experts." in name and leaf == "w2"))
            p.copy_(torch.randn(p.shape, generator=g) * (out_std if is_out else std))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (batch, seq) int64 -> logits (batch, seq, vocab); a pipeline stage without the embedding
        takes hidden states instead, one without the head returns them."""
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        for layer in self.layers.values():
            h = layer(h, self.rope)
        if self.norm is not None:
            h = self.norm(h)
        if self.output is not None:
            h = self.output(h)
        return h

    def moe_layers(self) -> list[MoE]:
        return [m for m in self.modules() if isinstance(m, MoE)]


def build_model(spec: ModelSpec, seq_len: int, seed: int) -> Transformer:
    """The full model on the CPU in fp32, initialised from ``seed`` (independent of any parallel layout)."""
    model = Transformer(ModelArgs.from_spec(spec, seq_len))
    model.init_weights(seed)
    return model


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())
