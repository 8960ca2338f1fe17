"""Which accelerator a trace ran on, and its roofline (peak FLOP/s per precision, memory bytes/s).

The ridge point -- peak FLOP/s over memory bandwidth -- splits operators into compute-bound (arithmetic
intensity above it) and memory-bound (below). GPU figures come from ``asap.spec.hardware``'s catalog; the
GPU is recognised from the ``deviceProperties`` Kineto writes. For this machine's CPU (``local-cpu``) the
nominal figures would mislead, so the ridge point is measured: a float32 numpy matrix product for FLOP/s and
a large array copy for bytes/s, cached per host.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from asap.errors import AsapError
from asap.spec.hardware import CATALOG, Accelerator, get_accelerator


@dataclass(frozen=True)
class Roofline:
    accelerator: str
    peak_flops: dict[str, float]  # FLOP/s by precision (fp32, bf16, fp16, fp8)
    bytes_per_s: float
    source: str

    def peak(self, precision: str | None) -> float:
        p = (precision or "bf16").lower()
        if p in self.peak_flops:
            return self.peak_flops[p]
        if p == "fp8":
            return self.peak_flops.get("fp16", self.peak_flops.get("bf16", max(self.peak_flops.values())))
        return self.peak_flops.get("bf16", max(self.peak_flops.values()))

    def ridge(self, precision: str | None) -> float:
        """FLOPs per byte above which an op is compute-bound."""
        return self.peak(precision) / self.bytes_per_s

    def to_dict(self) -> dict:
        return {"accelerator": self.accelerator, "peak_tflops": {k: v / 1e12 for k, v in self.peak_flops.items()},
                "memory_gbps": self.bytes_per_s / 1e9,
                "ridge_flops_per_byte": {k: v / self.bytes_per_s for k, v in self.peak_flops.items()},
                "source": self.source}


# Devices met in real traces that the cost model's catalog does not list (kept here, with their sources,
# so that their traces still get a roofline).
EXTRA_DEVICES: dict[str, Accelerator] = {
    # NVIDIA V100 SXM2 datasheet: 125 TF fp16 tensor, 15.7 TF fp32, 900 GB/s HBM2.
    "v100": Accelerator(name="v100", family="nvidia", peak_tflops={"fp16": 125, "bf16": 125, "fp32": 15.7},
                        hbm_gb=32, hbm_gbps=900, intra_node_gbps=150, inter_node_gbps=12.5, devices_per_node=8,
                        source="NVIDIA V100 datasheet"),
    # AMD Instinct MI250 datasheet: 362 TF bf16/fp16 and 3.2 TB/s per OAM of two GCDs; PyTorch sees one GCD
    # (64 GB) as a device, so half of each.
    "mi250": Accelerator(name="mi250", family="amd", peak_tflops={"fp16": 181, "bf16": 181, "fp32": 45.3},
                         hbm_gb=64, hbm_gbps=1600, intra_node_gbps=200, inter_node_gbps=25, devices_per_node=8,
                         interconnect="xgmi", source="AMD Instinct MI250 datasheet (per GCD)"),
}

# (pattern on the device name, catalog name); the first match wins
_GPU_NAMES: list[tuple[str, str]] = [
    (r"GB300|B300", "gb300"), (r"GB200", "gb200"), (r"B200", "b200"), (r"H200", "h200"), (r"H800", "h800"),
    (r"H100|GH200", "h100-sxm"), (r"MI300", "mi300x"), (r"MI250|MI210", "mi250"), (r"V100", "v100"),
    (r"910C", "ascend-910c"), (r"910B", "ascend-910b"),
    (r"TPU v6|v6e|Trillium", "tpu-v6e"), (r"TPU v5p|v5p", "tpu-v5p"), (r"TPU v5 ?lite|v5e", "tpu-v5e"),
    (r"TPU v4", "tpu-v4"),
]


def lookup(name: str) -> Accelerator:
    """A catalog accelerator or one of EXTRA_DEVICES, by name."""
    key = str(name).lower().strip()
    if key in EXTRA_DEVICES:
        return EXTRA_DEVICES[key]
    if key not in CATALOG:
        known = ", ".join(list(CATALOG) + list(EXTRA_DEVICES))
        raise AsapError("accelerator", f"unknown accelerator '{name}' (known: {known})")
    return get_accelerator(key)


def infer_accelerator(device_kind: str, device_name: str | None, memory_bytes: float | None) -> tuple[str, str | None]:
    """The catalog name for a trace's device, and a note when it had to be guessed."""
    if device_kind == "cpu":
        return "local-cpu", None
    text = device_name or ""
    if re.search(r"A100", text):
        return ("a100-80gb" if (memory_bytes or 0) > 50e9 else "a100-40gb"), None
    for pattern, name in _GPU_NAMES:
        if re.search(pattern, text, re.IGNORECASE):
            return name, None
    # ROCm reports MI2xx parts as 'AMD Radeon Graphics'; a 64 GB device with gfx9 compute is an MI250 GCD
    if "AMD" in text and memory_bytes and 60e9 < memory_bytes < 70e9:
        return "mi250", f"device '{text}' with {memory_bytes / 2**30:.0f} GiB taken as an MI250 GCD"
    fallback = "tpu-v5p" if device_kind == "tpu" else "h100-sxm"
    return fallback, (f"device '{text or device_kind}' not recognised: roofline of {fallback}; "
                      "pass --accelerator to set it")


