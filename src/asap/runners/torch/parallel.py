"""Parallelize ``asap.runners.torch.model.Transformer`` with PyTorch's own distributed APIs (torchtitan style).

* ``ParallelDims``: the degrees and the device meshes they derive from their ``asap.spec.placement.Placement``
  (the rank order the cost model prices). The dense grid is (pp, dp, cp, tp); the expert grid regroups the
  same devices of each pipeline stage as (pp, edp, ep, etp) -- Megatron-Core's "MoE parallel folding"
  (arXiv:2504.14960), so ep may be folded over dp, cp and tp.
* ``apply_tp``: tensor (+ sequence) parallelism with DTensor ``parallelize_module``.
* ``apply_ep``: expert parallelism: each rank keeps num_experts/ep experts (and, with etp > 1, a 1/etp
  slice of each one's hidden dimension); tokens travel by ``all_to_all_single`` inside the expert group,
  and inside the expert-tensor group (``asap.runners.torch.model.MoE._dispatch_combine``). With
  dispatcher=dedup and ``devices_per_node`` splitting the expert group over nodes, the exchange has two
  levels: rail groups across nodes and node groups inside them (``ep_node_layout``,
  ``MoE._dedup_dispatch_combine``).
* ``apply_ac``: activation checkpointing: ``full`` wraps every block with ``checkpoint_wrapper``;
  ``selective`` recomputes only the core attention (Korthikanti et al. 2022, Megatron's definition).
* ``apply_dp``: data parallelism: zero=0 DDP, zero=1 DDP + a ZeRO-1 sharded optimizer, zero=2 FSDP2
  ``fully_shard(reshard_after_forward=False)``, zero=3 FSDP2 ``fully_shard``. torch's DDP takes neither
  DTensor parameters nor several forwards before one backward (pipeline schedules), so with tp > 1 or
  pp > 1 and zero <= 1 the gradients are all-reduced over the data-parallel group after the backward
  instead (flattened per dtype, as Megatron-Core's own DDP does with its buffers).
* ``pipeline_split`` / ``build_schedule``: ``torch.distributed.pipelining`` stages cut by the one layer layout
  (``asap.spec.layout``, the split the cost model prices) and their schedules (GPipe, 1F1B, interleaved 1F1B
  with vpp stages per rank, interleaved zero-bubble).
* ``finalize_grads``: what the wrappers above leave to do after a backward: reduce tensor-parallel partial
  gradients, the manual data-parallel all-reduce, and the expert gradients over the expert-data-parallel
  group (experts are never wrapped by DDP/FSDP: their replicas live on the edp group, not on dp).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.nn as nn

from asap.errors import AsapError
from asap.spec.knobs import Recompute, RecomputePolicy, Schedule
from asap.spec.layout import layout
from asap.spec.placement import Placement
from asap.runners.torch.model import MoE, Transformer, TransformerBlock, cross_entropy


# ------------------------------------------------------------------------------------------------------------
# Parallel dims and meshes
# ------------------------------------------------------------------------------------------------------------


@dataclass
class ParallelDims:
    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    sp: bool = False
    zero: int = 1
    dispatcher: str = "alltoall"
    devices_per_node: int | None = None  # processes per "node" (hierarchical expert dispatch); None: one node
    world_mesh: Any = field(default=None, repr=False)
    expert_mesh: Any = field(default=None, repr=False)
    ep_node_mesh: Any = field(default=None, repr=False)  # (pp, edp, ep_inter, ep_intra, etp), dedup only

    @property
    def placement(self) -> Placement:
        return Placement.of(self)

    @property
    def world_size(self) -> int:
        return self.placement.world_size

    @property
    def edp(self) -> int:
        return self.placement.edp

    @classmethod
    def from_strategy(cls, s, devices_per_node: int | None = None) -> "ParallelDims":
        return cls(dp=s.dp, tp=s.tp, pp=s.pp, cp=s.cp, ep=s.ep, etp=s.etp, sp=bool(s.sp), zero=s.zero,
                   dispatcher=s.dispatcher, devices_per_node=devices_per_node)

    @property
    def ep_per_node(self) -> int:
        """Expert-parallel ranks of one group on one node (``ep_node_layout``)."""
        return ep_node_layout(self.pp, self.edp, self.ep, self.etp, self.devices_per_node or self.world_size)

    @property
    def hierarchical_ep(self) -> bool:
        """dispatcher=dedup over an expert group that spans nodes: the two-level exchange."""
        return self.dispatcher == "dedup" and self.ep > 1 and self.ep_per_node < self.ep

    def build_meshes(self, device_type: str) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        dense, expert = self.placement.dense_mesh(), self.placement.expert_mesh()
        self.world_mesh = init_device_mesh(device_type, tuple(dense.values()), mesh_dim_names=tuple(dense))
        if self.cp > 1:
            self.world_mesh["dp", "cp"]._flatten("dp_cp")
        self.expert_mesh = init_device_mesh(device_type, tuple(expert.values()), mesh_dim_names=tuple(expert))
        if self.hierarchical_ep:  # ep split into nodes x ranks per node: rail groups and node groups
            m = self.ep_per_node
            self.ep_node_mesh = init_device_mesh(device_type, (self.pp, self.edp, self.ep // m, m, self.etp),
                                                 mesh_dim_names=("pp", "edp", "ep_inter", "ep_intra", "etp"))

    # sub-meshes
    @property
    def tp_mesh(self):
        return self.world_mesh["tp"]

    @property
    def pp_mesh(self):
        return self.world_mesh["pp"]

    @property
    def cp_mesh(self):
        return self.world_mesh["cp"]

    @property
    def dp_mesh(self):
        """The mesh gradients of dense parameters are averaged over: dp, or dp x cp flattened."""
        return self.world_mesh["dp_cp"] if self.cp > 1 else self.world_mesh["dp"]

    @property
    def dp_size(self) -> int:
        return self.dp * self.cp

    def rank_in(self, name: str) -> int:
        mesh = self.expert_mesh if name in ("edp", "ep", "etp") else self.world_mesh
        return mesh.get_local_rank(name)


def ep_node_layout(pp: int, edp: int, ep: int, etp: int, devices_per_node: int) -> int:
    """Ranks per node m of every expert-parallel group, whose members must fill nodes in order: member i
    on the group's node i // m. Expert grid (pp, edp, ep, etp) in row-major rank order, so member i of group
    (p, e, t) is global rank ((p edp + e) ep + i) etp + t, on node rank // devices_per_node. AsapError
    (``devices-per-node``) when the groups do not split that way."""
    if devices_per_node < 1:
        raise AsapError("devices-per-node", f"must be >= 1, got {devices_per_node}")
    counts = set()
    for p in range(pp):
        for e in range(edp):
            for t in range(etp):
                nodes = [(((p * edp + e) * ep + i) * etp + t) // devices_per_node for i in range(ep)]
                m = nodes.count(nodes[0])
                if ep % m or nodes != [nodes[0] + i // m for i in range(ep)]:
                    raise AsapError("devices-per-node", f"{devices_per_node} processes per node split the "
                                                        f"expert-parallel group {nodes} unevenly over nodes")
                counts.add(m)
    if len(counts) > 1:
        raise AsapError("devices-per-node", f"expert-parallel groups hold {sorted(counts)} ranks per node; "
                                            "hierarchical dispatch needs the same count on every node")
    return counts.pop()


# ------------------------------------------------------------------------------------------------------------
# Tensor and sequence parallelism
# ------------------------------------------------------------------------------------------------------------


def _blocks(model: Transformer) -> list[TransformerBlock]:
    """The model's transformer blocks, before ``apply_ac`` wraps them (full recomputation)."""
    return cast("list[TransformerBlock]", list(model.layers.values()))


