"""Collectives as latency + size / bandwidth over the topology tier they cross.

The tiers come from the cluster's topology (``Cluster.topology``, asap.spec.topology): a scale-up domain of D
devices (an NVLink/NVSwitch domain, an HCCS server or supernode, a TPU ICI slice) and the scale-out network
behind it (IB/RoCE NIC per device, TPU DCN). Bandwidth of a group (Megatron rank order, tp innermost: tp, cp,
dp/ep, pp outermost; ``spec.placement``) of size g whose members sit ``stride`` ranks apart, with k members per
domain (D / stride when the groups tile the domains evenly, and in general the fewest members any such group has in
a domain it touches: a tp = 3 group on 8-GPU nodes straddles a boundary with one member on one side):
- k = g: the group lives inside one scale-up domain: intra bandwidth;
- k < g: it spans domains. NCCL splits a ring over the k NICs of the members in a domain, so the bus bandwidth
  is min(intra, k * inter) (each device's own NIC carries 1/k of the domain's share; Jeaugey, NCCL GTC 2019).
TPU ICI: a ring along one torus axis uses both directions (the catalog figure); a group covering several
axes runs one ring per axis at once, so intra = per-axis bandwidth * axes covered (JAX scaling book,
"All-reduce on a torus"); the axes a group covers are its members' varying torus coordinates.

Times (Thakur, Rabenseifner, Gropp 2005; NCCL's busbw convention), for a buffer of S bytes per device:
  all-reduce      2 (g-1)/g * S / busbw      reduce-scatter / all-gather   (g-1)/g * S / busbw
  all-to-all      S (g-k)/g / inter  against  S (k-1)/g / intra, whichever is slower (they run concurrently)
  point-to-point  S / bw
each plus a launch latency (``Topology.launch_latency_s``) and the hops of its algorithm (the tier's
``hop_latency_s``): g-1 for ring all-gather / reduce-scatter, 2 log2 g for tree all-reduce and for all-to-all
(whose g-1 point-to-point messages are posted at once, not passed along a ring).
All functions broadcast over numpy arrays.
"""

from __future__ import annotations

import math

import numpy as np

from asap.spec.hardware import Cluster


def members_per_domain(cluster: Cluster, group, stride):
    """Members per scale-up domain of a ``group`` of ranks ``stride`` apart: the fewest any such group has in
    one domain it touches (asap.spec.topology.Topology.members_per_domain)."""
    return cluster.topology.members_per_domain(group, stride)


def spans_domains(cluster: Cluster, group, stride):
    """Whether some group of this shape has members in more than one scale-up domain."""
    return cluster.topology.spans_domains(group, stride)




def _link(cluster: Cluster, group, stride, nics_per_domain=None):
    """(members per domain k, whether the group spans domains, bus bandwidth in bytes/s) of a group: asked of
    the topology once per collective. ``nics_per_domain``: how many of its k members' NICs the collective's
    ring reaches in a domain (None: all k, NCCL's usual split; 1: a collective that crosses each domain on
    one channel, such as DeepSpeed's per-parameter ZeRO-3 gathers, ``asap.cost.estimate``)."""
    topo = cluster.topology
    eff = cluster.accelerator.family_constants.net_efficiency
    k = topo.members_per_domain(group, stride)
    intra = topo.scale_up.gbps * 1e9 * topo.torus_axes_covered(group, stride)
    inter = topo.scale_out.gbps * 1e9
    spans = k < np.asarray(group)
    nics = k if nics_per_domain is None else np.minimum(k, nics_per_domain)
    return k, spans, eff * np.where(spans, np.minimum(intra, nics * inter), intra)


def bus_bandwidth_Bps(cluster: Cluster, group, stride):
    """Effective bus bandwidth in bytes/s of a collective over ``group`` ranks spaced ``stride`` apart."""
    return _link(cluster, group, stride)[2]


def collective_latency_s(cluster: Cluster, group, stride=1):
    """Latency of one ring collective (all-gather or reduce-scatter) over ``group`` ranks ``stride`` apart."""
    g = np.maximum(group, 1)
    return np.where(g > 1, _latency_s(cluster, g, spans_domains(cluster, g, stride)), 0.0)


def _latency_s(cluster: Cluster, group, spans, ring: bool = True):
    """Launch plus the algorithm's hops, each at the hop latency of the tier the group crosses."""
    topo = cluster.topology
    g = np.maximum(group, 1)
    hops = (g - 1) if ring else 2 * np.log2(g)
    hop_s = np.where(spans, topo.scale_out.hop_latency_s, topo.scale_up.hop_latency_s)
    return topo.launch_latency_s + hops * hop_s


