"""Kernel rates measured by ``benchmarks/kernels.py`` turned into efficiency constants (``asap.spec.kernel_table``
reads them): each measured rate over the catalog peak and over ``asap.cost.roofline``'s shape curve at the
measured shape, so the cost model reproduces the measurement there and its curves carry it to other shapes.

    gemm_efficiency      = rate(bf16 GEMM) / (bf16 peak x shape(M, N, K))      the largest bf16 shape
    fp8_gemm_efficiency  = rate(fp8 GEMM)  / (fp8 peak  x shape(M, N, K))      the largest fp8 shape
    attention_efficiency = rate(attention) / (bf16 peak x attention_shape(d, L)) head dim 128, causal, the longest
                                                                                 sequence, L = s / 2 keys per query
    hbm_efficiency       = streaming bytes/s / HBM peak
each at most 1.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from asap.cost.roofline import attention_shape_factor, gemm_efficiency
from asap.spec.families import REFERENCE_HEAD_DIM
from asap.spec.hardware import Accelerator


def _largest(rows: list[dict], **match) -> dict | None:
    rows = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    if not rows:
        return None
    return max(rows, key=lambda r: (r.get("m", 0) * r.get("n", 0) * r.get("k", 0), r.get("seq", 0)))


def measured_constants(acc: Accelerator, table: dict[str, Any]) -> dict[str, float]:
    """The constants the table's rows measure on ``acc`` (module docstring), each at most 1."""
    fam = acc.family_constants
    peak = acc.peak_flops
    values: dict[str, float] = {}
    unit = replace(acc, efficiency=replace(fam, gemm_efficiency=1.0))
    for dtype, key in (("bf16", "gemm_efficiency"), ("fp8", "fp8_gemm_efficiency")):
        row = _largest(table["gemm"], dtype=dtype)
        if row is not None and (dtype == "bf16" or "fp8" in acc.peak_tflops):
            shape = float(gemm_efficiency(unit, row["m"], row["n"], row["k"]))
            values[key] = min(1.0, row["tflops"] * 1e12 / (peak(dtype) * shape))
    att = _largest([r for r in table["attention"] if r.get("head_dim") == REFERENCE_HEAD_DIM], causal=True)
    if att is not None:
        shape = float(attention_shape_factor(acc, att["head_dim"], att["head_dim"], att["seq"] / 2.0))
        values["attention_efficiency"] = min(1.0, att["tflops"] * 1e12 / (peak("bf16") * shape))
    values["hbm_efficiency"] = min(1.0, table["stream"]["gbps"] / acc.hbm_gbps)
    return values
