"""Error bands per prediction: how far this estimate may be off, from how well its terms are calibrated.

The held-out residuals (``benchmarks/loso.py --write``: leave-one-source-out fits on the calibration runs,
``asap/data/error_bands.json``) give each accelerator family a typical relative error u, its held-out MAPE.
That error was measured on runs dominated by compute; the terms a prediction leans on are not all as well
known. Each exposed term k of the step carries a weight w_k (``TERM_WEIGHT``: 1 for what the calibration runs
pin down, GEMMs and attention, the pipeline bubble's closed form, the optimizer's streaming; more for terms
whose figures come from datasheets and documented semantics rather than fitted runs: collectives 1.5, MoE
dispatch and host time 2), and the band's relative half-width is

    r = u * sum_k w_k * exposed_k / step                 (capped at MAX_RELATIVE)

u is at least the pooled held-out MAPE where the family has fewer than three held-out runs, the pooled MAPE
times ``EXTRAPOLATED`` where the family has no calibration runs, and again that factor
where the run's precision has none in the family (fp4 anywhere; fp8 on a family calibrated in bf16): the term
is extrapolated. The band is [step / (1 + r), step / (1 - r)]: a prediction off by e means the true step is
step / (1 + e).

Two predictions of the same model share most of their error (same GEMM efficiency, same links), so whether
one strategy beats another is decided by the terms in which they differ: they are a tie when the faster one's
margin is within u * sum_k w_k |exposed_k(a) - exposed_k(b)| (``indistinguishable``), what ``plan`` marks
``tie_with_best`` and ``compare`` calls "within the model's error band".
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Mapping

TERM_WEIGHT = {"compute": 1.0, "bubble": 1.0, "optimizer": 1.0, "tp_comm": 1.5, "cp_comm": 1.5, "pp_comm": 1.5,
               "dp_comm": 1.5, "ep_comm": 2.0, "host": 2.0}
EXTRAPOLATED = 1.5  # a family without calibration runs, or a precision the family's runs never used
MAX_RELATIVE = 0.6
# the shipped case files (asap.validate.PACKAGED_FILES): the calibration set, then the 2024-2026 published runs
CASE_FILES = ("calibration_runs.json", "published_runs_2024_2026.json")
MIN_RUNS = 3  # as benchmarks/loso.py: fewer held-out runs than this take the pooled figure


@lru_cache(maxsize=1)
def error_bands() -> dict:
    """The held-out residuals per family (``benchmarks/loso.py --write``)."""
    return json.loads(resources.files("asap").joinpath("data/error_bands.json").read_text())


@lru_cache(maxsize=1)
def calibrated_precisions() -> dict[str, frozenset[str]]:
    """The precisions the shipped calibration runs (both files, ``asap.validate.PACKAGED_FILES``) used, per
    accelerator family."""
    from asap.spec.hardware import get_accelerator

    runs = [case for name in CASE_FILES
            for case in json.loads(resources.files("asap").joinpath(f"data/{name}").read_text())]
    out: dict[str, set[str]] = {}
    for case in runs:
        acc = case["cluster"]["accelerator"]
        family = get_accelerator(acc).family if isinstance(acc, str) else acc.get("family", "")
        out.setdefault(family, set()).add(case["train"].get("precision", "bf16"))
    return {k: frozenset(v) for k, v in out.items()}


def relative_error_scale(family: str, precision: str) -> float:
    """u: the family's held-out MAPE, widened where the family or the precision has no calibration run."""
    bands = error_bands()["families"]
    n = sum(b["n"] for b in bands.values())
    pooled = sum(b["held_out_mape"] * b["n"] for b in bands.values()) / max(n, 1)
    if family in bands:  # a family with fewer than MIN_RUNS held-out runs says little: at least the pooled MAPE
        b = bands[family]
        u = b["held_out_mape"] if b["n"] >= MIN_RUNS else max(b["held_out_mape"], pooled)
    else:
        u = EXTRAPOLATED * pooled
    if precision not in calibrated_precisions().get(family, frozenset()):
        u *= EXTRAPOLATED
    return u


def relative_half_width(exposed_s: Mapping[str, float], step_s: float, scale: float) -> float:
    weighted = sum(TERM_WEIGHT.get(k, 2.0) * max(v, 0.0) for k, v in exposed_s.items())
    return min(scale * weighted / max(step_s, 1e-30), MAX_RELATIVE)


def prediction_band(step_s: float, exposed_s: Mapping[str, float], scale: float) -> tuple[float, float]:
    """[low, high] step times for this prediction (module docstring)."""
    r = relative_half_width(exposed_s, step_s, scale)
    return step_s / (1.0 + r), step_s / (1.0 - r)


def difference_uncertainty_s(a_exposed: Mapping[str, float], b_exposed: Mapping[str, float], scale: float) -> float:
    """How far the difference between two predictions may be off: the weighted terms in which they differ."""
    keys = set(a_exposed) | set(b_exposed)
    return scale * sum(TERM_WEIGHT.get(k, 2.0) * abs(a_exposed.get(k, 0.0) - b_exposed.get(k, 0.0)) for k in keys)


def indistinguishable(a, b) -> bool:
    """Whether two estimates (``Estimate``) are a tie the model cannot break."""
    scale = max(a.error_scale, b.error_scale)
    return abs(a.step_time_s - b.step_time_s) <= difference_uncertainty_s(a.exposed_s, b.exposed_s, scale)