# Small messages do not reach the bus bandwidth: a ring step moves one rank's chunk, and a chunk of this many
# bytes runs at half the peak (nccl-tests all-gather / reduce-scatter curves on DGX H100 and A100 reach half
# their bus bandwidth around 64-256 KiB per rank and saturate in the MiB range); the achieved bandwidth is
# busbw * chunk / (chunk + HALF_BANDWIDTH_CHUNK_BYTES). Per-parameter ZeRO-3 gathers over thousands of
# ranks are where this dominates.
HALF_BANDWIDTH_CHUNK_BYTES = 128 * 1024


def message_efficiency(chunk_bytes):
    """The share of the bus bandwidth a collective moving ``chunk_bytes`` per rank and step reaches."""
    chunk = np.maximum(np.asarray(chunk_bytes, dtype=float), 1.0)
    return chunk / (chunk + HALF_BANDWIDTH_CHUNK_BYTES)


def measured_line(cluster: Cluster, op: str, group):
    """(latency s, bus bandwidth B/s) per group from a calibrated cluster's own measurements of ``op``
    (``measured.collectives``: one line per group size, every rank of the machine in a group of that size at
    once), interpolated in log2(group) between the sizes measured and held at the ends; None for a cluster
    without them. What one machine measured is what its collectives cost, whatever the formula would say."""
    m = cluster.measured
    lines = [c for c in (m or {}).get("collectives", ()) if c.get("op") == op and c.get("busbw_gbps")]
    if not lines:
        return None
    lines.sort(key=lambda c: c["group"])
    x = np.log2([float(c["group"]) for c in lines])
    lg = np.log2(np.maximum(np.asarray(group, dtype=float), 2.0))
    lat = np.interp(lg, x, [float(c["latency_s"]) for c in lines])
    bw = np.interp(lg, x, [float(c["busbw_gbps"]) * 1e9 for c in lines])
    return lat, bw


def all_reduce_s(cluster: Cluster, size_bytes, group, stride, chunked: bool = True):
    """Tree latency plus 2 (g-1)/g of ``size_bytes`` at the bus bandwidth (a calibrated machine's all-reduce line
    where it has one); ``chunked``: the bandwidth its per-rank chunk reaches (``message_efficiency``), False for
    the small all-reduces ``small_all_reduce_s`` prices."""
    g = np.maximum(group, 1)
    line = measured_line(cluster, "all_reduce", g)
    if line is not None:
        t = line[0] + 2.0 * (g - 1) / g * size_bytes / line[1]
        return np.where(g > 1, t, 0.0)
    _, spans, busbw = _link(cluster, g, stride)
    if chunked:
        busbw = busbw * message_efficiency(size_bytes / g)
    t = 2.0 * (g - 1) / g * size_bytes / busbw + _latency_s(cluster, g, spans, ring=False)
    return np.where(g > 1, t, 0.0)


def small_all_reduce_s(cluster: Cluster, size_bytes, group, stride):
    """An all-reduce of a few bytes to a few KiB (a gradient norm's scalar, a packed vector of amaxes): NCCL
    runs it on its low-latency protocols (LL/LL128, eager flags instead of the Simple protocol's chunked
    steps), so it costs the launch and the tree's 2 log2 g hops plus its bytes at the bus bandwidth, without the
    per-step chunk penalty of ``message_efficiency`` (which describes large ring transfers). A calibrated
    machine's all-reduce line where it has one."""
    return all_reduce_s(cluster, size_bytes, group, stride, chunked=False)


def all_gather_s(cluster: Cluster, size_bytes, group, stride, nics_per_domain=None):
    """``size_bytes`` is the gathered (full) buffer; reduce-scatter costs the same. ``nics_per_domain``: as
    ``_link``'s (None: the ring splits over all its members' NICs in a domain)."""
    g = np.maximum(group, 1)
    line = measured_line(cluster, "all_gather", g)
    if line is not None:
        t = line[0] + (g - 1) / g * size_bytes / line[1]
        return np.where(g > 1, t, 0.0)
    _, spans, busbw = _link(cluster, g, stride, nics_per_domain)
    busbw = busbw * message_efficiency(size_bytes / g)
    t = (g - 1) / g * size_bytes / busbw + _latency_s(cluster, g, spans)
    return np.where(g > 1, t, 0.0)


