"""Pipeline schedules in closed form (the event simulator of the planner checks these).

For m micro-batches over pp stages with v virtual stages per device, per-micro-batch stage times t_max (the
heaviest stage) and t_avg (the mean), the pipelined time is (Narayanan et al. 2021, sec. 2.2, eq. 1-2;
generalised to uneven stages by letting the heaviest stage set the steady state):

    1F1B, GPipe:         T = (m - 1) t_max + sum_i t_i = (m - 1) t_max + pp t_avg
    interleaved 1F1B:    T = (m - 1) t_max + t_avg (1 + (pp - 1) / v)
    ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", sec. 3): about a third of 1F1B's bubble,
                         T = (m - 1) t_max + t_avg (1 + (pp - 1) / (3 v))
With even stages (t_max = t_avg = t) these are Narayanan's (m + (pp-1)/v) t, bubble fraction (pp-1)/(v m);
with uneven 1F1B stages the first form is exact (the event simulator, cost/schedule_sim.py, agrees): the
heaviest stage paces the steady state and every stage is traversed once in fill and drain.
"""

from __future__ import annotations

import numpy as np

from asap.cost.batch import SCHEDULE_CODE


def bubble_s(pp, vpp, schedule, t_avg, t_max=None):
    """Time the pipeline adds to m * t_max (fill and drain); ``schedule`` is a SCHEDULE_CODE value.

    Without ``t_max`` (even stages) this is (pp-1) t_avg / v, a third of it for ZB-H1."""
    pp = np.asarray(pp, dtype=float)
    vpp = np.asarray(vpp, dtype=float)
    zb = np.asarray(schedule) == SCHEDULE_CODE["zb"]
    units = np.where(zb, 1.0 / 3.0, 1.0)
    fill = (pp - 1) * t_avg / vpp * units
    if t_max is not None:
        fill = np.maximum(0.0, t_avg * 1.0 + fill - t_max)
    return np.where(pp > 1, fill, 0.0)


def pipeline_time_s(m, pp, vpp, schedule, t_max, t_avg):
    """Forward-and-backward time of all m micro-batches through the pipeline."""
    return m * t_max + bubble_s(pp, vpp, schedule, t_avg, t_max)


def bubble_fraction(m, pp, vpp=1, schedule="1f1b"):
    """Bubble over ideal time for even stages: (pp-1)/m for 1F1B, (pp-1)/(v m) interleaved, a third for ZB-H1."""
    t = 1.0
    return float(bubble_s(pp, vpp, SCHEDULE_CODE[schedule], t) / (m * t))
