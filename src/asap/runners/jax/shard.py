"""A strategy as a named JAX device mesh and the PartitionSpecs of the model's parameters and activations.

The mesh axes are the ones ``asap plan`` gives a TPU job and the MaxText emitter writes
(``asap.spec.placement.Placement.named_mesh``, MaxText's names): pipeline, data or fsdp, context (sequence),
tensor, expert. Both batch axes are always in the mesh (the one the strategy does not use has size 1) so that
every PartitionSpec can name them.

* Activations (batch, seq, hidden): batch over (data, fsdp, expert), sequence over context.
* Weights: Megatron's column/row split over ``tensor`` (q/k/v and w1/w3 split their output dimension, wo and
  w2 their input dimension; the output head its vocabulary); routed experts over ``expert``; with zero=3 the
  other dimension over ``fsdp`` (MaxText's fsdp: parameters, gradients and optimizer states sharded).
* zero=1 shards only the AdamW moments over fsdp, zero=2 the gradients too (ZeRO, Rajbhandari et al. 2020).
A dimension an axis does not divide stays whole on that axis (GSPMD would otherwise pad it).
"""

from __future__ import annotations

import numpy as np

from asap.errors import AsapError
from asap.spec.placement import NAMED_MESH, Placement
from asap.spec.strategy import Strategy, Zero

BATCH_AXES = ("data", "fsdp", "expert")


def mesh_shape(s: Strategy) -> dict[str, int]:
    """Every axis of NAMED_MESH with its size for ``s`` (1 where the strategy has none)."""
    axes = Placement.of(s).named_mesh()
    if axes is None:
        raise AsapError("strategy.ep", f"ep={s.ep} does not divide dp={s.dp}: the expert axis is carved out of dp "
                                       f"(dp counts every data-parallel device; for data={s.dp} x expert={s.ep} "
                                       f"write dp={s.dp * s.ep},ep={s.ep})")
    return axes


def make_mesh(s: Strategy):
    import jax
    from jax.sharding import Mesh

    shape = mesh_shape(s)
    n = int(np.prod(list(shape.values())))
    devices = jax.devices()
    if len(devices) < n:
        raise AsapError("strategy", f"needs {n} devices, JAX sees {len(devices)}")
    return Mesh(np.array(devices[:n]).reshape(tuple(shape.values())), NAMED_MESH)


def _layout(name: str, ndim: int) -> tuple:
    """Per dimension of a weight (PyTorch shape): 'T' tensor, 'E' expert, 'F' fsdp-able, None."""
    if ndim == 1:
        return (None,)
    if name.endswith("experts.w2"):
        return ("E", "T", "F")
    if name.endswith(("experts.w1", "experts.w3")):
        return ("E", "F", "T")
    if name.endswith(("wo.weight", "w2.weight")):
        return ("F", "T")
    if name.endswith(("router.weight", "tok_embeddings.weight")):
        return (None, "F")
    return ("T", "F")  # wq wk wv w1 w3 output: split the output dimension over tensor


def param_spec(name: str, shape: tuple[int, ...], mesh_sizes: dict[str, int], fsdp: bool):
    """The PartitionSpec of one weight; ``fsdp`` shards its 'F' dimension over the fsdp axis."""
    from jax.sharding import PartitionSpec as P

    axis_of = {"T": "tensor", "E": "expert", "F": "fsdp" if fsdp else None, None: None}
    out = []
    for dim, role in zip(shape, _layout(name, len(shape)), strict=True):
        axis = axis_of[role]
        out.append(axis if axis is not None and dim % mesh_sizes[axis] == 0 else None)
    return P(*out)


def param_specs(shapes: dict[str, tuple[int, ...]], s: Strategy, mesh_sizes: dict[str, int]) -> dict[str, dict]:
    """{"params", "grads", "opt"}: the specs of the weights, their gradients and AdamW moments under zero."""
    def specs(fsdp: bool):
        return {n: param_spec(n, sh, mesh_sizes, fsdp) for n, sh in shapes.items()}

    return {"params": specs(s.zero >= Zero.PARAMETERS), "grads": specs(s.zero >= Zero.GRADIENTS),
            "opt": specs(s.zero >= Zero.OPTIMIZER)}


def activation_spec():
    from jax.sharding import PartitionSpec as P

    return P(BATCH_AXES, "context", None)


def token_spec():
    from jax.sharding import PartitionSpec as P

    return P(BATCH_AXES, "context")