def broadcast_s(cluster: Cluster, size_bytes, group, stride):
    """One rank's ``size_bytes`` to the rest of the group: a calibrated machine's broadcast line, else as an
    all-gather of the same buffer (a pipelined broadcast moves as many bytes per link)."""
    g = np.maximum(group, 1)
    line = measured_line(cluster, "broadcast", g)
    if line is not None:
        return np.where(g > 1, line[0] + (g - 1) / g * size_bytes / line[1], 0.0)
    return all_gather_s(cluster, size_bytes, group, stride)


def reduce_scatter_s(cluster: Cluster, size_bytes, group, stride):
    """As an all-gather of the same buffer, except on a calibrated gloo machine: gloo has no reduce-scatter and
    torch runs it as an all-reduce (``ProcessGroupGloo``), so it costs what that machine's all-reduce costs."""
    m = cluster.measured
    if m is not None and m.get("backend") == "gloo" and measured_line(cluster, "all_reduce", group) is not None:
        return all_reduce_s(cluster, size_bytes, group, stride)
    return all_gather_s(cluster, size_bytes, group, stride)


def _tier_Bps(cluster: Cluster) -> tuple[float, float]:
    """(scale-up, scale-out) bytes/s per device per direction at the family's collective efficiency."""
    topo = cluster.topology
    eff = cluster.accelerator.family_constants.net_efficiency
    return topo.scale_up.gbps * 1e9 * eff, topo.scale_out.gbps * 1e9 * eff


def all_to_all_s(cluster: Cluster, size_bytes, group, stride):
    """``size_bytes`` leaves each device, spread evenly over the group (EP token dispatch or combine): the
    (g-k)/g leaving the domain on the scale-out tier, the (k-1)/g staying in it on the scale-up tier, at once."""
    g = np.maximum(group, 1)
    line = measured_line(cluster, "all_gather", g)
    if line is not None:  # a calibrated machine: its all-gather's pattern of g-1 messages per rank
        return np.where(g > 1, line[0] + (g - 1) / g * size_bytes / line[1], 0.0)
    intra, inter = _tier_Bps(cluster)
    k = members_per_domain(cluster, g, stride)
    off_domain = size_bytes * (g - k) / g / inter
    on_domain = size_bytes * (k - 1) / g / intra
    t = np.maximum(off_domain, on_domain) + _latency_s(cluster, g, k < g, ring=False)  # all peers at once
    return np.where(g > 1, t, 0.0)


def dedup_internode_bytes(token_remote_domains, token_bytes):
    """Bytes one device sends off its scale-up domain in one deduplicated dispatch (or combine): each token
    crosses once per distinct remote domain hosting one of its experts, so ``token_remote_domains`` (the sum
    over the device's tokens of those domain counts) times ``token_bytes``. ``expert_dispatch_s`` prices its
    expectation under uniform routing; a real run's counts (``asap.runners.torch``'s ``dispatch_remote_domains``)
    give the bytes it sent."""
    return token_remote_domains * token_bytes


def distinct_ranks(group, top_k: int):
    """The ranks of an expert-parallel group of ``group`` that a token's ``top_k`` experts occupy on average
    under uniform routing, experts spread evenly: group (1 - (1 - 1/group)^top_k), at most top_k."""
    g = np.maximum(np.asarray(group, dtype=float), 1.0)
    return g * (1.0 - (1.0 - 1.0 / g) ** top_k)


def round_robin_blocks(num_experts: float, top_k: int, block_experts):
    """Blocks of ``block_experts`` consecutive experts (a rank's, or a scale-up domain's, share of an expert-
    sharded mesh) that a token's ``top_k`` experts occupy on average under round-robin routing (token i to experts
    k i .. k i + k - 1 mod E: ``Framework.round_robin_balance``). Its window starts at the multiples of gcd(k, E)
    in turn and spans floor((s + k - 1) / b) - floor(s / b) + 1 blocks of b (wrapping at E, a whole number of
    blocks, changes nothing); at most the E / b blocks there are."""
    E, k = int(round(num_experts)), int(top_k)
    b = np.maximum(np.asarray(block_experts, dtype=float), 1.0)
    starts = np.arange(0, E, max(math.gcd(k, E), 1), dtype=float).reshape((-1,) + (1,) * b.ndim)
    spanned = np.floor((starts + k - 1) / b) - np.floor(starts / b) + 1
    return np.minimum(spanned.mean(axis=0), np.maximum(E / b, 1.0))


