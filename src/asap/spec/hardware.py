"""Accelerators, their interconnects, and clusters.

Every figure is a public, vendor-published number (dense, no structured sparsity), with its source beside it.
Bandwidths are GB/s per device per direction. The few efficiency constants that turn peaks into achievable
rates live per accelerator *family* (``FAMILIES``), each with its reason; none names a model or a run.

The accelerators themselves are in ``asap.spec.catalog`` (``Accelerator``, ``CATALOG``, ``get_accelerator``) and
the families' constants in ``asap.spec.families`` (``Family``, ``FAMILIES``); both are re-exported here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from asap.errors import AsapError
# the catalog and the family constants live in their own modules; every name stays importable from here
from asap.spec.calibration_file import validate_measured
from asap.spec.catalog import CATALOG, MEMORY_VARIANTS, Accelerator, get_accelerator
from asap.spec.families import EFFICIENCY_KEYS, FAMILIES, ZERO_ALLOWED_KEYS, Family
from asap.spec.kernel_table import load_kernel_table, packaged_table
from asap.spec.topology import Topology, topology_of


# ----------------------------------------------------------------------------------------------------------
# Clusters
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """``nodes`` hosts of ``devices_per_node`` devices; ``scale_up_domain`` is the most devices one fast fabric
    joins (0 when built: the accelerator's catalog figure, or one host for accelerators without one). The
    domain a job gets and the tiers its collectives cross are ``topology`` (asap.spec.topology)."""

    accelerator: Accelerator
    devices_per_node: int
    nodes: int
    name: str = ""
    scale_up_domain: int = 0
    # provenance of a calibrated cluster file (``asap calibrate``): its ``measured`` block, validated; None otherwise
    measured: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    # the accelerator as written (a calibrated CPU's figures are the share of the machine each of its measured
    # processes had; ``accelerator`` is rescaled to the share each of this cluster's devices gets)
    written_accelerator: Accelerator | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.scale_up_domain <= 0:
            default = self.accelerator.scale_up_domain or self.devices_per_node
            object.__setattr__(self, "scale_up_domain", default)
        if self.written_accelerator is None:
            object.__setattr__(self, "written_accelerator", self.accelerator)
        if self.accelerator.family == "cpu" and self.measured is not None:
            object.__setattr__(self, "accelerator", cpu_share(self.written_accelerator, self.measured,
                                                              self.num_devices))

    @property
    def num_devices(self) -> int:
        return self.devices_per_node * self.nodes

    @cached_property
    def topology(self) -> Topology:
        """The job's scale-up and scale-out tiers, derived once per cluster."""
        return topology_of(self)

    @property
    def hbm_gb(self) -> float:
        return self.accelerator.hbm_gb

    def with_devices(self, devices: int) -> "Cluster":
        if devices <= 0:
            raise AsapError("devices", f"must be positive, got {devices}")
        if devices <= self.devices_per_node:
            return replace(self, devices_per_node=devices, nodes=1)
        if devices % self.devices_per_node:
            raise AsapError("devices", f"{devices} is not a multiple of devices_per_node={self.devices_per_node}")
        return replace(self, nodes=devices // self.devices_per_node)

    def to_dict(self) -> dict[str, Any]:
        a = self.accelerator
        return {"accelerator": a.name, "devices_per_node": self.devices_per_node, "nodes": self.nodes,
                "scale_up_domain": self.scale_up_domain, "hbm_gb": a.hbm_gb, "hbm_gbps": a.hbm_gbps,
                "intra_node_gbps": a.intra_node_gbps, "inter_node_gbps": a.inter_node_gbps}


# Names say their count's unit: nodes (servers of devices_per_node), or chips/NPUs for one TPU slice or one
# Ascend supernode. ``asap presets`` shows nodes x devices per node.
CLUSTER_PRESETS: dict[str, dict[str, Any]] = {
    "dgx-a100-1node": {"accelerator": "a100-80gb", "devices_per_node": 8, "nodes": 1},
    "dgx-a100-8node": {"accelerator": "a100-80gb", "devices_per_node": 8, "nodes": 8},
    "dgx-h100-1node": {"accelerator": "h100-sxm", "devices_per_node": 8, "nodes": 1},
    "dgx-h100-8node": {"accelerator": "h100-sxm", "devices_per_node": 8, "nodes": 8},
    "dgx-h100-64node": {"accelerator": "h100-sxm", "devices_per_node": 8, "nodes": 64},
    "h800-256node": {"accelerator": "h800", "devices_per_node": 8, "nodes": 256},
    "h200-8node": {"accelerator": "h200", "devices_per_node": 8, "nodes": 8},
    "b200-8node": {"accelerator": "b200", "devices_per_node": 8, "nodes": 8},
    "gb200-nvl72": {"accelerator": "gb200", "devices_per_node": 4, "nodes": 18},  # one rack: 18 trays of 4
    "gb300-nvl72": {"accelerator": "gb300", "devices_per_node": 4, "nodes": 18},
    "mi300x-8node": {"accelerator": "mi300x", "devices_per_node": 8, "nodes": 8},
    # TPU slices as Google names them (``tpu_slice``): v5p-512 is 256 chips (v4 and v5p names count TensorCores,
    # 2 per chip), v5e-256 and v6e-256 are 256 chips (their names count chips); one slice: 64 hosts of 4
    "v5p-512": {"accelerator": "tpu-v5p", "devices_per_node": 4, "nodes": 64},
    "v5e-256": {"accelerator": "tpu-v5e", "devices_per_node": 4, "nodes": 64},
    "v6e-256": {"accelerator": "tpu-v6e", "devices_per_node": 4, "nodes": 64},
    "ascend-910b-64node": {"accelerator": "ascend-910b", "devices_per_node": 8, "nodes": 64},
    # one CloudMatrix384 supernode: 48 servers of 8 Ascend 910C NPUs, 16 dies (devices) each: 768 devices
    "ascend-910c-384npu": {"accelerator": "ascend-910c", "devices_per_node": 16, "nodes": 48},
    "local-cpu": {"accelerator": "local-cpu", "devices_per_node": 4, "nodes": 1},
}
# the names of earlier releases, whose number was nodes for some and devices for others: still accepted
CLUSTER_ALIASES: dict[str, str] = {
    "dgx-a100-1": "dgx-a100-1node", "dgx-a100-8": "dgx-a100-8node", "dgx-h100-1": "dgx-h100-1node",
    "dgx-h100-8": "dgx-h100-8node", "dgx-h100-64": "dgx-h100-64node", "h800-256": "h800-256node",
    "h200-8": "h200-8node", "b200-8": "b200-8node", "mi300x-8": "mi300x-8node", "tpu-v5p-256chip": "v5p-512",
    "tpu-v5e-256chip": "v5e-256", "tpu-v6e-256chip": "v6e-256", "tpu-v5e-256": "v5e-256", "tpu-v6e-256": "v6e-256",
    "ascend-910b-64": "ascend-910b-64node",
    "ascend-910c-384": "ascend-910c-384npu", "cloudmatrix384": "ascend-910c-384npu",
}
# Names whose meaning changed: refused with the names that say what they meant (one line, exit 2)
RETIRED_CLUSTERS: dict[str, str] = {
    "tpu-v5p-256": "asap's earlier name for 256 v5p chips; Google's v5p-256 is 128 chips (256 TensorCores): say "
                   "v5p-512 for 256 chips, v5p-256 for 128",
}
# Google's slice names (cloud.google.com/tpu/docs, "TPU versions"): the number counts TensorCores for v4 and v5p
# (two per chip: v5p-256 is 128 chips) and chips for v5e (v5litepod) and v6e. (accelerator, cores per chip)
TPU_GENERATIONS: dict[str, tuple[str, int]] = {"v4": ("tpu-v4", 2), "v5p": ("tpu-v5p", 2), "v5e": ("tpu-v5e", 1),
                                              "v5litepod": ("tpu-v5e", 1), "v6e": ("tpu-v6e", 1)}
_TPU_SLICE = re.compile(r"^(?:tpu-)?(v4|v5p|v5e|v5litepod|v6e)-(\d+)$")


def tpu_slice(name: str) -> dict[str, Any] | None:
    """The cluster of a Google slice name (``v5p-256``: 128 chips in 32 hosts of 4), None for other names."""
    m = _TPU_SLICE.match(name)
    if m is None:
        return None
    accelerator, cores_per_chip = TPU_GENERATIONS[m.group(1)]
    count = int(m.group(2))
    chips, odd = divmod(count, cores_per_chip)
    unit = "TensorCores (2 per chip)" if cores_per_chip == 2 else "chips"
    host = CATALOG[accelerator].devices_per_node
    pod = CATALOG[accelerator].scale_up_domain
    if odd or chips == 0 or (chips > host and chips % host):
        raise AsapError("cluster", f"{name}: {m.group(2)} {unit} is not a slice (whole hosts of {host} chips)")
    if chips > pod:
        raise AsapError("cluster", f"{name}: {chips} chips is more than one {m.group(1)} pod ({pod} chips): take "
                                   f"several slices with --slices N")
    # one ICI domain (the catalog's pod-wide default): --nodes grows the slice, --slices adds slices
    return {"accelerator": accelerator, "devices_per_node": min(host, chips), "nodes": max(chips // host, 1)}


# Every catalog accelerator is also a preset of its own name: one scale-up domain of at most 256 devices (an
# HGX server, an NVL72 rack, a 256-chip TPU slice, 256 dies (128 NPUs) of a CloudMatrix384).
_PRESET_MAX_DEVICES = 256
for _name, _acc_obj in CATALOG.items():
    _host = _acc_obj.devices_per_node
    _hosts = max(min(_acc_obj.scale_up_domain or _host, _PRESET_MAX_DEVICES) // _host, 1)
    CLUSTER_PRESETS.setdefault(_name, {"accelerator": _name, "devices_per_node": _host, "nodes": _hosts})


def _positive_number(value: Any, field_name: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise AsapError(field_name, f"must be a number, got {value!r}") from None
    if not math.isfinite(x) or x <= 0:
        raise AsapError(field_name, f"must be a positive number, got {value!r}")
    return x


def _positive_int(value: Any, field_name: str, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise AsapError(field_name, f"must be a positive integer, got {value!r}")
    try:
        x = int(value)
    except (TypeError, ValueError, OverflowError):
        raise AsapError(field_name, f"must be a positive integer, got {value!r}") from None
    if x <= 0 or (isinstance(value, float) and value != x):
        raise AsapError(field_name, f"must be a positive integer, got {value!r}")
    if most is not None and x > most:
        raise AsapError(field_name, f"must be at most {most}, got {value!r}")
    return x


# No fabric joins more devices than this (the largest TPU pod has 8960 chips); a bound keeps typos finite.
MAX_SCALE_UP_DOMAIN = 1 << 20


_CLUSTER_KEYS = {"accelerator", "devices_per_node", "nodes", "scale_up_domain", "hbm_gb", "hbm_gbps",
                 "intra_node_gbps", "inter_node_gbps", "name", "efficiency", "measured", "kernel_table"}
# A catalog part sold with other memory stacks (``hbm_gb``) may run them at another rate (``hbm_gbps``): Meta's
# Grand Teton H100s, on which torchtitan's published benchmarks ran, carry 96 GB of HBM2e at 2.4 TB/s against the
# catalog H100 SXM's 80 GB of HBM3 at 3.35 TB/s (torchtitan docs/performance.md); every memory-bound kernel and
# the bandwidth side of every roofline read the rate given.
_FIGURE_OVERRIDES = ("hbm_gb", "hbm_gbps", "intra_node_gbps", "inter_node_gbps")
# More devices than any machine built (a bound that keeps a typo such as nodes: 1e308 from a search that never ends)
MAX_DEVICES = 1 << 20
_CUSTOM_ACC_KEYS = {"name", "family", "peak_tflops", "hbm_gb", "hbm_gbps", "intra_node_gbps", "inter_node_gbps",
                    "devices_per_node", "scale_up_domain", "interconnect", "matrix_unit_dim", "host_mem_capacity_gb",
                    "host_link_gbps", "host_mem_gbps"}


def cluster_from_dict(d: Any, name: str = "") -> Cluster:
    """Build a Cluster from the docs/design.md cluster schema, naming the bad field on error."""
    if not isinstance(d, dict):
        raise AsapError("cluster", f"must be a mapping, got {type(d).__name__}")
    unknown = set(d) - _CLUSTER_KEYS
    if unknown:
        raise AsapError(f"cluster.{sorted(unknown)[0]}", f"unknown field (allowed: {', '.join(sorted(_CLUSTER_KEYS))})")
    if "accelerator" not in d:
        raise AsapError("cluster.accelerator", "missing")
    acc_raw = d["accelerator"]
    if isinstance(acc_raw, str):
        acc = get_accelerator(acc_raw)
    elif isinstance(acc_raw, dict):
        acc = _custom_accelerator(acc_raw)
    else:
        raise AsapError("cluster.accelerator", "must be a catalog name or a mapping")
    overrides: dict[str, Any] = {}  # Accelerator fields: figures, and the efficiency constants (a Family)
    for key in _FIGURE_OVERRIDES:
        if key in d and d[key] is not None:
            overrides[key] = _positive_number(d[key], f"cluster.{key}")
    if "hbm_gb" in overrides:  # a part with other memory: its driver total is the figure given
        overrides["hbm_total_gb"] = 0.0
        variant = MEMORY_VARIANTS.get((acc.name, overrides["hbm_gb"]))  # sold with this memory as another part
        acc = get_accelerator(variant) if variant else acc
    table = load_kernel_table(d["kernel_table"]) if d.get("kernel_table") else packaged_table(acc.name)
    if table is not None:  # measured kernel rates (asap.spec.kernel_table) before a file's own constants
        acc = replace(acc, efficiency=efficiency_from_dict(table["efficiency"], acc.family_constants,
                                                           "cluster.kernel_table.efficiency"))
    if d.get("efficiency") is not None:
        overrides["efficiency"] = efficiency_from_dict(d["efficiency"], acc.family_constants, "cluster.efficiency")
    if overrides:
        acc = replace(acc, **overrides)
    dpn = _positive_int(d.get("devices_per_node", acc.devices_per_node), "cluster.devices_per_node", MAX_DEVICES)
    nodes = _positive_int(d.get("nodes", 1), "cluster.nodes", MAX_DEVICES)
    if dpn * nodes > MAX_DEVICES:
        raise AsapError("cluster.nodes", f"{nodes} nodes x {dpn} devices is more than {MAX_DEVICES} devices")
    measured = validate_measured(d["measured"]) if d.get("measured") is not None else None
    return Cluster(accelerator=acc, devices_per_node=dpn, nodes=nodes, name=str(d.get("name", name)),
                   scale_up_domain=_scale_up_domain(d, "cluster.scale_up_domain"), measured=measured)


def efficiency_from_dict(d: Any, base: Family, field_name: str) -> Family:
    """Override some of a family's constants (a calibrated or hypothetical machine): known names, positive
    finite numbers, fractions of peak at most 1."""
    if not isinstance(d, dict):
        raise AsapError(field_name, f"must be a mapping of {', '.join(EFFICIENCY_KEYS)}")
    values: dict[str, Any] = {}  # Family fields, each a float
    for k, v in d.items():
        if k not in EFFICIENCY_KEYS:
            raise AsapError(f"{field_name}.{k}", f"unknown constant (known: {', '.join(EFFICIENCY_KEYS)})")
        x = float(v) if k in ZERO_ALLOWED_KEYS and v == 0 else _positive_number(v, f"{field_name}.{k}")
        if (k.endswith("efficiency") or k in ("tp_overlap", "overlap_tax")) and x > 1:
            raise AsapError(f"{field_name}.{k}", f"is a fraction of peak, at most 1, got {v!r}")
        values[k] = x
    return replace(base, **values)


def _scale_up_domain(d: dict, field_name: str) -> int:
    """A mapping's ``scale_up_domain``: 0 (the default: the catalog's figure, else one host) when absent or null."""
    if d.get("scale_up_domain") is None:
        return 0
    return _positive_int(d["scale_up_domain"], field_name, MAX_SCALE_UP_DOMAIN)


def _custom_accelerator(d: dict) -> Accelerator:
    unknown = set(d) - _CUSTOM_ACC_KEYS
    if unknown:
        raise AsapError(f"cluster.accelerator.{sorted(unknown)[0]}", "unknown field")
    peaks = d.get("peak_tflops")
    if not isinstance(peaks, dict) or not peaks:
        raise AsapError("cluster.accelerator.peak_tflops", "must be a mapping like {bf16: 989, fp16: 989, fp8: 1979}")
    peak_tflops = {}
    for k, v in peaks.items():
        if str(k) not in ("bf16", "fp16", "fp8", "fp32", "fp4"):
            raise AsapError(f"cluster.accelerator.peak_tflops.{k}", "unknown precision (bf16, fp16, fp8, fp32, fp4)")
        peak_tflops[str(k)] = _positive_number(v, f"cluster.accelerator.peak_tflops.{k}")
    for key in ("hbm_gb", "hbm_gbps"):
        if key not in d:
            raise AsapError(f"cluster.accelerator.{key}", "missing")
    family = str(d.get("family", "hopper"))
    if family not in FAMILIES:
        raise AsapError("cluster.accelerator.family", f"unknown family '{family}' (known: {', '.join(FAMILIES)})")
    return Accelerator(
        name=str(d.get("name", "custom")), family=family, peak_tflops=peak_tflops,
        hbm_gb=_positive_number(d["hbm_gb"], "cluster.accelerator.hbm_gb"),
        hbm_gbps=_positive_number(d["hbm_gbps"], "cluster.accelerator.hbm_gbps"),
        intra_node_gbps=_positive_number(d.get("intra_node_gbps", 300), "cluster.accelerator.intra_node_gbps"),
        inter_node_gbps=_positive_number(d.get("inter_node_gbps", 25), "cluster.accelerator.inter_node_gbps"),
        devices_per_node=_positive_int(d.get("devices_per_node", 8), "cluster.accelerator.devices_per_node"),
        scale_up_domain=_scale_up_domain(d, "cluster.accelerator.scale_up_domain"),
        interconnect=str(d.get("interconnect", "nvlink")), source="user-supplied",
        matrix_unit_dim=_optional_count(d, "matrix_unit_dim"), **_host_figures(d))


def _optional_count(d: Mapping[str, Any], key: str) -> int:
    """An optional non-negative whole number of a custom accelerator (0 when absent)."""
    v = d.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise AsapError(f"cluster.accelerator.{key}", f"must be a whole number >= 0, got {v!r}")
    return v


_HOST_KEYS = ("host_mem_capacity_gb", "host_link_gbps", "host_mem_gbps")  # the host side (asap.cost.offload)


def _host_figures(d: Mapping[str, Any]) -> dict[str, Any]:
    """The host-side figures a custom accelerator gives (``_HOST_KEYS``), each a positive number."""
    return {k: _positive_number(d[k], f"cluster.accelerator.{k}") for k in _HOST_KEYS if k in d}


def cpu_share(acc: Accelerator, measured: Mapping[str, Any], devices: int) -> Accelerator:
    """A calibrated CPU's figures for a job of ``devices`` processes. ``asap calibrate`` measured P processes of
    max(1, C // P) threads on C cores, all busy: each had min(threads, C / P) cores for its GEMMs and streams
    and min(1, C / P) for its single-threaded host work. A job of n processes gets min(max(1, C // n), C / n) and
    min(1, C / n): the figures scale by the ratio (``asap run`` starts its processes the same way)."""
    P = int(measured.get("processes") or devices)
    C = int((measured.get("machine") or {}).get("cpu_count") or P)
    if P == devices or P <= 0 or C <= 0:
        return acc

    def cores(n: int) -> tuple[float, float]:
        return min(max(1, C // n), C / n), min(1.0, C / n)

    (c_job, h_job), (c_cal, h_cal) = cores(devices), cores(P)
    f_compute, f_host = c_job / c_cal, h_job / h_cal
    fam = acc.family_constants
    eff = replace(fam, host_op_s=fam.host_op_s / f_host, dtensor_op_s=fam.dtensor_op_s / f_host)
    return replace(acc, peak_tflops={k: v * f_compute for k, v in acc.peak_tflops.items()},
                   hbm_gbps=acc.hbm_gbps * f_compute, efficiency=eff)


def load_cluster(spec: str | dict | Cluster, nodes: int | None = None, devices: int | None = None,
                 slices: int | None = None) -> Cluster:
    """A preset name, a catalog accelerator name, a YAML/JSON file path, or a mapping; then --nodes/--devices."""
    from asap.spec.files import read_mapping

    if isinstance(spec, Cluster):
        cluster = spec
    elif isinstance(spec, dict):
        cluster = cluster_from_dict(spec)
    else:
        text = str(spec)
        key = CLUSTER_ALIASES.get(text.lower(), text.lower())
        if key in RETIRED_CLUSTERS:
            raise AsapError("cluster", f"'{text}' is {RETIRED_CLUSTERS[key]}")
        google = tpu_slice(key) if key not in CLUSTER_PRESETS else None
        if key in CLUSTER_PRESETS:
            cluster = cluster_from_dict(CLUSTER_PRESETS[key], name=key)
        elif google is not None:
            cluster = cluster_from_dict(google, name=key)
        elif Path(text).exists():
            cluster = cluster_from_dict(read_mapping(Path(text), "cluster"), name=Path(text).stem)
        else:
            from asap.spec.words import did_you_mean

            raise AsapError("cluster", f"'{text}' is neither a preset nor a file"
                                       f"{did_you_mean(text, [*CLUSTER_PRESETS, *CLUSTER_ALIASES])}; "
                                       f"`asap presets` lists them")
    if nodes is not None:
        cluster = replace(cluster, nodes=_positive_int(nodes, "nodes", MAX_DEVICES // cluster.devices_per_node))
    if devices is not None:
        cluster = cluster.with_devices(_positive_int(devices, "devices", MAX_DEVICES))
    if slices is not None:
        cluster = with_slices(cluster, _positive_int(slices, "slices", MAX_DEVICES // cluster.num_devices))
    return cluster


def with_slices(cluster: Cluster, slices: int) -> Cluster:
    """``slices`` copies of ``cluster`` joined by the scale-out network (TPU multislice: DCN between the slices'
    ICI domains; GPUs: racks or pods over the data-centre network): each copy keeps its own scale-up domain, at
    most the devices of one copy."""
    domain = min(cluster.scale_up_domain, cluster.num_devices)
    return replace(cluster, nodes=cluster.nodes * slices, scale_up_domain=domain,
                   name=f"{slices}x {cluster.name}" if cluster.name and slices > 1 else cluster.name)
