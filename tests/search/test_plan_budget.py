"""Every plan ends within its time budget: each calibration case planned free (nothing fixed) under a budget,
the answer back within the budget plus the work the budget cannot cut short (the last chunk in flight and
counting the rest of the space), and saying so when it stopped early."""

from __future__ import annotations

import time

import pytest

from asap.errors import AsapError
from asap.search.planner import plan
from asap.spec.hardware import cluster_from_dict
from asap.spec.model import model_from_dict
from asap.spec.train import TrainSpec
from asap.validate import load_cases
from asap.spec.job import Job

pytestmark = pytest.mark.slow

BUDGET_S = 10.0
SLACK_S = 15.0  # one chunk of 131072 rows priced on a loaded two-core machine, and the rest of the space counted


def job(case: dict):
    train = TrainSpec.from_dict(case["train"])
    return model_from_dict(case["model"]), cluster_from_dict(case["cluster"]), train


def test_every_calibration_case_plans_within_its_budget():
    over = []
    for case in load_cases():
        m, c, t = job(case)
        t0 = time.perf_counter()
        try:
            result = plan(Job.resolve(m, c, t), top=5, time_limit_s=BUDGET_S)
        except AsapError:  # nothing fits this case's cluster without its published knobs: refused, in time
            result = None
        took = time.perf_counter() - t0
        if took > BUDGET_S + SLACK_S:
            over.append(f"{case['id']}: {took:.1f} s")
        if result is not None and took > BUDGET_S:
            assert result.stopped_early, f"{case['id']} took {took:.1f} s and did not say it stopped early"
    assert not over, over


def test_a_tiny_budget_stops_early_and_says_so():
    from asap.spec.hardware import load_cluster
    from asap.spec.loader import load_model

    # DeepSeek-V3 on 2048 H800 (benchmarks/plan_speed.py): about a million configurations, many chunks
    m, c, t = load_model("deepseek-v3"), load_cluster("h800-256node"), TrainSpec(15360, 4096)
    result = plan(Job.resolve(m, c, t), top=3, time_limit_s=1e-3)
    assert result.stopped_early and result.stop_reason
    assert result.searched < result.space
