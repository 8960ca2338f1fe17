"""Accelerators, their interconnects, and clusters.

Every figure is a public, vendor-published number (dense, no structured sparsity), with its source beside it.
Bandwidths are GB/s per device per direction. The few efficiency constants that turn peaks into achievable
rates live per accelerator *family* (``FAMILIES``), each with its reason; none names a model or a run.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from asap.errors import AsapError
from asap.spec.topology import Topology, topology_of

# ----------------------------------------------------------------------------------------------------------
# Efficiency constants per family (the only tuned numbers in the cost model; see docs/cost_model.md).
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """Achievable fractions of peak for one accelerator family.

    gemm_efficiency: fraction of peak a large, square bf16 GEMM reaches (cuBLAS/CANN/XLA on big shapes).
    gemm_half_dim: a GEMM dimension at which that efficiency halves; the curve is d / (d + gemm_half_dim) per
        dimension, which reproduces the roll-off of thin GEMMs (tensor parallelism splits n or k; small
        micro-batches shrink m). Tile-quantisation of 128x128-class tensor-core tiles motivates ~100-200.
    attention_efficiency: fraction of peak of fused (flash) attention, whose softmax and masking keep the
        matrix units idle part of the time (FlashAttention-2 reaches ~70% on A100 forward, less backward).
    fp8_gemm_efficiency: fraction of the *fp8* peak reached by fp8 GEMMs, lower than bf16 because of the
        scaling/casting kernels and amax bookkeeping around each GEMM (Transformer Engine, torchao).
    hbm_efficiency: fraction of the HBM peak a streaming elementwise kernel reaches.
    net_efficiency: fraction of the link peak that NCCL/HCCL/ICI collectives reach as bus bandwidth.
    collective_latency_s: fixed cost of one collective or point-to-point call (launch + first hop).
    kernel_overhead_s: launch gap per kernel that the device cannot hide (the host-bound floor).
    hop_latency_s: latency of one step of a ring collective; NCCL runs all-gather and reduce-scatter as rings
        (g-1 steps), all-reduce as a tree at scale (2 log2 g steps) (NCCL tuning docs; nccl-tests latencies).
    overlap_tax: fraction of an overlapped collective's duration added to the computation it hides behind:
        NCCL kernels occupy SMs (16-32 channels of 132 SMs on H100) and HBM bandwidth while they run.
    host_op_s: host time to dispatch one framework operator (PyTorch eager: the Python frame, the dispatcher,
        the launch; ~3-10 us), priced per operator the stack's host runs (``asap.cost.host``).
    dtensor_op_s: the extra host time of an operator on DTensors (sharding propagation and the subclass's
        Python dispatch), for tensor-parallel layers built on DTensor (torchtitan, the reference trainer).
    dtensor_call_s: the extra host time of a collective issued through torch's functional collectives (DTensor's
        redistributes: queued on the process group's thread, then waited on) over a direct call.
    sync_s: the wait of one blocking collective call beyond its transfer and latency: what a rank waits for
        peers that are descheduled when processes outnumber cores; 0 on dedicated devices; measured by
        ``asap calibrate``.
    tp_overlap: fraction of tensor-parallel communication hidden behind the neighbouring GEMMs by the
        generation's usual stack (Megatron-Core --tp-comm-overlap with Transformer Engine userbuffers and
        torchtitan's async TP on Hopper; none in the 2021-22 Megatron-LM that A100 runs used, Korthikanti 2022
        sec. 6 leaves it as future work).
    """

    name: str
    gemm_efficiency: float
    gemm_half_dim: float
    attention_efficiency: float
    fp8_gemm_efficiency: float
    hbm_efficiency: float
    net_efficiency: float
    collective_latency_s: float
    kernel_overhead_s: float
    hop_latency_s: float = 5e-6
    overlap_tax: float = 0.15
    tp_overlap: float = 0.0
    host_op_s: float = 6e-6
    dtensor_op_s: float = 20e-6
    dtensor_call_s: float = 0.0
    sync_s: float = 0.0
    # the host runs ahead of an accelerator (kernels queue; the host only shows where it is slower than the
    # device); a CPU runs its operators on the host itself, so host and compute add up
    async_host: bool = True


_FAMILY_TABLE = (
    # NVIDIA Ampere (A100). Fitted to the A100 calibration runs (benchmarks/calibrate.py).
    Family(name="ampere",
           gemm_efficiency=0.69,  # large fp16 GEMMs; cuBLAS on A100 measures 0.7-0.8 of peak
           gemm_half_dim=64.0,
           attention_efficiency=0.10,  # the Megatron/NeoX stacks of 2021-22 ran unfused softmax attention:
           # scores written and re-read in HBM, ~hd/3 FLOP/B against a ridge of 150 FLOP/B
           fp8_gemm_efficiency=0.60,  # (A100 has no fp8; unused)
           hbm_efficiency=0.60,  # unfused elementwise kernels of that generation
           net_efficiency=0.80,  # NCCL bus bandwidth on DGX A100 (nccl-tests)
           collective_latency_s=20e-6, kernel_overhead_s=4e-6),
    # NVIDIA Hopper (H100/H800/H200). Fitted to the H100 calibration runs.
    Family(name="hopper",
           gemm_efficiency=0.615,  # power/clock limits under sustained load keep H100 below its boost peak
           gemm_half_dim=64.0,
           attention_efficiency=0.30,  # FlashAttention-2 on H100 reaches ~0.35 forward and less backward
           fp8_gemm_efficiency=0.60,  # fp8 tensor cores at 0.6 of the fp8 peak; the input's cast to fp8 is priced
           # apart (roofline.FP8_CAST_BYTES_PER_ELEMENT), fitted on the H100 fp8 runs
           hbm_efficiency=0.95,  # fused elementwise kernels (Transformer Engine, torch.compile)
           net_efficiency=0.90,  # NCCL over NVLink4 / NDR IB, bounded above at 0.9
           collective_latency_s=20e-6, kernel_overhead_s=4e-6,
           tp_overlap=0.3),  # Megatron-Core/NeMo recipes enable TE userbuffer TP overlap, torchtitan async TP;
    # not every run uses them, so a part, not all
    # NVIDIA Blackwell (B200/GB200/GB300): first estimates from Hopper's (bf16 GEMMs a little higher at 0.63 for
    # the larger tensor cores, fused elementwise at 0.86 of the faster HBM3e), fp8 fitted on the one Blackwell
    # calibration run (Megatron-Bridge, Llama 3.1 405B on 256 GB200): fp8 GEMMs at 0.65 of the fp8 peak, above
    # Hopper's 0.60 as the second-generation Transformer Engine scales per block in hardware.
    Family(name="blackwell", gemm_efficiency=0.63, gemm_half_dim=64.0, attention_efficiency=0.30,
           fp8_gemm_efficiency=0.65, hbm_efficiency=0.86, net_efficiency=0.90, collective_latency_s=20e-6,
           kernel_overhead_s=4e-6),
    # AMD CDNA3 (MI300X): hipBLASLt reaches ~0.5-0.6 of the (higher) dense peak on large bf16 GEMMs (ROCm
    # performance guides); CK flash attention ~0.3; RCCL bus bandwidth ~0.75 of the xGMI line rate.
    Family(name="cdna3", gemm_efficiency=0.55, gemm_half_dim=128.0, attention_efficiency=0.30,
           fp8_gemm_efficiency=0.45, hbm_efficiency=0.80, net_efficiency=0.75, collective_latency_s=25e-6,
           kernel_overhead_s=5e-6),
    # AMD CDNA4 (MI350X, MI355X): no calibration runs; CDNA3's constants (the same ROCm stack, hipBLASLt and
    # RCCL), so its bands are extrapolated (asap.cost.bands)
    Family(name="cdna4", gemm_efficiency=0.55, gemm_half_dim=128.0, attention_efficiency=0.30,
           fp8_gemm_efficiency=0.45, hbm_efficiency=0.80, net_efficiency=0.75, collective_latency_s=25e-6,
           kernel_overhead_s=5e-6),
    # TPU (fitted on the two MaxText v5p runs): XLA matmuls on the 128x128 MXUs reach 0.85 of peak at large
    # shapes (MaxText's 32B run is at 68% MFU end to end); splash (flash) attention at 0.5; XLA fuses
    # elementwise work into the matmuls; ICI collectives run close to link rate, and half of the TP traffic
    # hides behind the matmuls it feeds (XLA's async collective fusion / collective matmul, which MaxText's
    # v5p configurations enable).
    Family(name="tpu", gemm_efficiency=0.85, gemm_half_dim=128.0, attention_efficiency=0.50,
           fp8_gemm_efficiency=0.50, hbm_efficiency=0.85, net_efficiency=0.85, collective_latency_s=15e-6,
           kernel_overhead_s=2e-6, tp_overlap=0.5),
    # Ascend: Cube units of 16x16x16; CANN matmuls reach somewhat less of peak, HCCL over HCCS/RoCE. MC2
    # (MindSpeed --use-ascend-mc2, MindFormers' mc2 fusion: matmul fused with the TP all-gather /
    # reduce-scatter, the communication tiled under the matmul's cube work on the 910B) hides TP traffic
    # behind the GEMMs as Transformer Engine's userbuffers do on Hopper: the same share.
    Family(name="ascend", gemm_efficiency=0.60, gemm_half_dim=128.0, attention_efficiency=0.30,
           fp8_gemm_efficiency=0.50, hbm_efficiency=0.80, net_efficiency=0.75, collective_latency_s=30e-6,
           kernel_overhead_s=6e-6, tp_overlap=0.3),
    # A CPU runs BLAS at a fair share of its vector peak; gloo over loopback is memory-copy bound.
    # Its per-operator cost is the host's (``host_op_s``, PyTorch eager on one core: ~3 us), priced per
    # operator the framework dispatches, so the roofline adds no launch gap of its own (kernel_overhead_s 0).
    Family(name="cpu", gemm_efficiency=0.50, gemm_half_dim=32.0, attention_efficiency=0.30,
           fp8_gemm_efficiency=0.50, hbm_efficiency=0.60, net_efficiency=0.50, collective_latency_s=50e-6,
           kernel_overhead_s=0.0, host_op_s=3e-6, async_host=False),
)
# read-only: an accelerator carries its own constants (``Accelerator.efficiency``); a cluster file's
# ``efficiency`` mapping, or ``dataclasses.replace``, makes a variant, never a change to this table
FAMILIES: Mapping[str, Family] = MappingProxyType({f.name: f for f in _FAMILY_TABLE})
EFFICIENCY_KEYS = tuple(k for k in Family.__dataclass_fields__ if k not in ("name", "async_host"))
# constants that may be 0 (the others are positive)
ZERO_ALLOWED_KEYS = ("tp_overlap", "overlap_tax", "kernel_overhead_s", "host_op_s", "dtensor_op_s", "dtensor_call_s",
                     "sync_s")


# ----------------------------------------------------------------------------------------------------------
# The accelerator catalog
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accelerator:
    name: str
    family: str
    peak_tflops: dict[str, float]  # dense TFLOP/s by precision: bf16, fp16, fp8 (fp32 for CPUs)
    hbm_gb: float
    hbm_gbps: float
    intra_node_gbps: float  # per device per direction, inside the scale-up domain (NVLink, ICI per axis, HCCS)
    inter_node_gbps: float  # per device per direction, across domains (IB/RoCE NIC per device, TPU DCN)
    devices_per_node: int  # default host: devices one server, TPU VM host or compute tray holds
    interconnect: str = "nvlink"  # nvlink | xgmi | ici | hccs | loopback
    torus_dims: int = 0  # TPU ICI torus dimensionality (2 or 3); 0 for switched fabrics
    source: str = ""
    scale_up_domain: int = 0  # most devices one fast fabric joins (NVSwitch domain, ICI pod, supernode); 0: one host
    efficiency: Family | None = None  # the family's constants unless a cluster file overrides some
    # the device memory the driver reports (nvidia-smi's total, in GiB), where it differs from hbm_gb (the
    # marketed "80 GB" of an H100 is 81559 MiB = 79.65 GiB); 0: hbm_gb. What the program may allocate is this
    # less the runtime's own share (``asap.cost.memory``: the stack's fixed allowance) and a --memory-margin.
    hbm_total_gb: float = 0.0
    # the host side (``asap.cost.offload``): the device's link to host memory per direction (PCIe Gen4 x16 32
    # GB/s, Gen5 x16 64 GB/s, NVLink-C2C on Grace superchips) and its share of the host's DRAM bandwidth
    host_link_gbps: float = 32.0
    host_mem_gbps: float = 50.0
    host_mem_capacity_gb: float = 128.0  # the device's share of its host's memory (a 1 TB host of 8 devices)

    @property
    def usable_hbm_gb(self) -> float:
        """The device memory the driver reports, GiB (``hbm_total_gb``, else ``hbm_gb``)."""
        return self.hbm_total_gb or self.hbm_gb

    def __post_init__(self):
        if self.efficiency is None:  # roofline-only parts (asap.profile.devices) have no cost-model family
            object.__setattr__(self, "efficiency", FAMILIES.get(self.family))

    def peak_flops(self, precision: str) -> float:
        """Dense peak in FLOP/s for a precision; fp32 runs at the catalog's fp32 figure or at half of bf16; the
        block-scaled 4-bit formats (nvfp4, mxfp4) at the catalog's fp4 figure."""
        p = precision.lower()
        p = "fp4" if p in ("nvfp4", "mxfp4") else p
        if p in self.peak_tflops and self.peak_tflops[p]:
            return self.peak_tflops[p] * 1e12
        if p == "fp32":
            return self.peak_tflops.get("bf16", 0.0) * 1e12 / 2
        raise AsapError("precision", f"{precision} is not supported by {self.name} (has {', '.join(sorted(self.peak_tflops))})")

    @property
    def family_constants(self) -> Family:
        return self.efficiency


