"""80% prediction intervals per estimate, from the held-out residuals of comparable runs; ties from their overlap.

A residual is e = predicted / published - 1 of a run the constants never saw: ``benchmarks/loso.py --write``
refits each accelerator family without one source at a time (a paper, a benchmark table, an MLPerf round) and
predicts that source's runs, over both shipped files (``asap/data/error_bands.json``, ``residuals``: one record
per run with its family, stack, precision and source). A prediction p off by e means the true step is p / (1 + e),
so signed residual quantiles [e_lo, e_hi] give the interval

    [p / (1 + e_hi), p / (1 + e_lo)]                         (asymmetric where the residuals are)

**Comparable runs** (``comparable_residuals``): the shipped runs of the same accelerator family and stack when
there are at least ``MIN_GROUP`` (15) of them, else the family's runs when it has that many, else every run.

**The quantiles** are split-conformal order statistics at ``COVERAGE`` = 0.8: of n sorted residuals, the
floor(0.1 (n + 1))-th smallest and the ceil(0.9 (n + 1))-th (clamped to the first and the last), so a new run
exchangeable with the n falls inside with probability at least 0.8 (Vovk et al. 2005; Lei et al. 2018, JASA
113:1094, the split-conformal interval).

**Not covered**: where the shipped runs do not cover the job, the quantiles are widened about their median m,
e -> m + F (e - m), by factors ``benchmarks/loso.py`` measures (``widening`` in the JSON): F_hardware, the
central-80% spread of the residuals when a whole hardware family is held out (its constants back to the published
figures it had before any fit) over that of the leave-one-source-out residuals, for a family with no shipped run
or a precision class (16-bit, fp8, fp4, fp32) the family's runs never used (its GEMM rate is then a published
figure, as a held-out family's); F_stack, the same ratio for a whole stack held out, for a stack no shipped run
used (``mindspore``, ``asap``'s own trainer). The two multiply.

**Learned runs** (``learned_runs`` n, ``learned_spread`` s: the standard deviation of the relative residuals of
the user's own runs after the learned corrections) narrow the interval toward what those runs show: with
w = n / (n + ``LEARNED_PRIOR_RUNS``) (the shipped residuals count as four runs) and the learned 80% half-width
h = z_0.9 * s * sqrt(1 + 1/n) (z_0.9 = 1.2816; the sqrt: a new run's scatter plus the error of a mean of n),

    e_lo' = (1 - w) e_lo - w h,    e_hi' = (1 - w) e_hi + w h

so one run moves the interval a fifth of the way, eight runs two thirds.

**Ties** (``indistinguishable``): two estimates are alike when their intervals overlap by more than half, the
overlap fraction being |A n B| / min(|A|, |B|), the share of the narrower interval that lies inside the other.
Two rows of one plan share the relative interval [1/(1 + e_hi), 1/(1 + e_lo)], so the fraction depends only on
the ratio of their step times: a slower row is never marked while a faster one is not.

**A move beyond the band** (``beyond_band_of_changed_terms``): a proposal claims that one strategy of a job is
faster than another of the same job. What the two share (every term the move leaves alone, the job's common
scale) errs alike in both and cancels in the claim, so the gain is judged against the error of the terms the move
changes: with c = sum over the exposed terms of |t_k(base) - t_k(move)| (seconds) and the interval's relative
half-width e = (e_hi - e_lo) / 2 (``error_scale``),

    beyond the band  <=>  t(base) - t(move) > e * c

A move that shrinks every term it touches is beyond the band at any gain (its terms would have to err by more
than 100% to reverse it); one that trades terms (more compute for less communication) must save more than the
error of what it trades.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Sequence

COVERAGE = 0.8  # the documented probability that a run's true step lies in step_time_range_s
MIN_GROUP = 15  # fewer comparable runs: the next wider group (8 covered 66% by leave-one-source-out, 15 80%)
LEARNED_PRIOR_RUNS = 4  # the shipped residuals weigh as this many of the user's own runs
Z_HIGH = 1.2816  # the standard normal's 0.9 quantile: an 80% central interval is +-1.2816 sigma
TIE_OVERLAP = 0.5  # two intervals overlapping by more than this fraction of the narrower are a tie
# the shipped case files (asap.validate.PACKAGED_FILES): the calibration set, then the 2024-2026 published runs
CASE_FILES = ("calibration_runs.json", "published_runs_2024_2026.json")
PRECISION_CLASS = {"bf16": "16-bit", "fp16": "16-bit", "fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4",
                   "fp32": "fp32"}


@dataclass(frozen=True)
class ErrorQuantiles:
    """Signed relative-error quantiles of an 80% interval and where they come from."""

    low: float  # e_lo: the prediction may be this far under (negative) ...
    high: float  # e_hi: ... or over the true step
    basis: str  # the comparable runs, e.g. "hopper/megatron (21 runs)"
    runs: int
    widened: tuple[str, ...] = ()  # "hardware" / "stack": what the shipped runs do not cover
    learned_runs: int = 0

    def interval_s(self, step_s: float) -> tuple[float, float]:
        """[step / (1 + e_hi), step / (1 + e_lo)]."""
        return step_s / (1.0 + self.high), step_s / (1.0 + self.low)

    @property
    def relative_half_width(self) -> float:
        return (self.high - self.low) / 2.0


@lru_cache(maxsize=1)
def error_bands() -> dict:
    """The held-out residuals and widening factors (``benchmarks/loso.py --write``)."""
    return json.loads(resources.files("asap").joinpath("data/error_bands.json").read_text())


def precision_class(precision: str) -> str:
    p = precision.lower()
    return PRECISION_CLASS.get(p, p)


def conformal_quantiles(errors: Sequence[float], coverage: float = COVERAGE) -> tuple[float, float]:
    """The split-conformal order statistics of ``errors`` (module docstring): (e_lo, e_hi)."""
    e = sorted(errors)
    n = len(e)
    tail = (1.0 - coverage) / 2.0
    k_lo = min(max(math.floor(tail * (n + 1) + 1e-9), 1), n)  # 1e-9: 0.1 * 20 is 2, not 1.999...
    k_hi = min(max(math.ceil((1.0 - tail) * (n + 1) - 1e-9), 1), n)
    return e[k_lo - 1], e[k_hi - 1]


def comparable_residuals(family: str, stack: str, records: Sequence[dict]) -> tuple[list[float], str]:
    """The residuals of the runs comparable with (family, stack), and a phrase naming them."""
    same_stack = [r["error"] for r in records if r["family"] == family and r["stack"] == stack]
    if len(same_stack) >= MIN_GROUP:
        return same_stack, f"{family}/{stack} ({len(same_stack)} runs)"
    same_family = [r["error"] for r in records if r["family"] == family]
    if len(same_family) >= MIN_GROUP:
        return same_family, f"{family} ({len(same_family)} runs)"
    return [r["error"] for r in records], f"every shipped run ({len(records)})"


def uncovered(family: str, stack: str, precision: str, records: Sequence[dict]) -> tuple[str, ...]:
    """What of (family, precision class, stack) no shipped run used: "hardware" and/or "stack"."""
    cls = precision_class(precision)
    covered = any(r["family"] == family and precision_class(r["precision"]) == cls for r in records)
    out = () if covered else ("hardware",)
    return out + (() if any(r["stack"] == stack for r in records) else ("stack",))


def quantiles_from(family: str, stack: str, precision: str, records: Sequence[dict],
                   widening: dict[str, float]) -> ErrorQuantiles:
    """The 80% quantiles for a job from ``records`` (the shipped residuals, or a subset when a benchmark holds
    some out), widened by ``widening[name]`` for what they do not cover."""
    errors, basis = comparable_residuals(family, stack, records)
    lo, hi = conformal_quantiles(errors)
    widened = uncovered(family, stack, precision, records)
    factor = math.prod(widening[w] for w in widened)
    if factor != 1.0:
        m = sorted(errors)[len(errors) // 2]
        lo, hi = m + factor * (lo - m), m + factor * (hi - m)
    return ErrorQuantiles(max(lo, -0.9), hi, basis, len(errors), widened)


def shrink_to_learned(q: ErrorQuantiles, learned_runs: int, learned_spread: float | None) -> ErrorQuantiles:
    """``q`` narrowed toward the spread of the user's own runs (module docstring's formula)."""
    if learned_runs < 1 or learned_spread is None:
        return q
    w = learned_runs / (learned_runs + LEARNED_PRIOR_RUNS)
    h = Z_HIGH * abs(learned_spread) * math.sqrt(1.0 + 1.0 / learned_runs)
    return ErrorQuantiles((1 - w) * q.low - w * h, (1 - w) * q.high + w * h,
                          f"{q.basis} and {learned_runs} learned runs", q.runs, q.widened, learned_runs)


@lru_cache(maxsize=256)
def error_quantiles(family: str, stack: str, precision: str, *, learned_runs: int = 0,
                    learned_spread: float | None = None) -> ErrorQuantiles:
    """The 80% interval's signed relative-error quantiles for a job of this accelerator family, stack and
    precision: the shipped held-out residuals, narrowed by ``learned_runs`` of the user's own runs whose relative
    residuals (after the learned corrections) have standard deviation ``learned_spread``."""
    bands = error_bands()
    if not bands.get("residuals"):  # benchmarks/loso.py bootstrapping the file: point predictions need none
        return ErrorQuantiles(0.0, 0.0, "no held-out residuals shipped (benchmarks/loso.py --write)", 0)
    widening = {k: float(v["factor"]) for k, v in bands["widening"].items()}
    return shrink_to_learned(quantiles_from(family, stack, precision, bands["residuals"], widening),
                             learned_runs, learned_spread)


def prediction_interval(step_s: float, family: str, stack: str, precision: str, *, learned_runs: int = 0,
                        learned_spread: float | None = None) -> tuple[float, float]:
    """The 80% prediction interval [low, high] of a predicted step of ``step_s`` seconds (module docstring)."""
    return error_quantiles(family, stack, precision, learned_runs=learned_runs,
                           learned_spread=learned_spread).interval_s(step_s)


def changed_terms_error_s(base, move) -> float:
    """e * c of the module docstring: the error (seconds) of the exposed terms ``move`` changes from ``base``."""
    keys = set(base.exposed_s) | set(move.exposed_s)
    changed_s = sum(abs(base.exposed_s.get(k, 0.0) - move.exposed_s.get(k, 0.0)) for k in keys)
    return max(base.error_scale, move.error_scale) * changed_s


def beyond_band_of_changed_terms(base, move) -> bool:
    """Whether ``move``'s gain over ``base`` (two ``Estimate``s of one job) exceeds the error of the exposed terms
    it changes (module docstring)."""
    return base.step_time_s - move.step_time_s > changed_terms_error_s(base, move)


def speedup_interval(base, move) -> tuple[float, float]:
    """The speedup of ``move`` over ``base`` with the step saved anywhere in [gain - e * c, gain + e * c]: its low
    end is above 1 exactly when the move is beyond the band (module docstring)."""
    gain, err = base.step_time_s - move.step_time_s, changed_terms_error_s(base, move)
    step = base.step_time_s
    return step / max(step - gain + err, 1e-12), step / max(step - gain - err, 1e-12)


def overlap_fraction(a: tuple[float, float], b: tuple[float, float]) -> float:
    """|A n B| / min(|A|, |B|): the share of the narrower interval inside the other (1 when one is a point
    inside the other, 0 when they are disjoint)."""
    inter = min(a[1], b[1]) - max(a[0], b[0])
    narrower = min(a[1] - a[0], b[1] - b[0])
    if narrower <= 0.0:
        return 1.0 if inter >= 0.0 else 0.0
    return max(inter, 0.0) / narrower


def indistinguishable(a, b) -> bool:
    """Whether two estimates (``Estimate``) are a tie the model cannot break: their 80% intervals
    (``step_time_range_s``) overlap by more than ``TIE_OVERLAP``."""
    return overlap_fraction(tuple(a.step_time_range_s), tuple(b.step_time_range_s)) > TIE_OVERLAP
