"""The accelerator catalog: ``Accelerator`` and one row per part (``CATALOG``), every figure a public,
vendor-published number (dense, no structured sparsity) with its source beside it; bandwidths are GB/s per device
per direction. Every name is also importable from ``asap.spec.hardware``."""

from __future__ import annotations

from dataclasses import dataclass

from asap.errors import AsapError
from asap.spec.families import FAMILIES, Family, ultra_variant

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
    interconnect: str = "nvlink"  # nvlink | xgmi | ici | hccs | ub | loopback
    torus_dims: int = 0  # TPU ICI torus dimensionality (2 or 3); 0 for switched fabrics
    source: str = ""
    scale_up_domain: int = 0  # most devices one fast fabric joins (NVSwitch domain, ICI pod, supernode); 0: one host
    efficiency: Family | None = None  # the family's constants unless a cluster file overrides some
    # the device memory the driver reports (nvidia-smi's total, in GiB), where it differs from hbm_gb (the
    # marketed "80 GB" of an H100 is 81559 MiB = 79.65 GiB); 0: hbm_gb. What the program may allocate is this
    # less the runtime's own share (``asap.cost.device_memory``: the stack's fixed allowance) and a --memory-margin.
    hbm_total_gb: float = 0.0
    # the host side (``asap.cost.offload``): the device's link to host memory per direction (PCIe Gen4 x16 32
    # GB/s, Gen5 x16 64 GB/s, NVLink-C2C on Grace superchips) and its share of the host's DRAM bandwidth
    host_link_gbps: float = 32.0
    host_mem_gbps: float = 50.0
    host_mem_capacity_gb: float = 128.0  # the device's share of its host's memory (a 1 TB host of 8 devices)
    # the matrix unit's width a GEMM dimension pads to (a TPU's MXU: 128 before Trillium, 256 from it); 0: the
    # family's ``matrix_unit_dim``
    matrix_unit_dim: int = 0

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
        # the cost model's constants: every catalog and custom part has a family (``__post_init__``); only the
        # roofline-only parts of asap.profile.devices have none, and the cost model never prices them
        assert self.efficiency is not None, f"{self.name}: no cost-model family '{self.family}'"
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
        # Meta's custom H100 SXM (Grand Teton, on which torchtitan's published benchmarks ran): 96 GB of HBM2e at
        # 2.4 TB/s and a 500 W default power limit (torchtitan docs/performance.md); "the actual peak TFLOPs should
        # be between SXM and NVL" (TorchTitan, arXiv:2410.06511). Its peak is the H100 datasheet's two board-power
        # points interpolated at 500 W: NVL 835 TF dense bf16 at 400 W, SXM 989 TF at 700 W -> 835 + 100/300 x 154
        # = 886 TF (fp8 twice that). A cluster naming h100-sxm with hbm_gb: 96 is this part (MEMORY_VARIANTS).
        _acc(name="h100-sxm-96gb", family="hopper", peak_tflops={"bf16": 886, "fp16": 886, "fp8": 1772}, hbm_gb=96,
             hbm_gbps=2400, intra_node_gbps=450, inter_node_gbps=50, devices_per_node=8, scale_up_domain=8,
             host_mem_capacity_gb=256, host_link_gbps=64, host_mem_gbps=77,
             source="torchtitan docs/performance.md (96 GB HBM2e, 2.4 TB/s, 500 W); arXiv:2410.06511; H100 datasheet"),
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
        # 72-GPU NVLink domain of 18 trays of 4. 1400 W per GPU against GB200's 1200 W, twice its SFU rate
        # (families.ultra_variant).
        _acc(name="gb300", family="blackwell", peak_tflops={"bf16": 2500, "fp16": 2500, "fp8": 5000, "fp4": 15000}, hbm_gb=288,
             hbm_gbps=8000, intra_node_gbps=900, inter_node_gbps=100, devices_per_node=4, scale_up_domain=72,
             host_mem_capacity_gb=240, host_link_gbps=225, host_mem_gbps=256,
             efficiency=ultra_variant(FAMILIES["blackwell"], board_power_w=1400, sibling_board_power_w=1200,
                                      fp4_peak_gain=15000 / 10000),  # GB300 over GB200 NVL72 dense NVFP4
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
        # HBM3E at 8 TB/s, NVLink5 1.8 TB/s bidirectional, ConnectX-8 800 Gb/s per GPU; 1100 W against B200's
        # 1000 W, twice its SFU rate (families.ultra_variant).
        _acc(name="b300", family="blackwell", peak_tflops={"bf16": 2250, "fp16": 2250, "fp8": 4500, "fp4": 13500},
             hbm_gb=288, hbm_gbps=8000, intra_node_gbps=900, inter_node_gbps=100, devices_per_node=8,
             scale_up_domain=8, host_mem_capacity_gb=512, host_link_gbps=64, host_mem_gbps=90,
             efficiency=ultra_variant(FAMILIES["blackwell"], board_power_w=1100, sibling_board_power_w=1000,
                                      fp4_peak_gain=13500 / 9000),  # HGX B300 over HGX B200 dense NVFP4
             source="NVIDIA HGX B300 / Blackwell Ultra datasheet"),
        # TPUs (Google Cloud TPU system architecture docs; 'How to Scale Your Model' (JAX scaling book) table of
        # TPU specs): ICI link bandwidth one-way per link. A TPU VM host holds 4 chips (devices_per_node); an
        # ICI slice spans hosts up to the generation's pod (scale_up_domain: v4 4096, v5p 8960, v5e and v6e
        # 256 chips); slices of a multislice job talk over DCN.
        # The per-device ICI figure below is one-way bandwidth of the links of one torus axis in both ring
        # directions (2 links); DCN per chip is the host NIC share.
        _acc(name="tpu-v4", family="tpu", peak_tflops={"bf16": 275, "fp16": 275}, hbm_gb=32, hbm_gbps=1200,
             intra_node_gbps=90, inter_node_gbps=6.25, devices_per_node=4, scale_up_domain=4096,
             matrix_unit_dim=128, interconnect="ici", torus_dims=3, host_mem_capacity_gb=100,
             source="Google Cloud TPU v4 docs (a VM of 4 chips: 407 GB RAM); JAX scaling book (ICI 4.5e10 B/s "
                    "one-way per link)"),
        _acc(name="tpu-v5e", family="tpu", peak_tflops={"bf16": 197, "fp16": 197}, hbm_gb=16, hbm_gbps=819,
             intra_node_gbps=90, inter_node_gbps=3.125, devices_per_node=4, scale_up_domain=256,
             matrix_unit_dim=128, interconnect="ici", torus_dims=2, host_mem_capacity_gb=64,
             source="Google Cloud TPU v5e docs (DRAM per host 512 GiB, 8 chips per host; 2 x 100 Gbps NICs per "
                    "host, 6.4 Tbps DCN per 256-chip pod: 25 Gbps per chip); JAX scaling book (ICI 4.5e10 B/s "
                    "one-way per link)"),
        _acc(name="tpu-v5p", family="tpu", peak_tflops={"bf16": 459, "fp16": 459}, hbm_gb=95, hbm_gbps=2765,
             intra_node_gbps=180, inter_node_gbps=12.5, devices_per_node=4, scale_up_domain=8960,
             matrix_unit_dim=128, interconnect="ici", torus_dims=3, host_mem_capacity_gb=112,
             source="Google Cloud TPU v5p docs (a VM of 4 chips: 448 GB RAM); JAX scaling book (ICI 9e10 B/s "
                    "one-way per link)"),
        _acc(name="tpu-v6e", family="tpu", peak_tflops={"bf16": 918, "fp16": 918}, hbm_gb=32, hbm_gbps=1640,
             intra_node_gbps=180, inter_node_gbps=12.5, devices_per_node=4, scale_up_domain=256,
             interconnect="ici", torus_dims=2, host_mem_capacity_gb=192,
             source="Google Cloud TPU v6e (Trillium) docs (DRAM per host 1536 GiB, 8 chips per host); JAX scaling "
                    "book (ICI 9e10 B/s one-way per link)"),
        # TPU7x (Ironwood; Google Cloud TPU7x docs): 4614 TF fp8 and 2307 TF bf16, 192 GB HBM3E at 7.37 TB/s per chip,
        # and two TensorCore dies per chip that JAX addresses as two devices: per device half of each (bf16 1153,
        # fp8 2307, 96 GB at 3.69 TB/s); 1.2 TB/s ICI per chip over a 3D torus (~100 GB/s one-way per link, an
        # axis's two directions per device as below); 4 chips (8 devices) per host; 9216-chip pods.
        _acc(name="tpu7x", family="tpu", peak_tflops={"bf16": 1153, "fp16": 1153, "fp8": 2307}, hbm_gb=96,
             hbm_gbps=3690, intra_node_gbps=100, inter_node_gbps=12.5, devices_per_node=8, scale_up_domain=18432,
             interconnect="ici", torus_dims=3,
             source="Google Cloud TPU7x (Ironwood) docs: two devices per chip"),
        # Huawei Ascend 910B. Peaks are the Cube (matrix-unit) peaks, the figure GEMMs and MFU are measured
        # against: AI cores x 16x16x16 MACs x 2 x 1.8 GHz. Huawei's torchtitan-npu (torchtitan-npu/torchtitan-npu,
        # torchtitan_npu/patches/tools/metrics.py, ``_patched_get_peak_flops``: "MFU uses the BF16 Cube peak")
        # lists 910B1 373.88 TF (total 400), 910B2 353.89 (24 cores; total 376), 910B3 294.91 (20 cores; total
        # 313), 910B4 245.76 (total 280); the totals that spec sheets quote add the vector units. The runs
        # published as "910B" are MindSpeed-LLM's on Atlas 900 A2 PoDc, whose own MFU chart (README at 1ea39226,
        # sources/images/linearity&mfu.png: GPT-3 175B, 7968 NPUs at ~1420 PFLOPS and MFU 0.505; 4096 at ~727
        # and 0.503) implies 353 TF per NPU: the 910B2, so ``ascend-910b`` is that bin. 64 GB HBM2e at 1.6 TB/s;
        # HCCS 7 links x 56 GB/s = 392 GB/s bidirectional (196 per direction); 200 Gb/s RoCE per NPU.
        _acc(name="ascend-910b", family="ascend", peak_tflops={"bf16": 353.9, "fp16": 353.9}, hbm_gb=64,
             hbm_gbps=1600, intra_node_gbps=196, inter_node_gbps=25, devices_per_node=8, scale_up_domain=8,
             interconnect="hccs",
             host_link_gbps=64, host_mem_gbps=102,  # PCIe Gen5 x16; 4 Kunpeng 920, 8 x DDR4-3200 each
             source="Huawei torchtitan-npu Cube peaks (910B2); MindSpeed-LLM README MFU chart (Atlas 900 A2 PoDc); "
                    "Atlas 800T A2 datasheet"),
        # the 910B bins by name, Cube peaks as above: 910B3 294.9 TF (313 total), 910B2 353.9 (376 total),
        # both 64 GB HBM2e at 1.6 TB/s on the same HCCS
        _acc(name="ascend-910b3", family="ascend", peak_tflops={"bf16": 294.9, "fp16": 294.9}, hbm_gb=64,
             hbm_gbps=1600, intra_node_gbps=196, inter_node_gbps=25, devices_per_node=8, scale_up_domain=8,
             interconnect="hccs", host_link_gbps=64, host_mem_gbps=102,
             source="Ascend 910B3: Huawei torchtitan-npu Cube peak (313 TF total)"),
        _acc(name="ascend-910b2", family="ascend", peak_tflops={"bf16": 353.9, "fp16": 353.9}, hbm_gb=64,
             hbm_gbps=1600, intra_node_gbps=196, inter_node_gbps=25, devices_per_node=8, scale_up_domain=8,
             interconnect="hccs", host_link_gbps=64, host_mem_gbps=102,
             source="Ascend 910B2: Huawei torchtitan-npu Cube peak (376 TF total)"),
        # Huawei Ascend 910C, per die: the package holds two 910B-class dies that CANN addresses as two devices
        # (HCCL ranks; CloudMatrix-Infer's EP320 places one expert per die on 160 NPUs). The CloudMatrix384
        # paper (Zuo et al. 2025, arXiv:2506.12708, sec. 3: 752 TF dense bf16/fp16, 128 GB on-package at 3.2
        # TB/s per package) gives per die 376 TF, 64 GB at 1.6 TB/s; 376 is the die's total (Cube + vector),
        # its Cube peak 353.9 TF (Huawei torchtitan-npu's "Ascend910_9392", as the 910B2 above); the Unified Bus
        # plane 392 GB/s per NPU per direction (196 per die, each die's UB links into the two-tier non-blocking UB switch fabric that
        # joins 384 NPUs, 768 dies, in one supernode); the RDMA (RoCE) plane 400 Gb/s per NPU between
        # supernodes (25 GB/s per die). A server holds 8 NPUs (16 dies) and 4 Kunpeng CPUs, which the NPUs reach
        # over the UB at ~160 GB/s per CPU (40 GB/s per die); 4 Kunpeng 920 x 8 DDR4-3200 channels over 16 dies.
        _acc(name="ascend-910c", family="ascend", peak_tflops={"bf16": 353.9, "fp16": 353.9}, hbm_gb=64, hbm_gbps=1600,
             intra_node_gbps=196, inter_node_gbps=25, devices_per_node=16, scale_up_domain=768, interconnect="ub",
             host_link_gbps=40, host_mem_gbps=51,
             source="Huawei CloudMatrix384 paper (arXiv:2506.12708), per die: two devices per 910C"),
        # This machine, for real runs: 2 x86 cores with AVX2 FMA at ~3 GHz ~ 2 x 32 fp32 FLOP/cycle x 3e9
        # ~ 0.2 TF fp32 (bf16 is emulated on CPUs, so no faster); DRAM stream ~20 GB/s; gloo over loopback,
        # which every process on the machine shares (scale_up_domain 1024 bounds any local run).
        _acc(name="local-cpu", family="cpu", peak_tflops={"fp32": 0.2, "bf16": 0.2, "fp16": 0.2}, hbm_gb=24,
             hbm_gbps=20, intra_node_gbps=5, inter_node_gbps=1, devices_per_node=8, scale_up_domain=1024,
             interconnect="loopback",
             source="nominal figures for a 2-core x86 host; asap.profile measures the real ridge point"),
    ]
}

# A catalog part given another memory size (a cluster's ``hbm_gb``) that its vendor sold as a distinct part with
# other figures is that part: (catalog name, GB) -> the variant's catalog name.
MEMORY_VARIANTS: dict[tuple[str, float], str] = {("h100-sxm", 96.0): "h100-sxm-96gb"}


def get_accelerator(name: str) -> Accelerator:
    key = str(name).lower().strip()
    if key not in CATALOG:
        raise AsapError("cluster.accelerator", f"unknown accelerator '{name}' (known: {', '.join(CATALOG)})")
    return CATALOG[key]