def _acc(**kw) -> Accelerator:
    return Accelerator(**kw)


CATALOG: dict[str, Accelerator] = {
    a.name: a
    for a in [
        # NVIDIA A100 datasheet (2021): 312 TF dense bf16/fp16; NVLink3 600 GB/s bidirectional; DGX A100 has
        # 8x 200 Gb/s HDR InfiniBand (25 GB/s per GPU). 40 GB: 1555 GB/s HBM2; 80 GB: 2039 GB/s HBM2e.
        _acc(name="a100-40gb", family="ampere", peak_tflops={"bf16": 312, "fp16": 312}, hbm_gb=40, hbm_gbps=1555,
             intra_node_gbps=300, inter_node_gbps=25, devices_per_node=8, scale_up_domain=8,
             host_link_gbps=32, host_mem_gbps=51,  # PCIe Gen4 x16; DGX A100: 2 EPYC 7742, 8 x DDR4-3200 each
             source="NVIDIA A100 datasheet; DGX A100 user guide"),
        _acc(name="a100-80gb", family="ampere", peak_tflops={"bf16": 312, "fp16": 312}, hbm_gb=80, hbm_gbps=2039,
             intra_node_gbps=300, inter_node_gbps=25, devices_per_node=8, scale_up_domain=8,
             host_link_gbps=32, host_mem_gbps=51,
             source="NVIDIA A100 datasheet; DGX A100 user guide"),
        # NVIDIA H100 SXM datasheet: 989 TF dense bf16, 1979 TF fp8; 80 GB HBM3 at 3.35 TB/s; NVLink4 900 GB/s
        # bidirectional; DGX H100: 8x 400 Gb/s NDR ConnectX-7 (50 GB/s per GPU), 2 TB of host memory.
        _acc(name="h100-sxm", family="hopper", peak_tflops={"bf16": 989, "fp16": 989, "fp8": 1979}, hbm_gb=80,
             hbm_gbps=3350, intra_node_gbps=450, inter_node_gbps=50, devices_per_node=8, scale_up_domain=8,
             hbm_total_gb=81559 / 1024,  # nvidia-smi: 81559 MiB
             # PCIe Gen5 x16; DGX H100: 2 Xeon 8480C, 8 x DDR5-4800 each
             host_mem_capacity_gb=256, host_link_gbps=64, host_mem_gbps=77,
             source="NVIDIA H100 datasheet; DGX H100 user guide; nvidia-smi total 81559 MiB"),
        # H800: H100 compute with NVLink cut to 400 GB/s bidirectional (DeepSeek-V3 report, sec. 3.1: 8x 400 Gb/s IB).
        _acc(name="h800", family="hopper", peak_tflops={"bf16": 989, "fp16": 989, "fp8": 1979}, hbm_gb=80,
             hbm_gbps=3350, intra_node_gbps=200, inter_node_gbps=50, devices_per_node=8, scale_up_domain=8,
             hbm_total_gb=81559 / 1024,  # the H100's HBM3 stacks: nvidia-smi 81559 MiB
             host_mem_capacity_gb=256, host_link_gbps=64, host_mem_gbps=77,
             source="DeepSeek-V3 technical report (arXiv:2412.19437) sec. 3.1; NVIDIA H800 product brief"),
        # H200 SXM datasheet: H100 compute, 141 GB HBM3e at 4.8 TB/s.
        _acc(name="h200", family="hopper", peak_tflops={"bf16": 989, "fp16": 989, "fp8": 1979}, hbm_gb=141,
             hbm_gbps=4800, intra_node_gbps=450, inter_node_gbps=50, devices_per_node=8, scale_up_domain=8,
             hbm_total_gb=143771 / 1024,  # nvidia-smi: 143771 MiB
             host_mem_capacity_gb=256, host_link_gbps=64, host_mem_gbps=77,
             source="NVIDIA H200 datasheet; nvidia-smi total 143771 MiB"),
        # B200 (HGX B200 datasheet): 2.25 PF dense fp16/bf16, 4.5 PF fp8; 180 GB HBM3e at 8 TB/s; NVLink5 1.8 TB/s.
        _acc(name="b200", family="blackwell", peak_tflops={"bf16": 2250, "fp16": 2250, "fp8": 4500, "fp4": 9000}, hbm_gb=180,
             hbm_gbps=8000, intra_node_gbps=900, inter_node_gbps=50, devices_per_node=8, scale_up_domain=8,
             hbm_total_gb=183359 / 1024,  # nvidia-smi: 183359 MiB
             # PCIe Gen5 x16; DGX B200: 2 Xeon 8570, 8 x DDR5-5600 each
             host_mem_capacity_gb=512, host_link_gbps=64, host_mem_gbps=90,
             source="NVIDIA HGX B200 datasheet; DGX B200 user guide; nvidia-smi total 183359 MiB"),
        # GB200 NVL72 datasheet: 180 PF dense bf16 / 72 GPUs = 2.5 PF; 13.4 TB HBM3e / 72 = 186 GB at 8 TB/s;
        # one 72-GPU NVLink domain over 18 compute trays of 4 GPUs (2 Grace-Blackwell superchips each);
        # ConnectX-7 400 Gb/s per GPU.
        _acc(name="gb200", family="blackwell", peak_tflops={"bf16": 2500, "fp16": 2500, "fp8": 5000, "fp4": 10000}, hbm_gb=186,
             hbm_gbps=8000, intra_node_gbps=900, inter_node_gbps=50, devices_per_node=4, scale_up_domain=72,
             # NVLink-C2C 900 GB/s bidirectional per Grace, 2 GPUs; LPDDR5X 512 GB/s
             host_mem_capacity_gb=240, host_link_gbps=225, host_mem_gbps=256,
             source="NVIDIA GB200 NVL72 datasheet"),
        # GB300 NVL72: same dense bf16/fp8 as GB200, 288 GB HBM3e per GPU, ConnectX-8 800 Gb/s per GPU; the same
        # 72-GPU NVLink domain of 18 trays of 4.
        _acc(name="gb300", family="blackwell", peak_tflops={"bf16": 2500, "fp16": 2500, "fp8": 5000, "fp4": 15000}, hbm_gb=288,
             hbm_gbps=8000, intra_node_gbps=900, inter_node_gbps=100, devices_per_node=4, scale_up_domain=72,
             host_mem_capacity_gb=240, host_link_gbps=225, host_mem_gbps=256,
             source="NVIDIA GB300 NVL72 datasheet"),
        # NVIDIA GH200 Grace Hopper superchip datasheet: the H100's compute, 96 GB HBM3 at 4 TB/s, NVLink-C2C 900
        # GB/s bidirectional to one Grace with 480 GB LPDDR5X at up to 512 GB/s; quad-GH200 nodes (CSCS Alps):
        # 6 NVLink4 links (150 GB/s per direction) between each pair, a 200 Gb/s Slingshot NIC per superchip.
        _acc(name="gh200", family="hopper", peak_tflops={"bf16": 989, "fp16": 989, "fp8": 1979}, hbm_gb=96,
             hbm_gbps=4000, intra_node_gbps=150, inter_node_gbps=25, devices_per_node=4, scale_up_domain=4,
             host_mem_capacity_gb=480, host_link_gbps=450, host_mem_gbps=512,
             source="NVIDIA GH200 Grace Hopper superchip datasheet; CSCS Alps quad-GH200 node"),
        # AMD Instinct MI300X datasheet: 1307 TF dense bf16, 2615 TF fp8; 192 GB HBM3 at 5.3 TB/s; 7 Infinity
        # Fabric links x 64 GB/s per direction = 448 GB/s; 400 Gb/s NIC per GPU in reference platforms.
        _acc(name="mi300x", family="cdna3", peak_tflops={"bf16": 1307, "fp16": 1307, "fp8": 2615}, hbm_gb=192,
             hbm_gbps=5300, intra_node_gbps=448, inter_node_gbps=50, devices_per_node=8, scale_up_domain=8,
             interconnect="xgmi",
             # PCIe Gen5 x16; 2 EPYC 9654, 12 x DDR5-4800 each
             host_mem_capacity_gb=192, host_link_gbps=64, host_mem_gbps=115,
             source="AMD Instinct MI300X datasheet"),
        # AMD Instinct MI325X datasheet: MI300X compute (1307 TF bf16, 2615 fp8), 256 GB HBM3E at 6 TB/s, the same
        # 7 x 64 GB/s Infinity Fabric links.
        _acc(name="mi325x", family="cdna3", peak_tflops={"bf16": 1307, "fp16": 1307, "fp8": 2615}, hbm_gb=256,
             hbm_gbps=6000, intra_node_gbps=448, inter_node_gbps=50, devices_per_node=8, scale_up_domain=8,
             interconnect="xgmi", host_mem_capacity_gb=192, host_link_gbps=64, host_mem_gbps=115,
             source="AMD Instinct MI325X datasheet"),
        # AMD Instinct MI350X / MI355X datasheets (CDNA4): 2.3 / 2.5 PF dense bf16, 4.6 / 5.0 PF fp8, 9.2 / 10.1 PF
        # MXFP4; 288 GB HBM3E at 8 TB/s; Infinity Fabric 1075 GB/s per GPU (both directions); PCIe Gen5 host.
        _acc(name="mi350x", family="cdna4", peak_tflops={"bf16": 2307, "fp16": 2307, "fp8": 4614, "fp4": 9228},
             hbm_gb=288, hbm_gbps=8000, intra_node_gbps=537, inter_node_gbps=50, devices_per_node=8,
             scale_up_domain=8, interconnect="xgmi", host_mem_capacity_gb=256, host_link_gbps=64, host_mem_gbps=115,
             source="AMD Instinct MI350X datasheet"),
        _acc(name="mi355x", family="cdna4", peak_tflops={"bf16": 2516, "fp16": 2516, "fp8": 5033, "fp4": 10066},
             hbm_gb=288, hbm_gbps=8000, intra_node_gbps=537, inter_node_gbps=50, devices_per_node=8,
             scale_up_domain=8, interconnect="xgmi", host_mem_capacity_gb=256, host_link_gbps=64, host_mem_gbps=115,
             source="AMD Instinct MI355X datasheet"),
        # NVIDIA HGX B300 (Blackwell Ultra): B200's dense bf16 and fp8, 1.5x its dense NVFP4 (13.5 PF), 288 GB
        # HBM3E at 8 TB/s, NVLink5 1.8 TB/s bidirectional, ConnectX-8 800 Gb/s per GPU.
        _acc(name="b300", family="blackwell", peak_tflops={"bf16": 2250, "fp16": 2250, "fp8": 4500, "fp4": 13500},
             hbm_gb=288, hbm_gbps=8000, intra_node_gbps=900, inter_node_gbps=100, devices_per_node=8,
             scale_up_domain=8, host_mem_capacity_gb=512, host_link_gbps=64, host_mem_gbps=90,
             source="NVIDIA HGX B300 / Blackwell Ultra datasheet"),
        # TPUs (Google Cloud TPU system architecture docs; 'How to Scale Your Model' (JAX scaling book) table of
        # TPU specs): ICI link bandwidth one-way per link. A TPU VM host holds 4 chips (devices_per_node); an
        # ICI slice spans hosts up to the generation's pod (scale_up_domain: v4 4096, v5p 8960, v5e and v6e
        # 256 chips); slices of a multislice job talk over DCN.
        # The per-device ICI figure below is one-way bandwidth of the links of one torus axis in both ring
        # directions (2 links); DCN per chip is the host NIC share.
        _acc(name="tpu-v4", family="tpu", peak_tflops={"bf16": 275, "fp16": 275}, hbm_gb=32, hbm_gbps=1200,
             intra_node_gbps=90, inter_node_gbps=6.25, devices_per_node=4, scale_up_domain=4096,
             interconnect="ici", torus_dims=3,
             source="Google Cloud TPU v4 docs; JAX scaling book (ICI 4.5e10 B/s one-way per link)"),
        _acc(name="tpu-v5e", family="tpu", peak_tflops={"bf16": 197, "fp16": 197}, hbm_gb=16, hbm_gbps=819,
             intra_node_gbps=90, inter_node_gbps=6.25, devices_per_node=4, scale_up_domain=256,
             interconnect="ici", torus_dims=2,
             source="Google Cloud TPU v5e docs; JAX scaling book (ICI 4.5e10 B/s one-way per link)"),
        _acc(name="tpu-v5p", family="tpu", peak_tflops={"bf16": 459, "fp16": 459}, hbm_gb=95, hbm_gbps=2765,
             intra_node_gbps=180, inter_node_gbps=12.5, devices_per_node=4, scale_up_domain=8960,
             interconnect="ici", torus_dims=3,
             source="Google Cloud TPU v5p docs; JAX scaling book (ICI 9e10 B/s one-way per link)"),
        _acc(name="tpu-v6e", family="tpu", peak_tflops={"bf16": 918, "fp16": 918}, hbm_gb=32, hbm_gbps=1640,
             intra_node_gbps=180, inter_node_gbps=12.5, devices_per_node=4, scale_up_domain=256,
             interconnect="ici", torus_dims=2,
             source="Google Cloud TPU v6e (Trillium) docs; JAX scaling book (ICI 9e10 B/s one-way per link)"),
        # TPU7x (Ironwood; Google Cloud TPU7x docs): 4614 TF fp8 and 2307 TF bf16, 192 GB HBM3E at 7.37 TB/s per chip,
        # and two TensorCore dies per chip that JAX addresses as two devices: per device half of each (bf16 1153,
        # fp8 2307, 96 GB at 3.69 TB/s); 1.2 TB/s ICI per chip over a 3D torus (~100 GB/s one-way per link, an
        # axis's two directions per device as below); 4 chips (8 devices) per host; 9216-chip pods.
        _acc(name="tpu7x", family="tpu", peak_tflops={"bf16": 1153, "fp16": 1153, "fp8": 2307}, hbm_gb=96,
             hbm_gbps=3690, intra_node_gbps=100, inter_node_gbps=12.5, devices_per_node=8, scale_up_domain=18432,
             interconnect="ici", torus_dims=3,
             source="Google Cloud TPU7x (Ironwood) docs: two devices per chip"),
        # Huawei Ascend 910B (Atlas 800T A2): ~313 TF fp16, 64 GB HBM2e at 1.6 TB/s; HCCS 7 links x 56 GB/s
        # = 392 GB/s bidirectional (196 per direction); 200 Gb/s RoCE per NPU.
        _acc(name="ascend-910b", family="ascend", peak_tflops={"bf16": 313, "fp16": 313}, hbm_gb=64, hbm_gbps=1600,
             intra_node_gbps=196, inter_node_gbps=25, devices_per_node=8, scale_up_domain=8, interconnect="hccs",
             host_link_gbps=64, host_mem_gbps=102,  # PCIe Gen5 x16; 4 Kunpeng 920, 8 x DDR4-3200 each
             source="Huawei Atlas 800T A2 datasheet; Ascend 910B public specs (the 910B3 bin)"),
        # the 910B bins by name (public specs): 910B3 313 TF fp16 (the catalog's ascend-910b), 910B2 376 TF,
        # both 64 GB HBM2e at 1.6 TB/s on the same HCCS
        _acc(name="ascend-910b3", family="ascend", peak_tflops={"bf16": 313, "fp16": 313}, hbm_gb=64,
             hbm_gbps=1600, intra_node_gbps=196, inter_node_gbps=25, devices_per_node=8, scale_up_domain=8,
             interconnect="hccs", host_link_gbps=64, host_mem_gbps=102,
             source="Ascend 910B3 public specs"),
        _acc(name="ascend-910b2", family="ascend", peak_tflops={"bf16": 376, "fp16": 376}, hbm_gb=64,
             hbm_gbps=1600, intra_node_gbps=196, inter_node_gbps=25, devices_per_node=8, scale_up_domain=8,
             interconnect="hccs", host_link_gbps=64, host_mem_gbps=102,
             source="Ascend 910B2 public specs"),
        # Ascend 910C (two 910B-class dies; CloudMatrix 384 paper arXiv:2506.12708): ~780 TF bf16, 128 GB at
        # 3.2 TB/s; servers of 8 NPUs joined by the Unified Bus into one 384-NPU supernode at 392 GB/s per NPU
        # per direction; 400 Gb/s RoCE per NPU between supernodes.
        _acc(name="ascend-910c", family="ascend", peak_tflops={"bf16": 780, "fp16": 780}, hbm_gb=128, hbm_gbps=3200,
             intra_node_gbps=392, inter_node_gbps=50, devices_per_node=8, scale_up_domain=384, interconnect="hccs",
             source="Huawei CloudMatrix384 paper (arXiv:2506.12708)"),
        # This machine, for real runs: 2 x86 cores with AVX2 FMA at ~3 GHz ~ 2 x 32 fp32 FLOP/cycle x 3e9
        # ~ 0.2 TF fp32 (bf16 is emulated on CPUs, so no faster); DRAM stream ~20 GB/s; gloo over loopback,
        # which every process on the machine shares (scale_up_domain 1024 bounds any local run).
        _acc(name="local-cpu", family="cpu", peak_tflops={"fp32": 0.2, "bf16": 0.2, "fp16": 0.2}, hbm_gb=24,
             hbm_gbps=20, intra_node_gbps=5, inter_node_gbps=1, devices_per_node=8, scale_up_domain=1024,
             interconnect="loopback",
             source="nominal figures for a 2-core x86 host; asap.profile measures the real ridge point"),
    ]
}


