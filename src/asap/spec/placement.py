"""Where a strategy's ranks sit: one placement (as torchtitan's ``ParallelDims``) that the cost model, the torch
and JAX runners and the MaxText emitter all read.

Rank order (Megatron-Core ``order='tp-cp-ep-dp-pp'``): the dense layers' devices form the grid
``DENSE_MESH`` = (pp, dp, cp, tp), outermost first, in row-major order, so tp is innermost (stride 1), cp has
stride tp, dp stride tp*cp, pp stride tp*cp*dp. Expert layers fold a stage's tp*cp*dp devices into
``EXPERT_MESH`` = (pp, edp, ep, etp): etp stride 1, ep stride etp, edp stride etp*ep. A group along one axis is
``size`` ranks spaced ``stride`` apart (``Group``), which is what the topology asks to know which tier it
crosses (``spec.topology``); the torch runner builds its device meshes from the same grids.

Named meshes (MaxText ``configs/base.yml``, the JAX runner and TPU plans): ``NAMED_MESH`` = (pipeline, data,
fsdp, context, tensor, expert), outermost first; pp -> pipeline, dp -> data (zero 0) or fsdp (zero >= 1,
sharded states), cp -> context, tp -> tensor, ep -> expert (MaxText's expert axis doubles as a batch axis for
dense layers, so it is carved out of dp). The slowest-changing axes cross DCN: pipeline stages first, then
data/fsdp; tensor, context and expert stay within a slice (``ici_split``).

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

    @classmethod
    def of(cls, s) -> "Placement":
        """From anything with the degrees: a ``Strategy``, a batch of them, the torch runner's dims."""
        return cls(dp=s.dp, tp=s.tp, pp=s.pp, cp=s.cp, ep=s.ep, etp=s.etp, zero=s.zero)

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
        gradients' group, dp x cp flattened (contiguous in rank order, so one stride)."""
        if axis == "dp_cp":
            return Group(self.dp * self.cp, self.tp)
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
        for name in (n if n != "batch" else self.batch_axis for n in DCN_FIRST):
            take = gcd(axes[name], slices)
            dcn[name] = take
            slices //= take
        return dcn if slices == 1 else None
