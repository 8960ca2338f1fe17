"""Collectives as latency + size / bandwidth over the topology tier they cross.

Bandwidth of a group (Megatron rank order, tp innermost: tp, cp, dp/ep, pp outermost). A group of size g whose
members sit ``stride`` ranks apart has k members per node: devices_per_node / stride when the groups tile the
nodes evenly, and in general the fewest members any such group has on a node it touches (a tp = 3 group on
8-GPU nodes straddles a node boundary with one member on one side):
- k = g: the group lives inside one scale-up domain (NVLink/NVSwitch, HCCS, a TPU slice's ICI): intra bandwidth;
- k < g: it spans nodes. NCCL splits a ring over the k NICs of the members in a node, so the bus bandwidth is
  min(intra, k * inter) (each device's own NIC carries 1/k of the node's share; Jeaugey, NCCL GTC 2019).
TPU ICI: a ring along one torus axis uses both directions (the catalog figure); a group spanning several
axes runs one ring per axis at once, so its bandwidth grows with the number of axes it covers
(JAX scaling book, "All-reduce on a torus").

Times (Thakur, Rabenseifner, Gropp 2005; NCCL's busbw convention), for a buffer of S bytes per device:
  all-reduce      2 (g-1)/g * S / busbw      reduce-scatter / all-gather   (g-1)/g * S / busbw
  all-to-all      S (g-k)/g / inter  against  S (k-1)/g / intra, whichever is slower (they run concurrently)
  point-to-point  S / bw
each plus a launch latency (``collective_latency_s``) and the hops of its algorithm (``hop_latency_s``):
g-1 for ring all-gather / reduce-scatter, 2 log2 g for tree all-reduce and for all-to-all (whose g-1
point-to-point messages are posted at once, not passed along a ring).
All functions broadcast over numpy arrays.
"""

from __future__ import annotations

from functools import lru_cache
from math import gcd

import numpy as np

from asap.spec.hardware import Cluster


@lru_cache(maxsize=4096)
def _fewest_members_per_node(devices_per_node: int, group: int, stride: int) -> int:
    """The fewest members any group of this shape has on one node it touches (``group`` when every group lives
    inside one node).

    Groups are ranks ``base + i * stride`` (i < group) for every base with ``base % (group * stride) < stride``;
    the layout repeats every lcm(group * stride, devices_per_node) ranks, so one period shows every case. A
    group whose size does not tile the node (tp = 3 or tp * cp = 6 on 8-GPU nodes) straddles a node boundary
    somewhere, and all groups of a kind run in lockstep, so the straddling one sets the pace."""
    if group <= 1:
        return 1
    block = group * stride
    period = block * devices_per_node // gcd(block, devices_per_node)
    bases = np.arange(period)
    bases = bases[bases % block < stride]
    nodes = (bases[:, None] + np.arange(group)[None, :] * stride) // devices_per_node
    fewest = group
    for row in nodes:
        counts = np.unique(row, return_counts=True)[1]
        if len(counts) > 1:
            fewest = min(fewest, int(counts.min()))
    return fewest


