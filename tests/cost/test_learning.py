"""The learning of the cost model's terms from measured runs (``asap.cost.learning``), checked by hand: the
closed form of one run and one term, one run moving a term a little and three alike moving it more, a run whose
step is mostly data-parallel traffic correcting the scale-out fabric and not the GEMM rate, terms a run does not
exercise left at the catalog, the same factors whatever the runs' order."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from asap.cost.estimate import estimate
from asap.cost.learning import (FITTED_KERNEL_PRIOR, LEARN_TERMS, TERMS, MeasuredRun, corrected_cluster, fit,
                                fitted_terms, run_sigma, sensitivities)
from asap.spec.hardware import cluster_from_dict, load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.strategy import resolve_strategy
from asap.spec.train import TrainSpec

SIGMA = 0.15  # a run's scatter about as large as a term's prior width times its share: one run moves it about half way


def _job(cluster, model="llama3-8b", batch=256, seq=4096, precision="bf16") -> Job:
    return Job.resolve(load_model(model), cluster, TrainSpec(batch, seq, precision, "megatron"))


def _run(job, keys, slower=1.2, sigma=SIGMA, rid=0) -> MeasuredRun:
    s = resolve_strategy(keys, job.model, job.train, job.devices, framework=job.framework)
    return MeasuredRun(job, s, estimate(job, s, classes=False).step_time_s * slower, sigma, rid)


def test_one_run_one_term_is_the_closed_form():
    """x = r / J * J^2 s^2 / (J^2 s^2 + sigma^2): the share of the error the term carries, shrunk."""
    job = _job(load_cluster("dgx-h100-1node"))
    run = _run(job, {"tp": 1, "mbs": 1, "recompute": "none"})
    _, jac = sensitivities([run], ("gemm",), np.zeros(1))
    j, s, r = jac[0, 0], TERMS["gemm"].prior_sigma, math.log(1.2)
    assert 0.3 < j < 1.0  # the GEMMs carry most of this step
    expected = r / j * (j * j * s * s) / (j * j * s * s + SIGMA ** 2)
    assert fit([run], ("gemm",)).log_factors[0] == pytest.approx(expected, rel=1e-9)


def test_one_run_moves_a_little_three_move_more():
    job = _job(load_cluster("dgx-h100-1node"))
    one = fit([_run(job, {"tp": 1, "mbs": 1, "recompute": "none"})], ("gemm",)).factor("gemm")
    three = fit([_run(job, {"tp": t, "mbs": 1, "recompute": "none"}, rid=t) for t in (1, 2, 4)],
                ("gemm",)).factor("gemm")
    assert 1.0 < one < three < 1.2 / 0.6  # every run says ~1.2 / (the GEMMs' share): more runs, closer to it
    assert math.log(three) > 1.3 * math.log(one)


def test_a_data_parallel_run_corrects_the_fabric_not_the_gemm_rate():
    """8B on 32 nodes with 1 GB/s per GPU across nodes, pure data parallelism with a small batch: the step is
    mostly gradient all-reduce. 30% slower than priced: the scale-out factor takes it, the GEMM rate barely moves."""
    slow = cluster_from_dict({"accelerator": "h100-sxm", "devices_per_node": 8, "nodes": 32, "inter_node_gbps": 1})
    job = _job(slow, batch=256, seq=2048)
    run = _run(job, {"tp": 1, "pp": 1, "zero": 1, "mbs": 1}, slower=1.3)
    e = estimate(job, run.strategy, classes=False)
    assert e.exposed_s["dp_comm"] > 0.5 * e.step_time_s  # the run is mostly data-parallel traffic
    learned = fit([run])
    out, gemm = math.log(learned.factor("scale_out")), math.log(learned.factor("gemm"))
    assert out > 0.15
    assert abs(gemm) < 0.1 * out


def test_what_a_run_does_not_exercise_stays_at_the_catalog():
    """One node of bf16: no scale-out fabric crossed, no fp8 GEMM run: both factors exactly 1."""
    job = _job(load_cluster("dgx-h100-1node"))
    learned = fit([_run(job, {"tp": 2, "mbs": 1}, slower=1.3)])
    assert learned.factor("scale_out") == 1.0 and learned.factor("fp8_gemm") == 1.0
    assert learned.factor("gemm") > 1.02
    assert learned.uncertainty["fp8_gemm"] == pytest.approx(math.exp(TERMS["fp8_gemm"].prior_sigma))


def test_deterministic_and_order_free():
    job = _job(load_cluster("dgx-h100-8node"))
    runs = [_run(job, {"tp": t, "pp": p, "mbs": 1}, slower=k, rid=i)
            for i, (t, p, k) in enumerate([(1, 1, 1.1), (2, 2, 1.25), (8, 1, 0.9)])]
    a, b = fit(runs), fit(runs[::-1])
    assert a.factors == pytest.approx(b.factors, rel=1e-9)
    assert fit(runs).factors == a.factors


def test_a_corrected_cluster_is_slower_by_the_factors():
    c = load_cluster("dgx-h100-8node")
    fast = corrected_cluster(c, {"gemm": 1.25, "scale_out": 2.0, "latency": 2.0})
    f0, f1 = c.accelerator.family_constants, fast.accelerator.family_constants
    assert f1.gemm_efficiency == pytest.approx(f0.gemm_efficiency / 1.25)
    assert fast.accelerator.inter_node_gbps == pytest.approx(c.accelerator.inter_node_gbps / 2)
    assert f1.collective_latency_s == pytest.approx(f0.collective_latency_s * 2)
    assert f1.attention_efficiency == f0.attention_efficiency


def test_runs_unlike_the_job_weigh_less():
    job = _job(load_cluster("dgx-h100-8node"))
    same = run_sigma(job, job)
    bigger = run_sigma(_job(load_cluster("dgx-h100-8node"), model="llama3-70b"), job)
    elsewhere = run_sigma(replace(job, cluster=load_cluster("dgx-h100-1node")), job)
    assert same < elsewhere and same < bigger
    assert set(LEARN_TERMS) <= set(TERMS)


def test_learned_runs_narrow_the_prediction_interval():
    """The corrected job carries the runs' count and spread; its estimate's 80% interval narrows toward them
    (``asap.cost.bands.shrink_to_learned``), while the same job without runs keeps the held-out interval."""
    job = _job(load_cluster("dgx-h100-1node"))
    runs = [_run(job, {"tp": t, "mbs": 1, "recompute": "none"}, slower=1.1 + 0.01 * t, rid=t) for t in (1, 2, 4)]
    learned = fit(runs, LEARN_TERMS)
    corrected = learned.apply_job(job)
    assert corrected.learned_runs == 3 and corrected.learned_spread is not None
    s = runs[0].strategy
    width = {name: (lambda e: (e.step_time_range_s[1] - e.step_time_range_s[0]) / e.step_time_s)(estimate(j, s))
             for name, j in (("catalog", job), ("learned", corrected))}
    assert width["learned"] < width["catalog"]
    assert corrected.with_train(job.train).learned_runs == 3  # kept when the training spec is swapped


def test_kernel_priors_narrow_where_the_catalog_was_fitted():
    """The kernel rates the family's constants were fitted on (the shipped runs: Hopper in bf16 and fp8) take
    FITTED_KERNEL_PRIOR of their width; an fp4 job on Blackwell, whose fp4 rate no shipped run fitted, keeps the
    fp8/fp4 rate's full width; a family with no shipped run keeps every width. Narrowed, one run moves less."""
    assert fitted_terms("hopper", "bf16") == {"gemm", "fp8_gemm", "attention", "memory_bound"}
    assert "fp8_gemm" not in fitted_terms("blackwell", "nvfp4") and "gemm" in fitted_terms("blackwell", "nvfp4")
    assert fitted_terms("no-such-family", "bf16") == frozenset()
    job = _job(load_cluster("dgx-h100-1node"))
    run = _run(job, {"tp": 1, "mbs": 1, "recompute": "none"})
    wide, narrow = fit([run], ("gemm",)), fit([run], ("gemm",), fitted={"gemm"})
    assert 1.0 < narrow.factor("gemm") < wide.factor("gemm")
    assert fit([], ("gemm",), fitted={"gemm"}).log_sigma[0] == pytest.approx(FITTED_KERNEL_PRIOR * TERMS["gemm"].prior_sigma)