def dedup_fanout(group, members_per_domain, top_k: int, round_robin_experts: float = 0.0):
    """(ranks, remote domains) one token's copies reach under DeepEP's dedup over a group of ``group`` ranks,
    ``members_per_domain`` to a scale-up domain: uniform routing's ``distinct_ranks`` and (n - 1)(1 - (1 - 1/n)^k)
    of n domains; round-robin routing over ``round_robin_experts`` experts (> 0) the blocks its window spans
    (``round_robin_blocks``), (n - 1)/n of its domains remote."""
    domains = np.maximum(group / members_per_domain, 1.0)
    if round_robin_experts > 0:
        per_rank = round_robin_experts / group
        spanned_domains = round_robin_blocks(round_robin_experts, top_k, per_rank * members_per_domain)
        return round_robin_blocks(round_robin_experts, top_k, per_rank), spanned_domains * (domains - 1) / domains
    # DeepEP sends a token once per rank hosting one of its experts
    return distinct_ranks(group, top_k), (domains - 1) * (1 - (1 - 1 / domains) ** top_k)


def expert_dispatch_s(cluster: Cluster, tokens, top_k: int, token_bytes, group, stride,
                      round_robin_experts: float = 0.0) -> dict[str, np.ndarray]:
    """One MoE dispatch (or combine) of ``tokens`` per device, each to ``top_k`` experts spread evenly over an
    expert-parallel group of ``group`` ranks spaced ``stride`` apart, by each dispatcher
    (``asap.spec.framework.Dispatcher``):

    - alltoall: every routed copy travels on its own (Megatron-Core's alltoall dispatcher), an all-to-all of
      tokens * top_k * token_bytes;
    - allgather: every rank all-gathers the tokens of its group and keeps those routed to its experts, an
      all-gather of group * tokens * token_bytes (and a reduce-scatter of the same to combine: Megatron-Core's
      allgather dispatcher, good for small groups and large top_k);
    - dedup: a token crosses the network once per distinct remote scale-up domain that hosts one of its
      experts, then fans out over the scale-up links (the MoE training report's gather-dedup-all-to-all;
      DeepEP). With n domains in the group and uniform routing, a token's experts hit (n - 1)(1 - (1 - 1/n)^k)
      remote domains on average, against k (n - 1)/n copies for the flat exchange. The two tiers run
      concurrently. On the scale-up tier, and inside one domain, DeepEP sends a token once to every rank that
      hosts one of its experts, not once per expert (``get_dispatch_layout`` in csrc/kernels/layout.cu builds
      ``is_token_in_rank`` [tokens, ranks] and ``num_tokens_per_rank``; the receiving rank expands the copies for
      its local experts): ``distinct_ranks`` copies, g (1 - (1 - 1/g)^k) of a group of g, not k.

    ``round_robin_experts`` (E > 0): the stack's forced balance routes round-robin instead of uniformly
    (``round_robin_blocks``): a token's experts occupy r consecutive ranks of the E / g each holds and d
    consecutive domains, d (n - 1) / n of them remote, so dedup sends d (n - 1)/n copies off the domain and r
    over the scale-up links (Qwen3-30B-A3B, 128 experts top-8 on 8 ranks of 16: r = 1 against 5.25).
    """
    intra_Bps, inter_Bps = _tier_Bps(cluster)
    g = np.maximum(group, 1)
    flat = all_to_all_s(cluster, tokens * top_k * token_bytes, g, stride)
    gathered = all_gather_s(cluster, g * tokens * token_bytes, g, stride)
    k = members_per_domain(cluster, g, stride)
    domains = np.maximum(g / k, 1.0)
    ranks, remote_domains = dedup_fanout(g, k, top_k, round_robin_experts)
    inter = dedup_internode_bytes(tokens * remote_domains, token_bytes) / inter_Bps
    intra = tokens * ranks * token_bytes * (k - 1) / k / intra_Bps
    hier = np.maximum(inter, intra) + 2 * _latency_s(cluster, g, k < g, ring=False)
    dedup = np.where(domains > 1, hier, all_to_all_s(cluster, tokens * ranks * token_bytes, g, stride))
    return {name: np.where(g > 1, t, 0.0) for name, t in (("alltoall", flat), ("allgather", gathered),
                                                          ("dedup", dedup))}


def p2p_s(cluster: Cluster, size_bytes, crosses_node):
    """One message of ``size_bytes``, on the scale-out tier where ``crosses_node`` (leaves the scale-up domain)."""
    intra, inter = _tier_Bps(cluster)
    return size_bytes / np.where(crosses_node, inter, intra) + cluster.topology.launch_latency_s