def get_accelerator(name: str) -> Accelerator:
    key = str(name).lower().strip()
    if key not in CATALOG:
        raise AsapError("cluster.accelerator", f"unknown accelerator '{name}' (known: {', '.join(CATALOG)})")
    return CATALOG[key]


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
                "scale_up_domain": self.scale_up_domain, "hbm_gb": a.hbm_gb, "intra_node_gbps": a.intra_node_gbps,
                "inter_node_gbps": a.inter_node_gbps}


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
    "tpu-v5p-256chip": {"accelerator": "tpu-v5p", "devices_per_node": 4, "nodes": 64},  # one slice: 64 hosts of 4
    "tpu-v5e-256chip": {"accelerator": "tpu-v5e", "devices_per_node": 4, "nodes": 64},
    "tpu-v6e-256chip": {"accelerator": "tpu-v6e", "devices_per_node": 4, "nodes": 64},
    "ascend-910b-64node": {"accelerator": "ascend-910b", "devices_per_node": 8, "nodes": 64},
    "ascend-910c-384npu": {"accelerator": "ascend-910c", "devices_per_node": 8, "nodes": 48},  # one supernode
    "local-cpu": {"accelerator": "local-cpu", "devices_per_node": 4, "nodes": 1},
}
# the names of earlier releases, whose number was nodes for some and devices for others: still accepted
CLUSTER_ALIASES: dict[str, str] = {
    "dgx-a100-1": "dgx-a100-1node", "dgx-a100-8": "dgx-a100-8node", "dgx-h100-1": "dgx-h100-1node",
    "dgx-h100-8": "dgx-h100-8node", "dgx-h100-64": "dgx-h100-64node", "h800-256": "h800-256node",
    "h200-8": "h200-8node", "b200-8": "b200-8node", "mi300x-8": "mi300x-8node", "tpu-v5p-256": "tpu-v5p-256chip",
    "tpu-v5e-256": "tpu-v5e-256chip", "tpu-v6e-256": "tpu-v6e-256chip", "ascend-910b-64": "ascend-910b-64node",
    "ascend-910c-384": "ascend-910c-384npu",
}
# Every catalog accelerator is also a preset of its own name: one scale-up domain of at most 256 devices (an
# HGX server, an NVL72 rack, a 256-chip TPU slice, 256 NPUs of a CloudMatrix384).
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