def roofline_for(accelerator: str | Accelerator) -> Roofline:
    """Peak FLOP/s and memory bandwidth of an accelerator, by name (the catalog, EXTRA_DEVICES) or the object
    itself (a cluster file's custom or calibrated part keeps its own figures); measured for local-cpu, whose
    nominal figures would mislead."""
    name = accelerator if isinstance(accelerator, str) else accelerator.name
    if name == "local-cpu":
        return measured_cpu_roofline()
    acc = lookup(accelerator) if isinstance(accelerator, str) else accelerator
    peaks = {p: v * 1e12 for p, v in acc.peak_tflops.items() if v}
    peaks.setdefault("fp32", peaks.get("bf16", max(peaks.values())) / 2)
    return Roofline(acc.name, peaks, acc.hbm_gbps * 1e9, acc.source)


# ----------------------------------------------------------------------------------------------------------
# The measured CPU roofline
# ----------------------------------------------------------------------------------------------------------


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "asap" / "cpu_roofline.json"


def _host_key() -> str:
    return f"{platform.node()}|{platform.machine()}|{os.cpu_count()}|numpy {np.__version__}|cpu-time"


# Both rates are timed in this process's CPU seconds (time.process_time, summed over its threads), not wall
# seconds: other processes' load on a shared host takes wall time from the measurement but not CPU time, so a
# loaded host no longer measures a low peak (a ridge of 3.4 FLOP/B on this 2-core EPYC under load, against about
# 8 FLOP/B unloaded, which called 4 FLOP/B GEMMs compute-bound).


def _measure_matmul_flops(n: int = 1536, repeats: int = 5) -> float:
    """The device's float32 matmul FLOP/s: one core's rate (FLOPs per CPU second) times the cores."""
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up: BLAS threads, page faults
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        a @ b
        best = min(best, max(time.process_time() - t, 1e-9))
    return 2.0 * n**3 / best * (os.cpu_count() or 1)


def _measure_copy_bytes_per_s(megabytes: int = 64, repeats: int = 5) -> float:
    """One thread's copy bandwidth (read + write bytes per CPU second: memory stalls count as CPU time)."""
    src = np.ones(megabytes * 2**20 // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        np.copyto(dst, src)
        best = min(best, max(time.process_time() - t, 1e-9))
    return 2.0 * src.nbytes / best  # read + write


def measured_cpu_roofline(use_cache: bool = True) -> Roofline:
    """This host's float32 matmul FLOP/s and copy bytes/s (best of five; about a second, then cached per host)."""
    path = _cache_file()
    key = _host_key()
    if use_cache:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # no cache, or a bad one: measure
            cached = json.loads(path.read_text())
            if cached.get("host") == key:
                return Roofline("local-cpu", {"fp32": cached["flops"], "bf16": cached["flops"], "fp16": cached["flops"]},
                                cached["bytes_per_s"], f"measured on this host ({cached['when']}), cached")
    flops = _measure_matmul_flops()
    bw = _measure_copy_bytes_per_s()
    when = time.strftime("%Y-%m-%d %H:%M")
    if use_cache:
        with contextlib.suppress(OSError):  # a read-only home only costs the next run a measurement
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"host": key, "flops": flops, "bytes_per_s": bw, "when": when}))
    return Roofline("local-cpu", {"fp32": flops, "bf16": flops, "fp16": flops}, bw,
                    f"measured on this host ({when}): numpy float32 matmul and array copy")
