"""Error bands per prediction: narrow where the terms are calibrated, wide where they are extrapolated."""

import pytest

from asap.cost.bands import TERM_WEIGHT, indistinguishable, relative_error_scale
from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec
from asap.spec.job import Job


def _width(e):
    lo, hi = e.step_time_range_s
    return (hi - lo) / e.step_time_s


def test_band_follows_the_terms_it_leans_on():
    dense = estimate(Job.resolve(load_model("llama3-70b"), load_cluster("h100-sxm", nodes=8), TrainSpec(256, 8192)), "tp=8,pp=2")
    moe = estimate(Job.resolve(load_model("deepseek-v3"), load_cluster("h800", nodes=32), TrainSpec(1024, 4096)),
                   "tp=1,pp=8,ep=32,recompute=full,dispatcher=alltoall")
    assert moe.exposed_s["ep_comm"] > 0.1 * moe.step_time_s
    assert _width(dense) < _width(moe)
    # the half-width is u times the weighted shares of the exposed terms
    r = dense.error_scale * sum(TERM_WEIGHT[k] * v for k, v in dense.exposed_s.items()) / dense.step_time_s
    assert dense.step_time_range_s == pytest.approx((dense.step_time_s / (1 + r), dense.step_time_s / (1 - r)))


def test_extrapolated_precision_and_family_widen_the_band():
    """Blackwell's calibration runs are bf16 and fp8: an nvfp4 run there is extrapolated; CDNA3's are fp8 (a bf16
    run is extrapolated), CDNA4 has no runs at all."""
    assert relative_error_scale("blackwell", "nvfp4") == pytest.approx(1.5 * relative_error_scale("blackwell", "fp8"))
    assert relative_error_scale("cdna3", "bf16") == pytest.approx(1.5 * relative_error_scale("cdna3", "fp8"))
    assert relative_error_scale("cdna4", "bf16") > relative_error_scale("hopper", "bf16")
    m, t = load_model("llama3-8b"), TrainSpec(64, 8192)
    # the same job on the same part: the precision its family's runs never used is priced with the wider band
    bf16, fp8 = (estimate(Job.resolve(m, load_cluster("mi300x", nodes=1), TrainSpec(64, 8192, precision=p)), "tp=2")
                 for p in ("bf16", "fp8"))
    assert _width(bf16) > 1.3 * _width(fp8)
    # a family without runs (CDNA4) against a calibrated one (Hopper), the same job
    h100 = estimate(Job.resolve(m, load_cluster("h100-sxm", nodes=1), t), "tp=2")
    mi355 = estimate(Job.resolve(m, load_cluster("mi355x", nodes=1), t), "tp=2")
    assert _width(mi355) > _width(h100)


def test_ties_are_decided_by_the_terms_that_differ():
    """Two strategies differing only in the micro-batch size: their gap is tiny and sits in well-calibrated
    compute, so a sub-percent margin is a tie while a large gap from recompute is not."""
    m, c, t = load_model("llama3-70b"), load_cluster("h100-sxm", nodes=8), TrainSpec(256, 8192)
    a = estimate(Job.resolve(m, c, t), "tp=8,pp=2,mbs=1")
    b = estimate(Job.resolve(m, c, t), "tp=8,pp=2,mbs=1,recompute=full")
    assert b.step_time_s > 1.2 * a.step_time_s and not indistinguishable(a, b)
    assert indistinguishable(a, a)
    near = estimate(Job.resolve(m, c, t), "tp=8,pp=2,mbs=2")
    gap = abs(near.step_time_s - a.step_time_s)
    assert indistinguishable(a, near) == (gap <= a.error_scale * sum(
        TERM_WEIGHT[k] * abs(a.exposed_s[k] - near.exposed_s[k]) for k in a.exposed_s))
