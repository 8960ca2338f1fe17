"""TPU meshes: a strategy as MaxText's ``ici_*`` / ``dcn_*`` parallelism values.

MaxText builds its device mesh from named axes (MaxText ``configs/base.yml``: data, stage, fsdp, context,
tensor, expert, ...), ICI axes inside a slice and DCN axes across slices (a slice is the job's scale-up domain,
``Cluster.topology``: 64 v5p chips written as 16 hosts of 4 are one slice). The axes and which of them cross
DCN are the strategy's ``asap.spec.placement.Placement`` (``named_axes``, ``dcn_split``): pp -> pipeline,
dp -> data (zero 0) or fsdp (zero >= 1), cp -> context, tp -> tensor, ep -> expert (carved out of dp);
pipeline stages first, then data/fsdp, cross DCN. A strategy that would put tp, cp or ep across slices has no
mesh (``None``).
"""

from __future__ import annotations

from asap.spec.hardware import Cluster
from asap.spec.placement import Placement
from asap.spec.strategy import Strategy


def tpu_mesh(cluster: Cluster, s: Strategy) -> dict[str, int] | None:
    if cluster.accelerator.interconnect != "ici":
        return None
    place = Placement.of(s)
    axes = place.named_axes()
    dcn = place.dcn_split(cluster.topology.num_domains)
    if axes is None or dcn is None:
        return None
    mesh = {f"ici_{name}_parallelism": size // dcn[name] for name, size in axes.items()}
    mesh.update({f"dcn_{name}_parallelism": dcn[name] for name in axes})
    return mesh