def apply_tp(model: Transformer, tp_mesh, sequence_parallel: bool) -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_module
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    sp = sequence_parallel
    seq = Shard(1) if sp else Replicate()
    top: dict[str, Any] = {}
    if model.tok_embeddings is not None:
        top["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=seq)
    if model.norm is not None and sp:
        top["norm"] = SequenceParallel()
    if model.output is not None:
        top["output"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate(), use_local_output=True)
    if top:
        parallelize_module(model, tp_mesh, top)

    for block in _blocks(model):
        plan: dict[str, Any] = {
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=seq),
        }
        if sp:
            plan["attention_norm"] = SequenceParallel()
            plan["attention"] = PrepareModuleInput(input_layouts=(Shard(1), None),
                                                   desired_input_layouts=(Replicate(), None))
            plan["ffn_norm"] = SequenceParallel()
        if block.feed_forward is not None:
            plan["feed_forward.w1"] = ColwiseParallel()
            plan["feed_forward.w2"] = RowwiseParallel(output_layouts=seq)
            if block.feed_forward.w3 is not None:
                plan["feed_forward.w3"] = ColwiseParallel()
            if sp:
                plan["feed_forward"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        else:
            moe = cast(MoE, block.moe)  # no feed_forward: a MoE layer, not yet wrapped (apply_ac runs after)
            if sp:
                plan["moe"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Shard(1),),
                                                 use_local_output=True)
            moe.tp_mesh = tp_mesh
            moe.sequence_parallel = sp
            # router and shared experts run replicated on each rank's own tokens (DTensor: their weight
            # gradients come out Partial and are summed over tp)
            distribute_module(moe.router, tp_mesh)
            if moe.shared_experts is not None:
                distribute_module(moe.shared_experts, tp_mesh)
        parallelize_module(block, tp_mesh, plan)


