"""80% prediction intervals from the held-out residuals of comparable runs; ties from their overlap."""

import math

import pytest

from asap.cost.bands import (COVERAGE, LEARNED_PRIOR_RUNS, MIN_GROUP, Z_HIGH, conformal_quantiles, error_bands,
                             error_quantiles, indistinguishable, overlap_fraction, prediction_interval,
                             quantiles_from)
from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec


def _width(lo_hi):
    lo, hi = lo_hi
    return 1 / (1 + lo) - 1 / (1 + hi)


def test_conformal_order_statistics_by_hand():
    """Of 19 residuals the 2nd and the 18th (floor(0.1 * 20), ceil(0.9 * 20)); of 8 the extremes (floor(0.9) = 0
    clamps to the first, ceil(8.1) = 9 to the last)."""
    e = [i / 100 for i in range(-9, 10)]  # -0.09 .. +0.09, 19 values
    assert conformal_quantiles(e) == (-0.08, 0.08)
    assert conformal_quantiles([0.3, -0.2, 0.1, 0.0, 0.05, -0.05, 0.02, -0.1]) == (-0.2, 0.3)
    assert COVERAGE == 0.8


def test_estimate_range_is_the_interval_of_its_family_and_stack():
    """An H100 Megatron run: the interval is the conformal quantiles of the shipped Hopper/Megatron residuals,
    [p / (1 + e_hi), p / (1 + e_lo)], recomputed here from the shipped records."""
    records = error_bands()["residuals"]
    same = [r["error"] for r in records if r["family"] == "hopper" and r["stack"] == "megatron"]
    assert len(same) >= MIN_GROUP
    n = len(same)
    e = sorted(same)
    lo, hi = e[max(math.floor(0.1 * (n + 1)), 1) - 1], e[min(math.ceil(0.9 * (n + 1)), n) - 1]
    job = Job.resolve(load_model("llama3-70b"), load_cluster("h100-sxm", nodes=8), TrainSpec(256, 8192))
    est = estimate(job, "tp=8,pp=2")
    p = est.step_time_s
    assert est.step_time_range_s == pytest.approx((p / (1 + hi), p / (1 + lo)))
    assert est.error_scale == pytest.approx((hi - lo) / 2)
    # the interval is asymmetric where the residuals are, and holds the prediction only if they straddle zero
    assert (est.step_time_range_s[0] <= p <= est.step_time_range_s[1]) == (lo <= 0 <= hi)


def test_a_family_precision_or_stack_the_shipped_runs_do_not_cover_is_wider():
    """CDNA4 has no shipped run (x F_hardware over the pooled residuals); nvfp4 on Blackwell is a precision class
    its runs never used; mindspore a stack none used; bf16 on Ampere is the same 16-bit class as its fp16 runs."""
    bands = error_bands()
    f_hw, f_stack = bands["widening"]["hardware"]["factor"], bands["widening"]["stack"]["factor"]
    assert f_hw >= 1 and f_stack >= 1
    records = bands["residuals"]
    plain = quantiles_from("cdna4", "megatron", "bf16", records, {"hardware": 1.0, "stack": 1.0})
    wide = error_quantiles("cdna4", "megatron", "bf16")
    assert wide.widened == ("hardware",)
    assert wide.high - wide.low == pytest.approx(f_hw * (plain.high - plain.low))
    assert error_quantiles("blackwell", "megatron", "nvfp4").widened == ("hardware",)
    assert error_quantiles("blackwell", "megatron", "fp8").widened == ()
    assert error_quantiles("ascend", "mindspore", "bf16").widened == ("stack",)
    assert error_quantiles("ampere", "megatron", "bf16") == error_quantiles("ampere", "megatron", "fp16")
    if f_hw > 1:
        fp4, fp8 = (error_quantiles("blackwell", "megatron", p) for p in ("nvfp4", "fp8"))
        assert fp4.high - fp4.low == pytest.approx(f_hw * (fp8.high - fp8.low))


def test_learned_runs_narrow_the_interval_by_the_documented_formula():
    """w = n / (n + 4); h = 1.2816 s sqrt(1 + 1/n); e' = (1 - w) e -+ w h: four runs of 2% spread halve the way."""
    base = error_quantiles("hopper", "megatron", "bf16")
    four = error_quantiles("hopper", "megatron", "bf16", learned_runs=4, learned_spread=0.02)
    h = Z_HIGH * 0.02 * math.sqrt(1 + 1 / 4)
    assert LEARNED_PRIOR_RUNS == 4
    assert (four.low, four.high) == pytest.approx((0.5 * base.low - 0.5 * h, 0.5 * base.high + 0.5 * h))
    widths = [_width((q.low, q.high)) for q in
              (error_quantiles("hopper", "megatron", "bf16", learned_runs=n, learned_spread=0.02)
               for n in (0, 1, 3, 10, 50))]
    assert widths == sorted(widths, reverse=True) and widths[-1] < 0.4 * widths[0]
    # runs that scatter more than the shipped residuals widen it: the interval tells what the runs show
    assert _width(prediction_interval(1.0, "hopper", "megatron", "bf16", learned_runs=10, learned_spread=0.5)) \
        > _width(prediction_interval(1.0, "hopper", "megatron", "bf16"))
    assert error_quantiles("hopper", "megatron", "bf16", learned_runs=3) == base  # no spread: nothing learned


def test_overlap_fraction_by_hand():
    assert overlap_fraction((0.0, 1.0), (0.5, 2.5)) == pytest.approx(0.5)  # half of the narrower
    assert overlap_fraction((0.0, 1.0), (0.4, 1.4)) == pytest.approx(0.6)
    assert overlap_fraction((0.0, 1.0), (2.0, 3.0)) == 0.0
    assert overlap_fraction((0.0, 4.0), (1.0, 2.0)) == 1.0  # the narrower lies wholly inside
    assert overlap_fraction((1.0, 1.0), (0.0, 2.0)) == 1.0


def test_ties_depend_only_on_the_ratio_of_the_steps():
    """Two strategies of one job share the relative interval, so a row is a tie exactly when its step over the
    best's is below 1 + (H - L) / (2 L), L = 1 / (1 + e_hi), H = 1 / (1 + e_lo)."""
    m, c, t = load_model("llama3-70b"), load_cluster("h100-sxm", nodes=8), TrainSpec(256, 8192)
    a = estimate(Job.resolve(m, c, t), "tp=8,pp=2,mbs=1")
    q = error_quantiles("hopper", "megatron", "bf16")
    lo_f, hi_f = 1 / (1 + q.high), 1 / (1 + q.low)
    limit = 1 + (hi_f - lo_f) / (2 * lo_f)
    for s in ("tp=8,pp=2,mbs=2", "tp=8,pp=2,mbs=1,recompute=full", "tp=4,pp=4", "tp=8,pp=4", "tp=2,pp=8"):
        b = estimate(Job.resolve(m, c, t), s)
        ratio = max(a.step_time_s, b.step_time_s) / min(a.step_time_s, b.step_time_s)
        assert indistinguishable(a, b) == (ratio < limit), s
    assert indistinguishable(a, a)