_CLUSTER_KEYS = {"accelerator", "devices_per_node", "nodes", "scale_up_domain", "hbm_gb", "intra_node_gbps",
                 "inter_node_gbps", "name", "efficiency", "measured"}
# More devices than any machine built (a bound that keeps a typo such as nodes: 1e308 from a search that never ends)
MAX_DEVICES = 1 << 20
_CUSTOM_ACC_KEYS = {"name", "family", "peak_tflops", "hbm_gb", "hbm_gbps", "intra_node_gbps", "inter_node_gbps",
                    "devices_per_node", "scale_up_domain", "interconnect"}


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
    overrides = {}
    for key in ("hbm_gb", "intra_node_gbps", "inter_node_gbps"):
        if key in d and d[key] is not None:
            overrides[key] = _positive_number(d[key], f"cluster.{key}")
    if "hbm_gb" in overrides:  # a part with other memory: its driver total is the figure given
        overrides["hbm_total_gb"] = 0.0
    if d.get("efficiency") is not None:
        overrides["efficiency"] = efficiency_from_dict(d["efficiency"], acc.efficiency, "cluster.efficiency")
    if overrides:
        acc = replace(acc, **overrides)
    dpn = _positive_int(d.get("devices_per_node", acc.devices_per_node), "cluster.devices_per_node", MAX_DEVICES)
    nodes = _positive_int(d.get("nodes", 1), "cluster.nodes", MAX_DEVICES)
    if dpn * nodes > MAX_DEVICES:
        raise AsapError("cluster.nodes", f"{nodes} nodes x {dpn} devices is more than {MAX_DEVICES} devices")
    measured = validate_measured(d["measured"]) if d.get("measured") is not None else None
    return Cluster(accelerator=acc, devices_per_node=dpn, nodes=nodes, name=str(d.get("name", name)),
                   scale_up_domain=_scale_up_domain(d, "cluster.scale_up_domain"), measured=measured)


