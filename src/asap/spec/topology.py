"""The topology of a job: its scale-up tier (the fast fabric a group of devices shares) and its scale-out tier.

A cluster names its host (``devices_per_node``: 8 for an HGX server, 4 for a TPU VM host or a GB200 compute
tray) and the largest number of devices one fast fabric joins (``scale_up_domain``: 8 for HGX, 72 for an NVL72
rack, a whole ICI slice up to the pod for TPUs, 768 Ascend 910C dies for a CloudMatrix384 supernode). What one *job* gets is
the effective domain: the largest multiple of the host that is at most ``scale_up_domain`` and divides the
job's device count (256 GB200 GPUs in 4-GPU trays: 64 per NVL72 rack, the way a scheduler spreads the job over
4 racks; 64 TPU v5p chips in hosts of 4: one 64-chip slice). A domain smaller than the host (NVLink pairs in
a PCIe server) is the largest divisor of the host within ``scale_up_domain``.

Ranks are laid out domain-major (rank r sits in domain r // D); inside a TPU slice, row-major over the torus
axes with the innermost (last, longest) axis fastest. Groups are ranks ``base + i * stride`` (i < group) for
every base with ``base % (group * stride) < stride`` (Megatron-Core rank order: tp innermost). All groups of
one kind run in lockstep, so the group that fares worst (fewest members in a domain, fewest torus axes)
sets the pace of all of them.

Everything here is derived once per Cluster (``Cluster.topology``); the per-shape questions the collectives ask
broadcast over numpy arrays of (group, stride) and cache their enumerations.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import gcd, prod
from typing import Any, cast

import numpy as np

# The scale-out network behind each scale-up fabric: InfiniBand NICs per GPU on NVIDIA systems (DGX user
# guides), RoCE on Ascend (Atlas 800T A2, CloudMatrix384) and AMD reference platforms, the data-centre
# network between TPU slices (Cloud TPU multislice docs), and a host's Ethernet for CPU processes.
SCALE_OUT_NAMES = {"nvlink": "ib", "xgmi": "roce", "hccs": "roce", "ub": "roce", "ici": "dcn", "loopback": "ethernet"}
# Rank pattern enumerations stop at this many ranks (whole groups); any legal job's pattern repeats sooner.
_MAX_ENUMERATED_RANKS = 1 << 22


@dataclass(frozen=True)
class Tier:
    """One tier of the fabric.

    name: nvlink | ici | hccs | ub (Ascend's Unified Bus) | xgmi | loopback (scale-up) or ib | roce | dcn | ethernet (scale-out).
    size: devices in one domain of this tier (the scale-out tier spans the whole job).
    gbps: GB/s per device per direction; on a TPU torus, of the links along one axis (both ring directions).
    hop_latency_s: one step of a ring over this tier (the family's figure; the catalog has no per-tier one).
    torus_axes: ICI slice shape, outermost axis first, the innermost (fastest-varying rank) last; () if switched.
    """

    name: str
    size: int
    gbps: float
    hop_latency_s: float
    torus_axes: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "size": self.size, "gbps": self.gbps, "hop_latency_s": self.hop_latency_s}
        if self.torus_axes:
            d["torus_axes"] = list(self.torus_axes)
        return d


@dataclass(frozen=True)
class Topology:
    """A job's two tiers and the shape questions collectives ask about a group of ``group`` ranks ``stride``
    apart: how many of its members share a domain, whether it leaves one, how many torus axes it covers."""

    num_devices: int
    host_devices: int
    scale_up: Tier
    scale_out: Tier
    launch_latency_s: float

    @property
    def domain_size(self) -> int:
        """Devices per effective scale-up domain: the bound for groups that should stay on the fast fabric."""
        return self.scale_up.size

    @property
    def num_domains(self) -> int:
        """Scale-up domains the job spans (TPU: slices, joined by DCN)."""
        return self.num_devices // self.scale_up.size

    @property
    def is_torus(self) -> bool:
        return bool(self.scale_up.torus_axes)

    def members_per_domain(self, group, stride):
        """The fewest members any group of this shape has in one domain it touches (``group`` when every group
        lives inside one domain). Groups that tile the domains evenly take the closed form; the others (tp = 3
        on 8-GPU nodes straddles a boundary with one member on one side) are enumerated."""
        D = self.scale_up.size
        g, st = _shapes(group, stride)
        block = g * st
        inside = D % block == 0  # every group within one domain
        even = (block % D == 0) & ((D % st == 0) | (st % D == 0))  # every domain holds the same share of a group
        k = np.where(inside, g, np.clip(D // st, 1, g))
        odd = ~(inside | even) & (g > 1)
        if odd.any():
            k = k.copy()
            k[odd] = _per_unique_pair(g[odd], st[odd], lambda a, b: _fewest_members(D, a, b))
        return k if k.ndim else int(k)

    def spans_domains(self, group, stride):
        """Whether some group of this shape has members in more than one scale-up domain."""
        return self.members_per_domain(group, stride) < np.asarray(group)

    def torus_axes_covered(self, group, stride):
        """On an ICI torus, the fewest axes along which the members of one group inside one slice differ in
        coordinate (at least 1); a collective runs one ring per covered axis at once, so its bandwidth is the
        per-axis figure times this count (JAX scaling book, "All-reduce on a torus": an all-gather over a
        torus of several axes takes bytes / (W_axis * axes)). On a switched fabric every group has 1."""
        g, st = _shapes(group, stride)
        if not self.is_torus:
            out = np.ones_like(g)
        else:
            axes = self.scale_up.torus_axes
            out = _per_unique_pair(g, st, lambda a, b: _fewest_axes(axes, a, b)) if g.size else g.copy()
            out = np.asarray(out, dtype=np.int64).reshape(g.shape)
        return out if out.ndim else int(out)

    def to_dict(self) -> dict[str, Any]:
        return {"domain_size": self.domain_size, "num_domains": self.num_domains,
                "scale_up": self.scale_up.to_dict(), "scale_out": self.scale_out.to_dict()}


def topology_of(cluster) -> Topology:
    """Derive a cluster's topology (``Cluster.topology`` caches it per cluster)."""
    acc = cluster.accelerator
    fam = acc.family_constants
    domain = effective_domain_size(cluster.num_devices, cluster.devices_per_node, cluster.scale_up_domain)
    axes = torus_shape(domain, acc.torus_dims) if acc.interconnect == "ici" and acc.torus_dims else ()
    scale_up = Tier(acc.interconnect, domain, acc.intra_node_gbps, fam.hop_latency_s, axes)
    scale_out = Tier(SCALE_OUT_NAMES.get(acc.interconnect, "network"), cluster.num_devices, acc.inter_node_gbps,
                     fam.hop_latency_s)
    return Topology(cluster.num_devices, cluster.devices_per_node, scale_up, scale_out, fam.collective_latency_s)


@lru_cache(maxsize=1024)
def effective_domain_size(num_devices: int, host_devices: int, scale_up_domain: int) -> int:
    """Devices per scale-up domain for a job of ``num_devices`` on hosts of ``host_devices``: the largest
    multiple of the host that is at most ``scale_up_domain`` and divides the job (the largest divisor of the
    host within ``scale_up_domain`` when the domain is smaller than a host)."""
    if scale_up_domain < host_devices:
        return max(d for d in _divisors(host_devices) if d <= scale_up_domain and num_devices % d == 0)
    hosts = max(num_devices // host_devices, 1)
    per_domain = max(d for d in _divisors(hosts) if d * host_devices <= scale_up_domain)
    return per_domain * host_devices


@lru_cache(maxsize=256)
def torus_shape(devices: int, dims: int) -> tuple[int, ...]:
    """The axis lengths of an ICI slice of ``devices`` chips on a ``dims``-D torus, ascending (outermost first):
    the most balanced factorisation (smallest longest axis, then largest shortest axis), the shapes Cloud TPU
    slices take: v5p 64 -> 4x4x4, 128 -> 4x4x8, 256 -> 4x8x8, 2048 -> 8x16x16, the 8960-chip pod 16x20x28;
    v5e/v6e 64 -> 8x8, 256 -> 16x16."""
    best: tuple[int, ...] = ()
    for shape in _factorisations(devices, dims):
        if not best or (shape[-1], -shape[0]) < (best[-1], -best[0]):
            best = shape
    return best


def _factorisations(n: int, dims: int, smallest: int = 1) -> list[tuple[int, ...]]:
    """Every way to write n as a product of ``dims`` factors in ascending order, each at least ``smallest``."""
    if dims == 1:
        return [(n,)] if n >= smallest else []
    out = []
    for d in _divisors(n):
        if d >= smallest and d ** dims <= n:
            out += [(d, *rest) for rest in _factorisations(n // d, dims - 1, d)]
    return out


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _shapes(group, stride) -> tuple[np.ndarray, np.ndarray]:
    g = np.maximum(np.asarray(group, dtype=np.int64), 1)
    st = np.maximum(np.asarray(stride, dtype=np.int64), 1)
    g, st = np.broadcast_arrays(g, st)
    return g, st


def _per_unique_pair(g: np.ndarray, st: np.ndarray, fn) -> np.ndarray:
    """``fn(group, stride)`` for each distinct pair, spread back over the arrays' flattened order."""
    pairs, inverse = np.unique(np.stack([g.ravel(), st.ravel()]), axis=1, return_inverse=True)
    values = np.array([fn(int(a), int(b)) for a, b in pairs.T], dtype=np.int64)
    return values[np.ravel(inverse)]


def _group_ranks(domain: int, group: int, stride: int) -> np.ndarray:
    """The ranks of every group of this shape over one period of the layout (a row per group): the pattern
    repeats every lcm(group * stride, domain) ranks, so one period shows every case."""
    block = group * stride
    period = min(block * domain // gcd(block, domain), max(_MAX_ENUMERATED_RANKS // block, 1) * block)
    bases = np.arange(period)
    bases = bases[bases % block < stride]
    return bases[:, None] + np.arange(group)[None, :] * stride


@lru_cache(maxsize=4096)
def _fewest_members(domain: int, group: int, stride: int) -> int:
    """The fewest members any group of this shape has in one domain, among the groups that span domains."""
    if group <= 1:
        return 1
    pieces, spans = _pieces(_group_ranks(domain, group, stride) // domain)
    sizes = np.bincount(pieces.ravel())
    row_of_member = np.repeat(np.arange(pieces.shape[0]), group)
    spanning = np.zeros(len(sizes), dtype=bool)
    spanning[pieces.ravel()[spans[row_of_member]]] = True
    return int(sizes[spanning].min()) if spanning.any() else group


@lru_cache(maxsize=4096)
def _fewest_axes(axes: tuple[int, ...], group: int, stride: int) -> int:
    """The fewest torus axes along which the members of one group's piece inside one slice vary (pieces of one
    member vary along none; 1 is the floor). Ranks in a row increase, so a piece is a run of equal slice ids,
    and a coordinate varies within a run iff two neighbours in it differ."""
    domain = prod(axes)
    if group <= 1:
        return 1
    ranks = _group_ranks(domain, group, stride)
    pieces, _ = _pieces(ranks // domain)
    local = ranks % domain
    same = pieces[:, 1:] == pieces[:, :-1]
    covered = np.zeros(int(pieces.max()) + 1, dtype=np.int64)
    inner = 1
    for length in reversed(axes):  # innermost axis first: coordinate j = (r // inner_j) % L_j
        coord = (local // inner) % length
        varies = np.bincount(pieces[:, 1:][same], weights=(coord[:, 1:] != coord[:, :-1])[same],
                             minlength=len(covered)) > 0
        covered += varies
        inner *= length
    multi = np.bincount(pieces.ravel(), minlength=len(covered)) > 1
    return max(int(covered[multi].min()), 1) if multi.any() else 1


def _pieces(domains: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Label each member by its (group, domain) piece, numbered globally; and which groups span domains."""
    change = np.concatenate([np.ones((domains.shape[0], 1), dtype=bool), domains[:, 1:] != domains[:, :-1]], axis=1)
    labels = np.cumsum(change.ravel()).reshape(domains.shape) - 1
    return labels, cast(np.ndarray, change[:, 1:].any(axis=1))  # an array: any over one axis of a 2-d one
