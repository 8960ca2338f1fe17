"""How alike two workloads are (``workload_similarity``), for ``Memory.similar_experiments``."""

from __future__ import annotations

import math
from typing import Any

from asap.memory.records import normalize_workload


def workload_similarity(a: dict, b: dict) -> float:
    """How alike two workloads are, in [0, 1] (see ``Memory.similar_experiments``)."""
    a, b = normalize_workload(a), normalize_workload(b)
    score = 0.0
    fam_a, fam_b = a.get("model_family"), b.get("model_family")
    if fam_a and fam_b:
        score += 0.3 * (fam_a.lower() == fam_b.lower())
    elif a.get("model") and b.get("model"):
        score += 0.3 * (a["model"].lower() == b["model"].lower())
    score += 0.3 * _log_closeness(a.get("params"), b.get("params"), 10.0, 2.0)
    acc_a, acc_b = a.get("accelerator_family"), b.get("accelerator_family")
    if acc_a and acc_b:
        score += 0.2 * (acc_a.lower() == acc_b.lower())
    elif a.get("accelerator") and b.get("accelerator"):
        score += 0.2 * (a["accelerator"].lower() == b["accelerator"].lower())
    score += 0.2 * _log_closeness(a.get("devices"), b.get("devices"), 2.0, 6.0)
    return round(min(1.0, max(0.0, score)), 6)


def _log_closeness(x: Any, y: Any, base: float, span: float) -> float:
    """1 when equal, falling linearly in log_base(x / y) to 0 at ``span``; 0 when either is missing."""
    try:
        x, y = float(x), float(y)
    except (TypeError, ValueError):
        return 0.0
    if not (x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)):
        return 0.0
    return max(0.0, 1.0 - abs(math.log(x / y, base)) / span)