# ----------------------------------------------------------------------------------------------------------
# Calibrated cluster files (asap calibrate): the ``measured`` block
# ----------------------------------------------------------------------------------------------------------
# Refused when loaded, always (a corrupt file): a ``measured`` that is not a mapping; a missing or ill-typed
# ``date`` (ISO 8601), ``versions`` (a mapping of names to version strings) or ``machine`` (a mapping with a
# non-empty ``hostname``); a ``format`` other than asap-calibration/1; sections of the wrong shape (``gemm`` and
# ``collectives`` lists of mappings; ``memory``, ``host``, ``fitted``, ``noise`` mappings; ``warnings`` and
# ``not_measured`` lists of strings); any number in the block that is not finite and non-negative. Refused only
# on request (``check_calibration_file``): a file made on another machine (pricing another machine from its
# calibration is legitimate; running on this one with it is not).

CALIBRATION_FORMATS = ("asap-calibration/1",)
_MEASURED_LISTS = ("gemm", "collectives")
_MEASURED_MAPPINGS = ("memory", "host", "fitted", "noise", "model_median_abs_rel_error")
_MAX_MEASURED_DEPTH = 12


def machine_identity() -> dict[str, Any]:
    """What names this machine in a calibration file: hostname, platform, CPU count and model."""
    import os
    import platform
    import socket

    processor = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):  # no /proc (not Linux): platform's name stands
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                processor = line.split(":", 1)[1].strip()
                break
    ident: dict[str, Any] = {"hostname": socket.gethostname(), "platform": platform.platform(),
                             "cpu_count": os.cpu_count() or 1, "processor": processor}
    with contextlib.suppress(ValueError, OSError, AttributeError):  # no sysconf: memory is not recorded
        ident["memory_gb"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1)
    return ident


