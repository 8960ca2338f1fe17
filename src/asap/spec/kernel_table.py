"""Measured kernel rates (``benchmarks/kernels.py``): a table's efficiency constants applied to an accelerator.

A table holds, for one device, the measured rates of dense GEMMs per dtype over (M, N, K), of fused attention
over sequence length, head dimension and causality, and the streaming bandwidth, with its provenance (the
device's name, the driver, the date, the torch version). The cost model reads the constants the table measures
and keeps the family's for the rest:

    gemm_efficiency      = rate(bf16 GEMM) / (bf16 peak x shape(M, N, K))      at the largest bf16 shape
    fp8_gemm_efficiency  = rate(fp8 GEMM)  / (fp8 peak  x shape(M, N, K))      at the largest fp8 shape
    attention_efficiency = rate(attention) / (bf16 peak x attention_shape(d, L)) causal, the longest sequence
    hbm_efficiency       = streaming bytes/s / HBM peak

where shape() and attention_shape() are ``asap.cost.roofline``'s curves (so the cost model reproduces the
measured rate at that shape exactly, and its curves carry it to other shapes) and L the causal kernel's mean
keys per query (s / 2). Each constant is capped at 1 (a measurement above the catalog's peak says the peak is
wrong). ``asap.cost.kernel_rates`` derives them when the table is written and stores them as its ``efficiency``
mapping beside the rows (what this module reads, through ``efficiency_from_dict``'s checks). A cluster names a
table with ``kernel_table: FILE``; a table committed as ``asap/data/kernels/<accelerator>.json`` applies to that
catalog part wherever it is used. Where no table exists, the family's constants stay.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from asap.errors import AsapError

TABLE_KEYS = ("device", "driver", "date", "gemm", "attention", "stream", "efficiency")


def load_kernel_table(path: str | Path) -> dict[str, Any]:
    """A table file, checked: its provenance fields and its three sections (one clear line on a bad field)."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except OSError as e:
        raise AsapError("cluster.kernel_table", f"cannot read {p}: {e.strerror}") from None
    except ValueError as e:
        raise AsapError("cluster.kernel_table", f"{p} is not JSON: {e}") from None
    return check_table(d, str(p))


def check_table(d: Any, where: str = "kernel_table") -> dict[str, Any]:
    if not isinstance(d, dict):
        raise AsapError(where, "must be a mapping")
    for k in TABLE_KEYS:
        if k not in d:
            raise AsapError(f"{where}.{k}", "missing")
    for section in ("gemm", "attention"):
        rows = d[section]
        if not isinstance(rows, list):
            raise AsapError(f"{where}.{section}", "must be a list of rows")
        for i, row in enumerate(rows):
            if not isinstance(row, dict) or not _positive(row.get("tflops")):
                raise AsapError(f"{where}.{section}[{i}].tflops", "must be a positive number")
    if not isinstance(d["stream"], dict) or not _positive(d["stream"].get("gbps")):
        raise AsapError(f"{where}.stream.gbps", "must be a positive number")
    if not isinstance(d["efficiency"], dict):
        raise AsapError(f"{where}.efficiency", "must be a mapping of family constants")
    return d


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x) and x > 0


@lru_cache(maxsize=None)
def packaged_table(accelerator: str) -> dict[str, Any] | None:
    """The table committed for a catalog part (``asap/data/kernels/<name>.json``), or None (read once)."""
    f = resources.files("asap.data").joinpath("kernels").joinpath(f"{accelerator}.json")
    if not f.is_file():
        return None
    return check_table(json.loads(f.read_text()), f"asap/data/kernels/{accelerator}.json")
