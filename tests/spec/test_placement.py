"""The one placement (``asap.spec.placement``): the group strides the cost model prices are the rank groups of
the grids the torch runner builds its device meshes from, for single strategies and batches alike; the named
mesh is the one the JAX runner, TPU plans and the MaxText emitter share."""

from __future__ import annotations

import numpy as np
import pytest

from asap.spec.placement import DENSE_MESH, EXPERT_MESH, NAMED_MESH, Placement
from asap.spec.strategy import Strategy

DEGREES = [dict(dp=2, tp=2, pp=2, cp=1), dict(dp=2, tp=2, pp=2, cp=2, ep=4, etp=2),
           dict(dp=4, tp=1, pp=1, cp=2, ep=8, etp=1), dict(dp=8, tp=4, pp=3, cp=1, ep=2, etp=4)]


def _groups_along(ranks: np.ndarray, axis: int) -> np.ndarray:
    """Every group of a row-major rank grid along one axis, one row each."""
    return np.moveaxis(ranks, axis, -1).reshape(-1, ranks.shape[axis])


@pytest.mark.parametrize("degrees", DEGREES)
def test_group_strides_are_the_mesh_groups(degrees):
    place = Placement(**degrees)
    for names, mesh in ((DENSE_MESH, place.dense_mesh()), (EXPERT_MESH, place.expert_mesh())):
        assert tuple(mesh) == names
        ranks = np.arange(place.world_size).reshape(tuple(mesh.values()))
        for i, name in enumerate(names):
            size, stride = place.group(name)
            for g in _groups_along(ranks, i):
                assert list(g) == [g[0] + k * stride for k in range(size)]
    size, stride = place.group("dp_cp")  # the dense gradients: dp x cp flattened
    dense = np.arange(place.world_size).reshape(place.pp, place.dp * place.cp, place.tp)
    for g in _groups_along(dense, 1):
        assert list(g) == [g[0] + k * stride for k in range(size)]


def test_megatron_order_and_batches():
    """tp innermost, then cp, dp, pp; experts etp, ep, edp; arrays of degrees give the same figures."""
    place = Placement(dp=2, tp=2, pp=2, cp=2, ep=4, etp=2)
    assert [place.group(a).stride for a in ("tp", "cp", "dp", "pp", "etp", "ep", "edp")] == [1, 2, 4, 8, 1, 2, 8]
    assert place.edp == 1 and isinstance(place.edp, int)
    batch = Placement(**{k: np.array([d.get(k, 1) for d in DEGREES]) for k in ("dp", "tp", "pp", "cp", "ep", "etp")})
    for axis in ("tp", "cp", "dp", "pp", "dp_cp", "etp", "ep", "edp"):
        sizes, strides = (np.broadcast_to(x, (len(DEGREES),)) for x in batch.group(axis))
        assert [tuple(Placement(**d).group(axis)) for d in DEGREES] == list(zip(sizes, strides, strict=True))


def test_named_mesh():
    place = Placement.of(Strategy(dp=8, tp=2, pp=2, ep=4, zero=1))
    assert place.named_axes() == {"pipeline": 2, "fsdp": 2, "context": 1, "tensor": 2, "expert": 4}
    assert tuple(place.named_mesh()) == NAMED_MESH and place.named_mesh()["data"] == 1
    assert Placement(dp=4, ep=8).named_axes() is None  # the expert axis is carved out of dp
    assert place.dcn_split(4) == {"pipeline": 2, "fsdp": 2, "context": 1, "tensor": 1, "expert": 1}
    assert place.dcn_split(8) is None and place.slices_left(8) == 2
