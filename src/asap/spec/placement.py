"""Where a strategy's ranks sit: one placement (as torchtitan's ``ParallelDims``) that the cost model, the torch
and JAX runners and the MaxText emitter all read.

Rank order (Megatron-Core ``order='tp-cp-ep-dp-pp'``): the dense layers' devices form the grid
``DENSE_MESH`` = (pp, dp, cp, tp), outermost first, in row-major order, so tp is innermost (stride 1), cp has
stride tp, dp stride tp*cp, pp stride tp*cp*dp. Expert layers fold a stage's tp*cp*dp devices into
``EXPERT_MESH`` = (pp, edp, ep, etp): etp stride 1, ep stride etp, edp stride etp*ep. A group along one axis is
``size`` ranks spaced ``stride`` apart (``Group``), which is what the topology asks to know which tier it
crosses (``spec.topology``); the torch runner builds its device meshes from the same grids.

Hybrid sharding (``dp_replicate`` = r > 1): dp splits into (replicate r, shard dp/r), the replicate axis
outermost, as torchtitan's ``ParallelDims`` mesh (pp, dp_replicate, dp_shard, cp, tp) and Megatron-Core's
distributed-optimizer instances (``parallel_state``: each instance a run of consecutive ranks of the dp-cp
group). The shard group (``dp_shard``: dp/r x cp, stride tp) stays contiguous, so it fits a node or slice
when it can; the replicate group (``dp_replicate``: r ranks, stride dp/r cp tp) crosses them. The experts'
edp splits the same way (``edp_shard``, ``edp_replicate``).

Named meshes (MaxText ``configs/base.yml``, the JAX runner and TPU plans): ``NAMED_MESH`` = (pipeline, data,
fsdp, context, tensor, expert), outermost first; pp -> pipeline, dp -> data (zero 0) or fsdp (zero >= 1,
sharded states), cp -> context, tp -> tensor, ep -> expert (MaxText's expert axis doubles as a batch axis for
dense layers, so it is carved out of dp). The slowest-changing axes cross DCN: pipeline stages first, then
data/fsdp; tensor, context and expert stay within a slice (``ici_split``). Under hybrid sharding the batch
devices are data (r: replicas, MaxText's ``dcn_data_parallelism`` across slices) x fsdp (dp/r: the shard
group), and data takes the slices before fsdp.

The degrees may be ints (one strategy) or numpy arrays of one shape (a batch of strategies, the cost model's
vectorized rows); sizes and strides are the same products either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Any, NamedTuple

import numpy as np

from asap.spec.knobs import Zero

DENSE_MESH = ("pp", "dp", "cp", "tp")  # the dense layers' rank grid, outermost first
EXPERT_MESH = ("pp", "edp", "ep", "etp")  # the expert layers' rank grid, outermost first
NAMED_MESH = ("pipeline", "data", "fsdp", "context", "tensor", "expert")  # MaxText's axes, outermost first
DCN_FIRST = ("pipeline", "batch")  # the named axes that cross slices, in the order they take them


class Group(NamedTuple):
    """A group of ``size`` ranks spaced ``stride`` apart (int, or arrays over a batch of strategies)."""

    size: Any
    stride: Any


def _whole(x):
    """An int for one strategy, the array for a batch."""
    return int(x) if np.ndim(x) == 0 else x


@dataclass(frozen=True)
class Placement:
    """A strategy's degrees placed on ranks (see the module docstring for the order)."""

    dp: Any = 1
    tp: Any = 1
    pp: Any = 1
    cp: Any = 1
    ep: Any = 1
    etp: Any = 1
    zero: Any = 1
    dp_replicate: Any = 1

    @classmethod
    def of(cls, s) -> "Placement":
        """From anything with the degrees: a ``Strategy``, a batch of them, the torch runner's dims (no hybrid
        sharding there: ``dp_replicate`` 1)."""
        return cls(dp=s.dp, tp=s.tp, pp=s.pp, cp=s.cp, ep=s.ep, etp=s.etp, zero=s.zero,
                   dp_replicate=getattr(s, "dp_replicate", 1))

    @property
    def world_size(self):
        return self.pp * self.dp * self.cp * self.tp

    @property
    def edp(self):
        """The expert layers' data-parallel degree: a stage's tp*cp*dp devices over ep*etp."""
        return _whole(np.maximum(self.tp * self.cp * self.dp // np.maximum(self.ep * self.etp, 1), 1))

    def dense_mesh(self) -> dict[str, Any]:
        """``DENSE_MESH`` with its sizes, outermost first."""
        return {"pp": self.pp, "dp": self.dp, "cp": self.cp, "tp": self.tp}

    def expert_mesh(self) -> dict[str, Any]:
        """``EXPERT_MESH`` with its sizes, outermost first."""
        return {"pp": self.pp, "edp": self.edp, "ep": self.ep, "etp": self.etp}

    def group(self, axis: str) -> Group:
        """The group along one axis of either grid (tp, cp, dp, pp; etp, ep, edp), or ``dp_cp``: the dense
        gradients' group, dp x cp flattened (contiguous in rank order, so one stride); under hybrid sharding
        ``dp_shard`` / ``edp_shard`` (the ZeRO shard groups) and ``dp_replicate`` / ``edp_replicate`` (the
        replicas, outermost; size 1 without hybrid sharding)."""
        r = np.maximum(self.dp_replicate, 1)
        if axis == "dp_cp":
            return Group(self.dp * self.cp, self.tp)
        if axis == "dp_shard":
            return Group(_whole(self.dp // r * self.cp), self.tp)
        if axis == "dp_replicate":
            return Group(_whole(r), _whole(self.dp // r * self.cp * self.tp))
        if axis == "edp_shard":
            return Group(_whole(np.maximum(self.edp // r, 1)), self.etp * self.ep)
        if axis == "edp_replicate":
            return Group(_whole(r), _whole(np.maximum(self.edp // r, 1) * self.etp * self.ep))
        mesh = self.expert_mesh() if axis in ("edp", "ep", "etp") else self.dense_mesh()
        names = tuple(mesh)
        stride = 1
        for inner in names[names.index(axis) + 1:]:
            stride = stride * mesh[inner]
        return Group(mesh[axis], stride)

    # -- named meshes (MaxText, JAX) ---------------------------------------------------------------------------

    @property
    def batch_axis(self) -> str:
        """The named axis dp's devices (less the expert ones) go on: fsdp when any state is sharded (zero >= 1)."""
        return "fsdp" if self.zero >= Zero.OPTIMIZER else "data"

    def named_axes(self) -> dict[str, int] | None:
        """The strategy's named axes, outermost first: {pipeline, data|fsdp, context, tensor, expert}; their
        product is the device count. ``None`` when ep does not divide dp (the expert axis is carved out of dp)."""
        if self.dp % self.ep:
            return None
        r = int(self.dp_replicate)
        if r > 1 and self.zero >= Zero.OPTIMIZER and (self.dp // self.ep) % r == 0:  # hybrid: data x fsdp
            return {"pipeline": self.pp, "data": r, "fsdp": self.dp // self.ep // r, "context": self.cp,
                    "tensor": self.tp, "expert": self.ep}
        return {"pipeline": self.pp, self.batch_axis: self.dp // self.ep, "context": self.cp, "tensor": self.tp,
                "expert": self.ep}

    def named_mesh(self) -> dict[str, int] | None:
        """Every axis of ``NAMED_MESH`` with its size (1 where the strategy has none), or None as ``named_axes``."""
        axes = self.named_axes()
        return None if axes is None else {name: axes.get(name, 1) for name in NAMED_MESH}

    def slices_left(self, num_slices: int):
        """The slices the pipeline and batch axes cannot cover (1: the named mesh fits within ``num_slices``
        slices); vectorized over a batch of strategies (the legality table's rows)."""
        left = np.full(np.shape(self.pp), max(1, num_slices), dtype=np.int64)
        for axis in (self.pp, np.maximum(self.dp // np.maximum(self.ep, 1), 1)):
            left = left // np.gcd(axis, left)
        return left

    def dcn_split(self, num_slices: int) -> dict[str, int] | None:
        """How many slices each named axis spans (the rest of it stays on ICI): pipeline takes what it can, then
        the batch axis; None when the two cannot cover ``num_slices`` (tensor, context or expert would cross)."""
        axes = self.named_axes()
        if axes is None:
            return None
        slices = max(1, num_slices)
        dcn = {name: 1 for name in axes}
        order = [n if n != "batch" else self.batch_axis for n in DCN_FIRST]
        if "data" in axes and "fsdp" in axes:  # hybrid sharding: the replicas take the slices first
            order = ["pipeline", "data", "fsdp"]
        for name in order:
            take = gcd(axes[name], slices)
            dcn[name] = take
            slices //= take
        return dcn if slices == 1 else None