def validate_measured(m: Any, field_name: str = "cluster.measured") -> dict[str, Any]:
    """A calibration file's ``measured`` block, checked (one AsapError naming the field otherwise); the date
    comes back as an ISO string whichever way YAML parsed it."""
    import datetime as _dt

    if not isinstance(m, dict):
        raise AsapError(field_name, f"must be a mapping (a calibration's measurements), got {type(m).__name__}")
    fmt = m.get("format")
    if fmt is not None and fmt not in CALIBRATION_FORMATS:
        raise AsapError(f"{field_name}.format", f"{fmt!r} is not an asap calibration (known: "
                                                f"{', '.join(CALIBRATION_FORMATS)})")
    for key in ("date", "versions", "machine"):
        if m.get(key) is None:
            raise AsapError(f"{field_name}.{key}", "missing: a calibration file records its date, versions and machine")
    date = m["date"]
    if isinstance(date, _dt.datetime) or isinstance(date, _dt.date):
        date = date.isoformat()
    elif isinstance(date, str):
        try:
            _dt.datetime.fromisoformat(date.strip())
        except ValueError:
            raise AsapError(f"{field_name}.date", f"must be an ISO 8601 date, got {date!r}") from None
    else:
        raise AsapError(f"{field_name}.date", f"must be an ISO 8601 date, got {date!r}")
    versions = m["versions"]
    if not isinstance(versions, dict) or not versions:
        raise AsapError(f"{field_name}.versions", "must be a mapping of package names to versions")
    for k, v in versions.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (str, int, float))):
            raise AsapError(f"{field_name}.versions.{k}", f"must be a version string, got {v!r}")
    machine = m["machine"]
    if not isinstance(machine, dict):
        raise AsapError(f"{field_name}.machine", f"must be a mapping (hostname, platform, ...), got "
                                                 f"{type(machine).__name__}")
    if not isinstance(machine.get("hostname"), str) or not machine["hostname"].strip():
        raise AsapError(f"{field_name}.machine.hostname", "missing: the machine the calibration was made on")
    for key in _MEASURED_LISTS:
        if m.get(key) is not None:
            if not isinstance(m[key], list) or not all(isinstance(x, dict) for x in m[key]):
                raise AsapError(f"{field_name}.{key}", "must be a list of mappings")
    for key in ("warnings", "not_measured"):
        if m.get(key) is not None:
            if not isinstance(m[key], list) or not all(isinstance(x, str) for x in m[key]):
                raise AsapError(f"{field_name}.{key}", "must be a list of strings")
    for key in _MEASURED_MAPPINGS:
        if m.get(key) is not None and not isinstance(m[key], dict):
            raise AsapError(f"{field_name}.{key}", f"must be a mapping, got {type(m[key]).__name__}")
    _check_numbers(m, field_name, 0)
    out = dict(m)
    out["date"] = date
    return out


