"""Rows the planner need not price in full: a lower bound on each row's step time (and on its split bound),
from the stage times ``estimate_batch`` starts from, against the bar the rows kept so far set.

Why the bound holds (``asap.cost.estimate.compose``): every exposed term of the step is at least zero, and the
ones that carry the critical device's busy time t_max = compute + tp + ep + cp + host (per micro-batch, ep net
of what pairing hides) give back all of it but the hidden share of its tensor-parallel traffic:

    step >= m (compute + tp (1 - overlap) + cp + ep + host) = m (t_max - overlap tp)

The split bound a pipelined row is ranked by is its step less the stages' imbalance m (t_max - t_avg), so

    step - m (t_max - t_avg) >= m (t_avg - overlap tp)

and ``step_lower_bound_s`` = m (min(t_max, t_avg) - overlap tp) (t_max alone without a pipeline) is below both.
It is loose where the data-parallel or pipeline terms dominate and tight where compute does, which is where the
fastest rows are: on DeepSeek-V3 over 2048 H800, 19k of the 349k rows that fit are within the bar, so the
others' communication, bubble and host terms are never priced. The bar only ever drops a row that could not
be shown, so the plan is identical with and without it (``tests/search/test_plan_prune.py``).
"""

from __future__ import annotations

import numpy as np

from asap.cost.batch import StrategyBatch
from asap.cost.estimate import stage_times
from asap.cost.units import DeviceFigures
from asap.spec.job import Job


def step_lower_bound_s(job: Job, S: StrategyBatch, f: DeviceFigures) -> np.ndarray:
    """A lower bound on each row's step time and on its split bound (the module's derivation), per row of S
    with its device figures ``f`` (built with the unit times)."""
    m = (job.train.global_batch // (S.dp * S.mbs)).astype(float)
    times = stage_times(job.model, S, f, m)
    overlap = job.framework.tp_overlap_share(job.cluster.accelerator.family_constants)
    least_busy = np.where(S.pp > 1, np.minimum(times.t_max_s, times.t_avg_s), times.t_max_s)
    return m * (least_busy - overlap * times.parts["tp"])


def worth_pricing(lower_s: np.ndarray, peak_gb: np.ndarray, bar_s: float, front_step_s: np.ndarray,
                  front_least_gb: np.ndarray) -> np.ndarray:
    """Rows that may still be shown: a lower bound ``lower_s`` within ``bar_s`` (the slowest step or split bound
    a shown row may have), or no kept row both faster than that bound and as lean (``front_step_s`` ascending,
    ``front_least_gb`` the least peak memory among the rows up to each: off the Pareto front otherwise)."""
    within = lower_s <= bar_s
    faster = np.searchsorted(front_step_s, lower_s, side="left")  # kept rows strictly faster than the bound
    leanest = front_least_gb[np.maximum(faster - 1, 0)] if len(front_least_gb) else np.full(len(lower_s), np.inf)
    dominated = (faster > 0) & (leanest <= peak_gb)
    return within | ~dominated
