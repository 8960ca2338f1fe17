"""How much of the data-parallel traffic can hide behind compute: the window it has, and what it cannot hide.

Two physical limits on the overlap ``estimate.data_parallel_terms`` prices, whatever the number of micro-batches
(they matter most with one micro-batch per step, where the whole step's reduction and gathers meet one
forward and one backward):

1. **Shared links.** The data-parallel collectives run over the tier their group's bottleneck sits on (the
   scale-out NIC when the group leaves its scale-up domain and the NICs of its members there are slower than
   the fabric, else the scale-up fabric). Where the tensor-parallel or context-parallel traffic of the layers
   crosses the same tier (a single NVLink node or an NVL72 rack holding tp and dp together; cp and dp both
   across nodes), the seconds that traffic hides behind compute are seconds the link is busy: the
   data-parallel traffic can hide only behind the rest,
       window = compute of the pass - hidden TP/CP traffic of the pass on the shared tier,
   the in-layer traffic split between forward and backward as the compute is. On an ICI torus the mesh axes
   sit on their own torus dimensions (MaxText's ``ici_*_parallelism`` over the slice shape), so TP and DP
   inside a slice do not share links. The groups (size and stride) are ``asap.spec.placement``'s.
2. **The step boundary.** Gradients are reduced bucket by bucket as the backward produces them and weights
   gathered bucket by bucket as the forward needs them (Megatron-Core ``--overlap-grad-reduce`` /
   ``--overlap-param-gather``; PyTorch DDP buckets; FSDP units), and the optimizer steps only once every
   gradient is reduced, the next forward only once its first bucket is gathered: reduce-scatter -> optimizer
   -> all-gather serialize at the step boundary. With n equal buckets over a window W, the first bucket is
   ready only after W/n, and the last one's collective starts only when the window ends, so of C seconds of
   traffic
       exposed = max(C - W (1 - 1/n), C / n)
   (the bucket pipeline's finish time, max over buckets of ready time + the collectives still queued). The
   bucket size is the stack's (``asap.spec.framework.Framework.dp_bucket_elements``): Megatron-Core's default
   ``bucket_size = max(4e7, 1e6 x dp_cp)`` parameters (``DistributedDataParallelConfig``), DeepSpeed's
   ``reduce_bucket_size`` 5e8, torchtitan's DDP ``bucket_cap_mb=100`` and FSDP2 units of one block, XLA's one
   scanned layer, MindSpore's 64 MB ``comm_fusion`` threshold.
"""

from __future__ import annotations

import numpy as np

from asap.cost.batch import StrategyBatch
from asap.spec.hardware import Cluster
from asap.spec.placement import Placement


def dp_on_scale_out(cluster: Cluster, S: StrategyBatch) -> np.ndarray:
    """Whether the dense data-parallel group (dp x cp ranks, tp apart; under hybrid sharding the ZeRO shard
    group that carries the bulk of the traffic, dp/dp_replicate x cp) is paced by the scale-out NICs: it leaves
    its scale-up domain and its k members there reach less over k NICs than over the fabric
    (``asap.cost.collectives``: bus bandwidth min(intra, k inter))."""
    topo = cluster.topology
    d, stride = Placement.of(S).group("dp_shard")
    k = topo.members_per_domain(d, stride)
    intra = topo.scale_up.gbps * topo.torus_axes_covered(d, stride)
    return (k < d) & (k * topo.scale_out.gbps < intra)


def _shares_tier(cluster: Cluster, dp_out: np.ndarray, group, stride) -> np.ndarray:
    """Whether a group of ``group`` ranks ``stride`` apart crosses the data-parallel group's bottleneck tier."""
    out = cluster.topology.spans_domains(group, stride)
    same = out == dp_out
    if cluster.topology.is_torus:
        same = same & out  # inside a slice each mesh axis has its own torus links
    return same & (np.asarray(group) > 1)


def dp_link_busy_s(cluster: Cluster, S: StrategyBatch, tp_s, cp_total_s, cp_exposed_s,
                   tp_overlap: float | None = None) -> np.ndarray:
    """Seconds per micro-batch that hidden TP and CP traffic keeps the data-parallel group's bottleneck tier
    busy while compute runs (``tp_s``: the critical device's TP traffic per micro-batch, of which the family's
    ``tp_overlap`` hides; ``cp_total_s - cp_exposed_s``: its hidden ring traffic); 0 where they use other
    links. ``tp_overlap``: the share the stack hides (``Framework.tp_overlap_share``; None: the family's)."""
    fam = cluster.accelerator.family_constants
    place = Placement.of(S)
    dp_out = dp_on_scale_out(cluster, S)
    tp_hidden = np.asarray(tp_s) * (fam.tp_overlap if tp_overlap is None else tp_overlap)
    cp_hidden = np.maximum(0.0, np.asarray(cp_total_s) - np.asarray(cp_exposed_s))
    return (np.where(_shares_tier(cluster, dp_out, *place.group("tp")), tp_hidden, 0.0)
            + np.where(_shares_tier(cluster, dp_out, *place.group("cp")), cp_hidden, 0.0))


def dp_buckets(bucket_elements, stage_params, layers_on_stage) -> np.ndarray:
    """Buckets the stage's gradients (and gathered weights) travel in: the stack's bucket size in elements, or
    one layer (an FSDP unit, a scanned layer) where it is 0; at least one."""
    params = np.maximum(np.asarray(stage_params, dtype=float), 1.0)
    per_layer = params / np.maximum(np.asarray(layers_on_stage, dtype=float), 1.0)
    bucket = np.where(np.asarray(bucket_elements) > 0, bucket_elements, per_layer)
    return np.maximum(np.ceil(params / np.maximum(bucket, 1.0)), 1.0)


def bucketed_exposed_s(comm_s, window_s, buckets) -> np.ndarray:
    """Exposed seconds of ``comm_s`` of bucketed traffic behind a window of ``window_s`` of compute: max(C -
    W (1 - 1/n), C/n) (module docstring); 0 without traffic."""
    comm = np.asarray(comm_s, dtype=float)
    n = np.maximum(np.asarray(buckets, dtype=float), 1.0)
    window = np.maximum(np.asarray(window_s, dtype=float), 0.0)
    return np.where(comm > 0, np.maximum(comm - window * (1.0 - 1.0 / n), comm / n), 0.0)