def _check_numbers(obj: Any, where: str, depth: int) -> None:
    if depth > _MAX_MEASURED_DEPTH:
        raise AsapError(where, "nested too deeply")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_numbers(v, f"{where}.{k}", depth + 1)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_numbers(v, f"{where}[{i}]", depth + 1)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        if not math.isfinite(obj) or obj < 0:
            raise AsapError(where, f"must be a finite, non-negative number, got {obj!r}")


def figures_provenance(cluster: "Cluster") -> dict[str, Any]:
    """Which of a cluster's figures were measured on the machine (``asap calibrate``) and which are the
    catalog's (datasheet peaks and the family's fitted constants)."""
    m = cluster.measured
    if m is None:
        return {"source": "catalog", "measured": [],
                "catalog": ["every figure: " + (cluster.accelerator.source or cluster.accelerator.name)]}
    measured = sorted(m.get("fitted", {})) + (["collectives by group size"] if m.get("collectives") else [])
    return {"source": "calibration", "date": m.get("date"), "machine": (m.get("machine") or {}).get("hostname"),
            "processes": m.get("processes"), "measured": measured, "catalog": list(m.get("not_measured", []))}


def check_calibration_file(cluster: "str | dict | Cluster", this_machine: bool = True) -> dict[str, Any]:
    """Refuse, with one AsapError line, a cluster that is not a calibration (no ``measured`` block) or, with
    ``this_machine``, one made on another machine (another hostname or CPU count). Returns the calibration's
    date, machine and versions, and ``warnings`` (e.g. another asap version than this one) that do not refuse."""
    c = cluster if isinstance(cluster, Cluster) else load_cluster(cluster)
    m = c.measured
    if m is None:
        raise AsapError("cluster.measured", f"missing: {c.name or c.accelerator.name} is not a calibration file "
                                            "(make one with asap calibrate)")
    here = machine_identity()
    there = m["machine"]
    if this_machine:
        if there.get("hostname") != here["hostname"]:
            raise AsapError("cluster.measured.machine.hostname",
                            f"calibrated on {there.get('hostname')!r}, this machine is {here['hostname']!r}: a "
                            "foreign calibration (rerun asap calibrate here)")
        if there.get("cpu_count") is not None and there.get("cpu_count") != here["cpu_count"]:
            raise AsapError("cluster.measured.machine.cpu_count",
                            f"calibrated with {there.get('cpu_count')} CPUs, this machine has {here['cpu_count']}: "
                            "a foreign calibration (rerun asap calibrate here)")
    warnings = []
    from asap.version import __version__

    if m["versions"].get("asap") not in (None, __version__):
        warnings.append(f"made by asap {m['versions'].get('asap')}, this is asap {__version__}")
    return {"date": m["date"], "machine": dict(there), "versions": dict(m["versions"]), "this_machine": this_machine,
            "warnings": warnings}