# ------------------------------------------------------------------------------------------------------------
# Expert parallelism
# ------------------------------------------------------------------------------------------------------------


def apply_ep(model: Transformer, dims: ParallelDims) -> None:
    """Keep this rank's share of each MoE layer's experts -- num_experts/ep of them, and of each its
    1/etp slice of the hidden dimension -- and hand the layer its expert-parallel groups."""
    for moe in model.moe_layers():
        ex = moe.experts
        if dims.ep > 1 or dims.etp > 1:
            n_local = moe.n_experts // dims.ep
            first = dims.rank_in("ep") * n_local
            f = ex.w1.shape[2] // dims.etp
            f0 = dims.rank_in("etp") * f
            with torch.no_grad():
                for name in ("w1", "w2", "w3"):
                    p = getattr(ex, name)
                    if p is None:
                        continue
                    p = p[first:first + n_local]
                    p = p[:, f0:f0 + f, :] if name == "w2" else p[:, :, f0:f0 + f]
                    setattr(ex, name, nn.Parameter(p.clone()))
            ex.first_expert = first
        if dims.ep > 1:
            moe.ep_group = dims.expert_mesh["ep"].get_group()
            _set_ep_nodes(moe, dims)
        if dims.etp > 1:
            moe.etp_group = dims.expert_mesh["etp"].get_group()
        moe.ep_size, moe.etp_size = dims.ep, dims.etp