def members_per_node(cluster: Cluster, group, stride):
    """Members per node of a ``group`` of ranks ``stride`` apart: the fewest any such group has on one node.

    Groups that tile the nodes evenly (the usual case) take the closed form; only the others are enumerated."""
    dpn = cluster.devices_per_node
    g, st = np.broadcast_arrays(np.asarray(group, dtype=np.int64), np.maximum(np.asarray(stride, dtype=np.int64), 1))
    block = g * st
    inside = dpn % block == 0  # every group within one node
    even = (block % dpn == 0) & ((dpn % st == 0) | (st % dpn == 0))  # every node holds the same share of a group
    k = np.where(inside, g, np.clip(dpn // st, 1, g))
    odd = ~(inside | even) & (g > 1)
    if odd.any():
        pairs, inverse = np.unique(np.stack([g[odd], st[odd]]), axis=1, return_inverse=True)
        fewest = np.array([_fewest_members_per_node(dpn, int(a), int(b)) for a, b in pairs.T])
        k = k.copy()
        k[odd] = fewest[np.ravel(inverse)]
    return k if k.ndim else int(k)


def spans_nodes(cluster: Cluster, group, stride):
    """Whether some group of this shape has members on more than one node."""
    return members_per_node(cluster, group, stride) < np.asarray(group)


def bus_bandwidth_Bps(cluster: Cluster, group, stride):
    """Effective bus bandwidth in bytes/s of a collective over ``group`` ranks spaced ``stride`` apart."""
    acc = cluster.accelerator
    eff = acc.family_constants.net_efficiency
    intra = acc.intra_node_gbps * 1e9
    inter = acc.inter_node_gbps * 1e9
    k = members_per_node(cluster, group, stride)
    if acc.interconnect == "ici" and acc.torus_dims:
        axis_len = max(2.0, round(cluster.devices_per_node ** (1.0 / acc.torus_dims)))
        axes = np.clip(np.ceil(np.log(np.maximum(k, 1)) / np.log(axis_len) - 1e-9), 1, acc.torus_dims)
        intra = intra * axes
    spans = k < group
    return eff * np.where(spans, np.minimum(intra, k * inter), intra)


def collective_latency_s(cluster: Cluster, group):
    """Latency of one ring collective (all-gather or reduce-scatter) over ``group`` ranks."""
    g = np.maximum(group, 1)
    return np.where(g > 1, _latency_s(cluster, g), 0.0)


def _latency_s(cluster: Cluster, group, ring: bool = True):
    fam = cluster.accelerator.family_constants
    g = np.maximum(group, 1)
    hops = (g - 1) if ring else 2 * np.log2(g)
    return fam.collective_latency_s + hops * fam.hop_latency_s


def all_reduce_s(cluster: Cluster, size_bytes, group, stride):
    g = np.maximum(group, 1)
    t = 2.0 * (g - 1) / g * size_bytes / bus_bandwidth_Bps(cluster, g, stride) + _latency_s(cluster, g, ring=False)
    return np.where(g > 1, t, 0.0)


def all_gather_s(cluster: Cluster, size_bytes, group, stride):
    """``size_bytes`` is the gathered (full) buffer; reduce-scatter costs the same."""
    g = np.maximum(group, 1)
    t = (g - 1) / g * size_bytes / bus_bandwidth_Bps(cluster, g, stride) + _latency_s(cluster, g)
    return np.where(g > 1, t, 0.0)


reduce_scatter_s = all_gather_s


def all_to_all_s(cluster: Cluster, size_bytes, group, stride):
    """``size_bytes`` leaves each device, spread evenly over the group (EP token dispatch or combine)."""
    acc = cluster.accelerator
    eff = acc.family_constants.net_efficiency
    g = np.maximum(group, 1)
    k = members_per_node(cluster, g, stride)
    off_node = size_bytes * (g - k) / g / (acc.inter_node_gbps * 1e9 * eff)
    on_node = size_bytes * (k - 1) / g / (acc.intra_node_gbps * 1e9 * eff)
    t = np.maximum(off_node, on_node) + _latency_s(cluster, g, ring=False)  # all peers at once, not a ring
    return np.where(g > 1, t, 0.0)


def expert_dispatch_s(cluster: Cluster, tokens, top_k: int, token_bytes, group, stride):
    """One MoE dispatch (or combine) of ``tokens`` per device, each to ``top_k`` experts spread evenly over an
    expert-parallel group of ``group`` ranks spaced ``stride`` apart: the cheaper of

    - flat all-to-all: every routed copy travels on its own (Megatron-Core's alltoall dispatcher);
    - hierarchical: a token crosses the network once per distinct remote node that hosts one of its experts,
      then fans out over the scale-up links (the MoE training report's gather-dedup-all-to-all; DeepEP). With
      n nodes in the group and uniform routing, a token's experts hit (n - 1)(1 - (1 - 1/n)^k) remote nodes on
      average, against k (n - 1)/n copies for the flat exchange. The two tiers run concurrently.
    """
    acc = cluster.accelerator
    eff = acc.family_constants.net_efficiency
    g = np.maximum(group, 1)
    flat = all_to_all_s(cluster, tokens * top_k * token_bytes, g, stride)
    k = members_per_node(cluster, g, stride)
    nodes = np.maximum(g / k, 1.0)
    remote_nodes = (nodes - 1) * (1 - (1 - 1 / nodes) ** top_k)
    inter = tokens * token_bytes * remote_nodes / (acc.inter_node_gbps * 1e9 * eff)
    intra = tokens * top_k * token_bytes * (k - 1) / k / (acc.intra_node_gbps * 1e9 * eff)
    hier = np.maximum(inter, intra) + 2 * _latency_s(cluster, g, ring=False)
    return np.where(g > 1, np.where(nodes > 1, np.minimum(flat, hier), flat), 0.0)


def p2p_s(cluster: Cluster, size_bytes, crosses_node):
    acc = cluster.accelerator
    eff = acc.family_constants.net_efficiency
    bw = np.where(crosses_node, acc.inter_node_gbps, acc.intra_node_gbps) * 1e9 * eff
    return size_bytes / bw + acc.family_constants.collective_latency_s