def efficiency_from_dict(d: Any, base: Family, field_name: str) -> Family:
    """Override some of a family's constants (a calibrated or hypothetical machine): known names, positive
    finite numbers, fractions of peak at most 1."""
    if not isinstance(d, dict):
        raise AsapError(field_name, f"must be a mapping of {', '.join(EFFICIENCY_KEYS)}")
    values = {}
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
        interconnect=str(d.get("interconnect", "nvlink")), source="user-supplied")


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
    fam = acc.efficiency
    eff = replace(fam, host_op_s=fam.host_op_s / f_host, dtensor_op_s=fam.dtensor_op_s / f_host)
    return replace(acc, peak_tflops={k: v * f_compute for k, v in acc.peak_tflops.items()},
                   hbm_gbps=acc.hbm_gbps * f_compute, efficiency=eff)


def load_cluster(spec: str | dict | Cluster, nodes: int | None = None, devices: int | None = None) -> Cluster:
    """A preset name, a catalog accelerator name, a YAML/JSON file path, or a mapping; then --nodes/--devices."""
    from asap.spec.files import read_mapping

    if isinstance(spec, Cluster):
        cluster = spec
    elif isinstance(spec, dict):
        cluster = cluster_from_dict(spec)
    else:
        text = str(spec)
        key = CLUSTER_ALIASES.get(text.lower(), text.lower())
        if key in CLUSTER_PRESETS:
            cluster = cluster_from_dict(CLUSTER_PRESETS[key], name=key)
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
    return cluster