def _set_ep_nodes(moe: MoE, dims: ParallelDims) -> None:
    """The node of every ep rank (for counting what crosses nodes) and, under dedup across nodes, the two
    levels of groups: the rail group (same index on each node) and the node group (this node's ep ranks)."""
    if dims.devices_per_node is None:
        return
    moe.ep_node_of = [g // dims.devices_per_node for g in dims.expert_mesh["ep"].mesh.tolist()]
    if dims.hierarchical_ep:
        moe.dispatcher, moe.ep_per_node = "dedup", dims.ep_per_node
        moe.rail_group = dims.ep_node_mesh["ep_inter"].get_group()
        moe.node_group = dims.ep_node_mesh["ep_intra"].get_group()


def expert_params(module: nn.Module) -> list[nn.Parameter]:
    from asap.runners.torch.model import GroupedExperts

    return [p for m in module.modules() if isinstance(m, GroupedExperts) for p in m.parameters()]


# ------------------------------------------------------------------------------------------------------------
# Activation checkpointing
# ------------------------------------------------------------------------------------------------------------


# the recompute modules the reference trainer builds (Megatron-Core's names, asap.spec.knobs.RecomputeModule)
TRAINER_RECOMPUTE_MODULES = ("core_attn", "layernorm", "mlp", "moe")


def apply_ac(model: Transformer, policy: RecomputePolicy) -> None:
    """none; selective (the attention kernel, Korthikanti et al. 2022); full (every block); or a set of modules,
    each submodule wrapped in a checkpoint of its own."""
    if policy.kind == Recompute.NONE:
        return
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if policy.kind == Recompute.FULL:
        for name, block in list(model.layers.items()):
            model.layers[name] = checkpoint_wrapper(block, preserve_rng_state=False)
        return
    modules = {"core_attn"} if policy.kind == Recompute.SELECTIVE else set(policy.module_labels)
    for block in _blocks(model):
        block.attention.recompute_core = "core_attn" in modules
        if "layernorm" in modules:
            block.attention_norm = checkpoint_wrapper(block.attention_norm, preserve_rng_state=False)
            block.ffn_norm = checkpoint_wrapper(block.ffn_norm, preserve_rng_state=False)
        if "mlp" in modules and block.feed_forward is not None:
            block.feed_forward = checkpoint_wrapper(block.feed_forward, preserve_rng_state=False)
        if "moe" in modules and block.moe is not None:
            block.moe = checkpoint_wrapper(block.moe, preserve_rng_state=False)


# ------------------------------------------------------------------------------------------------------------
# Data parallelism (DDP, ZeRO-1, FSDP2)
# ------------------------------------------------------------------------------------------------------------


def apply_fsdp(model: Transformer, dp_mesh, reshard_after_forward: bool, param_dtype: torch.dtype | None) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else MixedPrecisionPolicy()
    experts = set(expert_params(model))
    kw: dict[str, Any] = dict(mesh=dp_mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    if experts:
        if "ignored_params" not in inspect.signature(fully_shard).parameters:
            raise RuntimeError("this torch's fully_shard has no ignored_params: MoE with zero>=2 needs torch >= 2.7")
    for block in model.layers.values():
        ign = set(expert_params(block))
        own: dict[str, Any] = {"ignored_params": ign} if ign else {}
        fully_shard(block, **kw, **own)
    top: dict[str, Any] = {"ignored_params": experts} if experts else {}
    fully_shard(model, **kw, **top)


def apply_ddp(model: nn.Module, dp_mesh, device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel as DDP

    experts = {id(p) for p in expert_params(model)}
    ignore = [n for n, p in model.named_parameters() if id(p) in experts]
    if ignore:
        DDP._set_params_and_buffers_to_ignore_for_model(model, ignore)
    kw: dict[str, Any] = dict(process_group=dp_mesh.get_group(), broadcast_buffers=False, bucket_cap_mb=100)
    if device.type == "cuda":
        kw["device_ids"] = [device.index]
    return DDP(model, **kw)


def has_dtensor_params(module: nn.Module) -> bool:
    """Whether any parameter is a DTensor; without importing DTensor's module where nothing has (a DTensor is made
    through it: tensor or sequence parallelism, FSDP2), a second of a worker's start on a data-parallel run."""
    import sys

    if "torch.distributed.tensor" not in sys.modules:
        return False
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


def apply_dp(model: Transformer, dims: ParallelDims, device: torch.device, param_dtype: torch.dtype | None):
    """Wrap one model part for data parallelism; returns (module to call, whether grads need a manual
    data-parallel all-reduce after the backward)."""
    if dims.zero >= 2:
        apply_fsdp(model, dims.dp_mesh, reshard_after_forward=dims.zero == 3, param_dtype=param_dtype)
        return model, False
    if dims.dp_size == 1:
        return model, False
    if dims.pp > 1 or has_dtensor_params(model):
        # torch's DDP reducer takes neither DTensor parameters nor several forwards before a backward (the
        # GPipe and interleaved schedules): all-reduce the gradients after the backward instead
        return model, True
    return apply_ddp(model, dims.dp_mesh, device), False


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t._local_tensor if isinstance(t, DTensor) else t


class ShardedOptimizer(torch.optim.Optimizer):
    """ZeRO-1 for parameters that torch's ZeroRedundancyOptimizer cannot broadcast (DTensors): each rank of
    ``group`` owns the optimizer state of a size-balanced share of the parameters, steps it, and broadcasts
    the updated values (their local shards) to the other ranks."""

    def __init__(self, params, group, optimizer_class=torch.optim.AdamW, **defaults):
        params = list(params)
        self.group = group
        self.world = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        loads = [0] * self.world
        self.owner: list[int] = []
        for p in params:  # greedy: largest first would reorder; keep order, least-loaded rank
            r = loads.index(min(loads))
            self.owner.append(r)
            loads[r] += p.numel()
        self.all_params = params
        mine = [p for p, r in zip(params, self.owner, strict=True) if r == self.rank]
        self.local = optimizer_class(mine or [torch.nn.Parameter(torch.zeros(0))], **defaults)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        self.local.step()
        for p, r in zip(self.all_params, self.owner, strict=True):
            dist.broadcast(_local(p.data), src=dist.get_global_rank(self.group, r), group=self.group)

    def zero_grad(self, set_to_none: bool = True):
        for p in self.all_params:
            p.grad = None


class _Optimizers:
    """Several optimizers stepped as one (dense parameters and expert parameters shard over different groups)."""

    def __init__(self, opts):
        self.opts = [o for o in opts if o is not None]

    def step(self):
        for o in self.opts:
            o.step()

    def zero_grad(self):
        for o in self.opts:
            o.zero_grad(set_to_none=True)


def build_optimizer(parts: list[nn.Module], dims: ParallelDims, lr: float, weight_decay: float = 0.1) -> _Optimizers:
    """AdamW; with zero=1 its state is sharded over the data-parallel group (dense parameters) and over the
    expert-data-parallel group (routed experts, whose replicas live there)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.distributed.tensor import DTensor

    kw: dict[str, Any] = dict(lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    experts = {id(p) for m in parts for p in expert_params(m)}
    dense = [p for m in parts for p in m.parameters() if id(p) not in experts]
    moe = [p for m in parts for p in m.parameters() if id(p) in experts]

    def one(params, mesh_dim: str, size: int):
        if not params:
            return None
        if dims.zero != 1 or size == 1:
            return torch.optim.AdamW(params, **kw)
        group = (dims.dp_mesh if mesh_dim == "dp" else dims.expert_mesh["edp"]).get_group()
        if any(isinstance(p, DTensor) for p in params):  # torch's ZeRO cannot broadcast DTensors
            return ShardedOptimizer(params, group, **kw)
        return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, process_group=group, **kw)

    return _Optimizers([one(dense, "dp", dims.dp_size), one(moe, "edp", dims.edp)])


# ------------------------------------------------------------------------------------------------------------
# After the backward
# ------------------------------------------------------------------------------------------------------------


def _all_reduce_flat(grads: list[torch.Tensor], group, op, scale: float | None) -> None:
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)
    for gs in by_dtype.values():
        flat = _flatten_dense_tensors(gs)
        dist.all_reduce(flat, op=op, group=group)
        if scale is not None:
            flat.mul_(scale)
        for g, f in zip(gs, _unflatten_dense_tensors(flat, gs), strict=True):
            g.copy_(f)


@torch.no_grad()
def finalize_grads(parts: list[nn.Module], dims: ParallelDims, manual_dp: bool) -> None:
    from torch.distributed.tensor import DTensor

    experts = {id(p) for m in parts for p in expert_params(m)}
    dense_local: list[torch.Tensor] = []
    for m in parts:
        for p in m.parameters():
            if id(p) in experts or p.grad is None:
                continue
            if isinstance(p, DTensor) and isinstance(p.grad, DTensor) and p.grad.placements != p.placements:
                p.grad = p.grad.redistribute(placements=p.placements)  # tp partial sums
            dense_local.append(_local(p.grad))
    if manual_dp and dims.dp_size > 1 and dense_local:
        _all_reduce_flat(dense_local, dims.dp_mesh.get_group(), dist.ReduceOp.SUM, 1.0 / dims.dp_size)
    # experts: each token's gradient reached exactly one replica; sum the replicas, average over the
    # dp x cp copies of the loss
    eparams = [p for m in parts for p in expert_params(m)]
    if eparams:
        grads: list[torch.Tensor] = []
        for p in eparams:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
        group = dims.expert_mesh["edp"].get_group() if dims.edp > 1 else None
        if group is not None:
            _all_reduce_flat(grads, group, dist.ReduceOp.SUM, 1.0 / dims.dp_size)
        elif dims.dp_size > 1:
            for g in grads:
                g.mul_(1.0 / dims.dp_size)


# ------------------------------------------------------------------------------------------------------------
# Pipeline parallelism
# ------------------------------------------------------------------------------------------------------------


def stage_ids(pp_rank: int, pp: int, vpp: int) -> list[int]:
    """Loop-style placement: rank r holds stages r, r+pp, r+2pp, ... (what the interleaved schedules expect)."""
    return [pp_rank + v * pp for v in range(vpp)]


def pipeline_split(model: Transformer, spec, pp_rank: int, pp: int, vpp: int,
                   layer_split: tuple[int, ...] = ()) -> list[tuple[int, Transformer]]:
    """This pp rank's chunks (chunk id, model part), cut by ``asap.spec.layout`` -- the layout the cost model
    prices: chunk j runs on rank j % pp, holds the transformer layers ``chunk_ranges()[j]``, chunk 0 the
    embedding and the last chunk the final norm and the head. An end chunk may hold no layer."""
    lay = layout(spec, pp, vpp, layer_split)
    if sum(lay.chunk_layers) != model.args.n_layers:
        raise AsapError("model.num_layers", f"the layout places {sum(lay.chunk_layers)} layers but the model "
                                            f"has {model.args.n_layers}")
    ranges = lay.chunk_ranges()
    parts = []
    for sid in stage_ids(pp_rank, pp, vpp):
        keep = {str(i) for i in ranges[sid]}
        drop = [m for name, m in model.layers.items() if name not in keep]
        drop += [model.tok_embeddings] if sid != 0 else []
        drop += [model.norm, model.output] if sid != lay.chunks - 1 else []
        part = copy.deepcopy(model, {id(m): None for m in drop})  # copy only what the chunk keeps
        for name in [n for n, m in part.layers.items() if m is None]:
            del part.layers[name]
        parts.append((sid, part))
    return parts


def chunk_layer_ids(parts: list[tuple[int, Transformer]]) -> dict[int, list[int]]:
    """The transformer-layer indices each chunk was built with (what a worker reports back)."""
    return {sid: [int(k) for k in part.layers.keys()] for sid, part in parts}


def build_schedule(stages: list, schedule: Schedule, n_microbatches: int):
    from torch.distributed import pipelining as P

    def loss_fn(pred, target):
        return cross_entropy(pred, target)

    if schedule == Schedule.GPIPE:
        return P.ScheduleGPipe(stages[0], n_microbatches, loss_fn=loss_fn)
    if schedule == Schedule.ONE_F_ONE_B:
        return P.Schedule1F1B(stages[0], n_microbatches, loss_fn=loss_fn)
    if schedule == Schedule.INTERLEAVED:
        return P.ScheduleInterleaved1F1B(stages, n_microbatches, loss_fn=loss_fn)
    if schedule == Schedule.ZB:
        return P.ScheduleInterleavedZeroBubble(stages, n_microbatches, loss_fn=loss_fn)
    raise ValueError(f"unknown schedule {schedule}")
