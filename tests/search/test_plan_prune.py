"""The planner's pruning is exact (``search.prune``): the lower bound is below every row's step and split bound,
and a plan is the same, row for row and figure for figure, with the bar as without it; chunks priced side by
side give the same plan as one at a time."""

from __future__ import annotations

import numpy as np
import pytest

import asap.search.pricing as pricing
from asap.cost.batch import expand
from asap.cost.estimate import UNIT_KEYS, estimate_batch
from asap.cost.device_memory import fits_memory, memory
from asap.cost.units import device_figures, unit_times
from asap.search.planner import plan, plan_headroom
from asap.search.prune import step_lower_bound_s, worth_pricing
from asap.search.space import Space
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec

CASES = [  # (model, accelerator, nodes, global batch, sequence, stack)
    ("deepseek-v3", "h800", 64, 4096, 4096, None),
    ("llama3-70b", "h100-sxm", 8, 256, 8192, None),
    ("qwen3-30b-a3b", "h100-sxm", 4, 256, 4096, None),
    ("mixtral-8x7b", "h100-sxm", 8, 256, 4096, None),
    ("llama3-70b", "h100-sxm", 8, 256, 8192, "torchtitan"),
    ("llama3-8b", "h100-sxm", 2, 128, 8192, "deepspeed"),
]
IDS = [f"{c[0]}-{c[2]}n-{c[5] or 'default'}" for c in CASES]


def job_of(name, acc, nodes, gb, seq, stack):
    return plan_headroom(Job.resolve(load_model(name), load_cluster(acc, nodes=nodes),
                                     TrainSpec(gb, seq, framework=stack)))


def without_time(d):
    if isinstance(d, dict):
        return {k: without_time(v) for k, v in d.items() if k != "search_time_s"}
    if isinstance(d, list):
        return [without_time(v) for v in d]
    return d


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_lower_bound_is_below_every_step_and_split_bound(case):
    job = job_of(*case)
    model, cluster, train, fw = job.model, job.cluster, job.train, job.framework
    space = Space.of(model, cluster.num_devices, cluster.topology.domain_size, train, {}, fw)
    rows_seen = 0
    for S, _place, _n, _m in pricing.chunked(space.blocks(pricing.CHUNK), pricing.CHUNK):
        ut = unit_times(job, S, UNIT_KEYS)
        f = device_figures(model, train, S, ut, fw.selective, fw.logits_bytes)
        mem = memory(model, cluster.accelerator, train, S, figures=f, framework=fw)
        rows = np.nonzero(fits_memory(mem, cluster.accelerator, train))[0]
        if not len(rows):
            continue
        lower = step_lower_bound_s(job, S.take(rows), f.subset(rows))
        be = estimate_batch(job, S.take(rows), mem=expand(mem, rows), figures=f.subset(rows), unit=ut.subset(rows))
        split_bound = be.step_time_s - np.where(S.pp[rows] > 1, be.imbalance_s, 0.0)
        assert np.all(lower <= be.step_time_s * (1 + 1e-12)), case
        assert np.all(lower <= split_bound * (1 + 1e-12) + 1e-15), case
        assert np.all(lower > 0)
        rows_seen += len(rows)
    assert rows_seen > 0


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_plan_is_the_same_with_and_without_the_bar(case, monkeypatch):
    job = job_of(*case)
    pruned = plan(job, top=5).to_dict()
    monkeypatch.setattr(pricing, "worth_pricing", lambda lower_s, *_: np.ones(len(lower_s), dtype=bool))
    monkeypatch.setattr(pricing, "PRICING_THREADS_MAX", 1)
    full = plan(job, top=5).to_dict()
    assert without_time(pruned) == without_time(full)


def test_worth_pricing_keeps_rows_within_the_bar_or_off_no_front():
    front_step = np.array([1.0, 2.0, 3.0])
    front_least = np.array([50.0, 40.0, 30.0])  # the least memory among the kept rows up to each
    lower = np.array([0.5, 2.5, 2.5, 3.5, 3.5])
    peak = np.array([99.0, 39.0, 45.0, 29.0, 31.0])
    keep = worth_pricing(lower, peak, 1.5, front_step, front_least)
    # within the bar; leaner than every faster row; dominated by the 2.0 s row at 40 GiB; leaner than all;
    # dominated by the 3.0 s row at 30 GiB
    assert keep.tolist() == [True, True, False, True, False]
