"""Kernel rates measured on whatever device this runs on: dense GEMMs (bf16, and fp8 where the device has
``torch._scaled_mm``) over (M, N, K), fused attention (``F.scaled_dot_product_attention``) over sequence length,
head dimension and causality, and streaming bandwidth (a device-to-device copy), written as a table that the cost
model reads (``asap.spec.kernel_table``; the constants by ``asap.cost.kernel_rates``) with its provenance: the
device's name, the driver, the date, the torch version.

    PYTHONPATH=src .venv/bin/python benchmarks/kernels.py [--accelerator NAME] [--quick] [--out FILE]

``--accelerator``: the catalog part the device is (default: guessed from the device's name; ``local-cpu`` on a
CPU); the table's ``efficiency`` is each measured rate over that part's catalog peak and the cost model's shape
curve at the measured shape. Committed as ``src/asap/data/kernels/<NAME>.json`` it applies to every cluster of
that part; a cluster file names another with ``kernel_table: FILE``. Each figure is the median of ``--reps``
timed runs after warm-up (CUDA events on a GPU, the wall clock on a CPU). FLOPs: 2 M N K per GEMM; attention
forward 4 b h s^2 d, half of it causal.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from asap.cost.kernel_rates import measured_constants
from asap.spec.catalog import get_accelerator

GEMM_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096), (4096, 4096, 14336), (16384, 8192, 8192)]
QUICK_GEMM_SHAPES = [(128, 128, 128), (256, 256, 256)]
ATTENTION = [(s, d, c) for s in (2048, 4096, 8192, 16384) for d in (64, 128) for c in (True, False)]
QUICK_ATTENTION = [(s, d, c) for s in (128, 256) for d in (64, 128) for c in (True, False)]
STREAM_BYTES = 2 ** 30
QUICK_STREAM_BYTES = 2 ** 24
# device-name fragments -> catalog parts (first match wins; longer names first)
NAME_TO_ACCELERATOR = (("GB300", "gb300"), ("GB200", "gb200"), ("B300", "b300"), ("B200", "b200"),
                       ("H200", "h200"), ("H100", "h100-sxm"), ("H800", "h800"), ("A100", "a100-80gb"),
                       ("MI355", "mi355x"), ("MI350", "mi350x"), ("MI300", "mi300x"))


def device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def provenance(dev: torch.device) -> dict:
    """The device's name, its driver and the date (UTC), with torch's version."""
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30).stdout.split("\n")[0].strip()
        except (OSError, subprocess.TimeoutExpired):
            driver = ""
        driver = f"driver {driver or 'unknown'}, CUDA {torch.version.cuda}"
    else:
        name = cpu_name()
        driver = f"{platform.system()} {platform.release()}, {torch.get_num_threads()} threads"
    return {"device": name, "driver": driver, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "torch": torch.__version__}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def guess_accelerator(dev: torch.device, name: str) -> str:
    if dev.type != "cuda":
        return "local-cpu"
    for fragment, acc in NAME_TO_ACCELERATOR:
        if fragment in name.upper():
            return acc
    raise SystemExit(f"--accelerator: no catalog part matches the device '{name}'; name one (asap presets)")


def timed_s(fn, dev: torch.device, reps: int) -> float:
    """The median seconds of ``fn`` over ``reps`` runs, after two warm-up runs."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(reps):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gemm_rows(dev: torch.device, shapes, reps: int) -> list[dict]:
    rows = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        s = timed_s(lambda: a @ b, dev, reps)  # noqa: B023 - timed at once
        rows.append({"dtype": "bf16", "m": m, "n": n, "k": k, "s": s, "tflops": 2.0 * m * n * k / s / 1e12})
        fp8 = fp8_gemm(a, b) if dev.type == "cuda" else None
        if fp8 is not None:
            s = timed_s(fp8, dev, reps)
            rows.append({"dtype": "fp8", "m": m, "n": n, "k": k, "s": s, "tflops": 2.0 * m * n * k / s / 1e12})
    return rows


def fp8_gemm(a: torch.Tensor, b: torch.Tensor):
    """An e4m3 GEMM through ``torch._scaled_mm`` (tensorwise scales), or None where the device has none."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return None
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major second operand
    one = torch.ones((), device=a.device)
    try:
        torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, TypeError):
        return None
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def attention_rows(dev: torch.device, cases, reps: int, tokens: int) -> list[dict]:
    """Forward attention at ``tokens`` tokens per call (batch = tokens / s), 2048 / d heads of head dim d."""
    rows = []
    for s, d, causal in cases:
        b, h = max(1, tokens // s), max(1, 2048 // d)
        q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
        t = timed_s(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), dev, reps)  # noqa: B023
        flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
        rows.append({"seq": s, "head_dim": d, "causal": causal, "batch": b, "heads": h, "s": t,
                     "tflops": flops / t / 1e12})
    return rows


def stream_row(dev: torch.device, nbytes: int, reps: int) -> dict:
    """A copy of ``nbytes``: read once, written once."""
    x = torch.empty(nbytes // 4, device=dev, dtype=torch.float32).fill_(1.0)
    y = torch.empty_like(x)
    s = timed_s(lambda: y.copy_(x), dev, reps)
    return {"bytes": 2 * nbytes, "s": s, "gbps": 2 * nbytes / s / 1e9}


def measure(accelerator: str | None, quick: bool, reps: int) -> dict:
    dev = device()
    table = provenance(dev)
    table["accelerator"] = accelerator or guess_accelerator(dev, table["device"])
    acc = get_accelerator(table["accelerator"])
    table["gemm"] = gemm_rows(dev, QUICK_GEMM_SHAPES if quick else GEMM_SHAPES, reps)
    table["attention"] = attention_rows(dev, QUICK_ATTENTION if quick else ATTENTION, reps,
                                        1024 if quick else 32768)
    table["stream"] = stream_row(dev, QUICK_STREAM_BYTES if quick else STREAM_BYTES, reps)
    table["efficiency"] = measured_constants(acc, table)
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accelerator", help="the catalog part this device is (default: from its name)")
    ap.add_argument("--quick", action="store_true", help="small shapes (a CPU check, seconds)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", help="the table's path (default: kernels-<accelerator>.json)")
    a = ap.parse_args(argv)
    table = measure(a.accelerator, a.quick, a.reps)
    out = Path(a.out or f"kernels-{table['accelerator']}.json")
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{table['device']} ({table['driver']}), {table['date']}: {out}")
    for r in table["gemm"]:
        print(f"  gemm {r['dtype']:4s} {r['m']:6d} x {r['n']:6d} x {r['k']:6d}  {r['tflops']:10.4g} TFLOP/s")
    for r in table["attention"]:
        print(f"  attention s {r['seq']:6d} d {r['head_dim']:4d} {'causal' if r['causal'] else 'full  '}"
              f"  {r['tflops']:10.4g} TFLOP/s")
    print(f"  stream {table['stream']['gbps']:.1f} GB/s")
    print("  constants: " + ", ".join(f"{k} {v:.4g}" for k, v in table["efficiency"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
