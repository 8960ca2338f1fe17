"""TPU meshes: a strategy as MaxText's ``ici_*`` / ``dcn_*`` parallelism values.

MaxText builds its device mesh from named axes (MaxText ``configs/base.yml``: data, stage, fsdp, context,
tensor, expert, ...), ICI axes inside a slice and DCN axes across slices (a slice is the job's scale-up domain,
``Cluster.topology``: 64 v5p chips written as 16 hosts of 4 are one slice). asap's knobs map as
  pp -> stage (``*_pipeline_parallelism``), dp -> data (zero 0) or fsdp (zero >= 1, sharded states),
  cp -> context, tp -> tensor, ep -> expert (MaxText's expert axis doubles as a batch axis for dense layers,
  so it is carved out of dp).
The slowest-changing axes cross DCN: pipeline stages first, then data/fsdp; tensor, context and expert stay
on ICI. A strategy that would put tp, cp or ep across slices has no mesh (``None``).
"""

from __future__ import annotations

from math import gcd

from asap.spec.hardware import Cluster
from asap.spec.strategy import Strategy, Zero


def batch_axis(s: Strategy) -> str:
    """The mesh axis dp's devices (less the expert ones) go on: fsdp when any state is sharded (zero >= 1)."""
    return "fsdp" if s.zero >= Zero.OPTIMIZER else "data"


def mesh_axes(s: Strategy) -> dict[str, int] | None:
    """The strategy as named mesh axes, outermost first: {pipeline, data|fsdp, context, tensor, expert}; their
    product is the device count. ``None`` when ep does not divide dp (the expert axis is carved out of dp).
    Shared by ``tpu_mesh`` (plans) and ``asap.runners.jax`` (real runs on JAX meshes)."""
    if s.dp % s.ep:
        return None
    return {"pipeline": s.pp, batch_axis(s): s.dp // s.ep, "context": s.cp, "tensor": s.tp, "expert": s.ep}


def tpu_mesh(cluster: Cluster, s: Strategy) -> dict[str, int] | None:
    if cluster.accelerator.interconnect != "ici":
        return None
    axes = mesh_axes(s)
    if axes is None:
        return None
    batch_axis_name = batch_axis(s)
    slices = cluster.topology.num_domains  # ICI slices of the job, joined by DCN
    dcn = {name: 1 for name in axes}
    for name in ("pipeline", batch_axis_name):  # outermost axes cross the data-centre network
        take = gcd(axes[name], slices)
        dcn[name] = take
        slices //= take
    if slices != 1:
        return None
    mesh = {}
    for name, size in axes.items():
        mesh[f"ici_{name}_parallelism"] = size // dcn[name]
    for name in axes:
        mesh[f"dcn_{name}_parallelism"] = dcn[name]
    return mesh
