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

Interleaved 1F1B with chunks of unequal size (80 layers on pp=8 x vpp=8 virtual stages: chunks of 1 and 2
layers) is not covered by any closed form: the event simulator shows the steady state itself stalls, because a
device's forward of one chunk is paired with the backward of another and neighbours wait on the larger ones
(pp=8, vpp=8, m=96: 6.9% over the ideal, against 0.9% by the closed form). ``uneven_chunk_excess_units``
measures that excess with the simulator, and the estimate adds it. ZB-H1 with fewer micro-batches than stages
never fills its warm-up: the simulator's excess (``zb_small_batch_excess_s``) is added there too.

Point-to-point hand-offs (``exposed_p2p_messages``): how many of the step's activation and gradient messages
lie on its critical path, by the stacks' documented behaviour (Megatron-LM, megatron/core/pipeline_parallel/
schedules.py and p2p_communication.py):
- non-interleaved 1F1B and GPipe: every send and receive is blocking (``forward_backward_pipelining_without_
  interleaving`` raises on ``overlap_p2p_comm``; megatron/training/arguments.py sets it off "since
  non-interleaved schedule does not support overlapping p2p communication"; DeepSpeed's pipeline engine and
  torch.distributed.pipelining also wait on a stage's receive before its compute). The steady state pairs a
  send with a receive in one batched exchange (``send_forward_recv_backward``, ``send_backward_recv_forward``),
  so a stage with two neighbours pays two exchanges per micro-batch, the first and last stage one; the first
  forward crosses pp - 1 links before the last stage starts and the last backward pp - 1 links back. An event
  simulation of that code with rendezvous transfers (both ends busy while a message travels) gives, with
  n = min(pp - 1, 2) neighbours of the pacing stage,
      exposed messages = 2 (pp - 1) + max(0, n (m - 1) - (n - 1))      (pp=8, m=16: 43; pp=2, m=16: 17).
- interleaved 1F1B (and ZB-H1 with virtual stages): Megatron-LM overlaps the steady state's exchanges with the
  next chunk's compute (``--overlap-p2p-communication`` on by default with virtual stages; Megatron-Core's
  ``ModelParallelConfig.overlap_p2p_comm`` off by default), but not the warm-up and flush
  (``overlap_p2p_comm_warmup_flush`` off by default): the first micro-batch crosses all pp v - 1 virtual-stage
  boundaries before the first backward and the last backward crosses them back (Narayanan et al. 2021, sec.
  2.2.2: interleaving multiplies the pipeline's communication by v). The event simulator with a transfer
  latency (cost/schedule_sim.py) gives exactly 2 (pp v - 1) exposed messages for every m while a message is
  shorter than a chunk's forward. The steady state hides its hand-offs only as far as the compute they overlap:
  a device sends 2 v messages per micro-batch (an activation and a gradient per chunk) through one link while
  it computes one micro-batch's stage, so ``overlapped_p2p_excess_s`` adds m max(0, 2 v c - t_stage) (the
  simulator lets transfers run concurrently and so cannot show this bound; with c above a chunk's forward it
  stalls too, less: pp=4, v=2, m=64, a chunk's forward 0.5 and backward 1, c = 1: 56 exposed there, 78 here).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from asap.cost.schedule_sim import simulated_step_s
from asap.spec.strategy import SCHEDULES, Schedule


def bubble_s(pp, vpp, schedule, t_avg, t_max=None):
    """Time the pipeline adds to m * t_max (fill and drain); ``schedule`` is a SCHEDULE_CODE value.

    Without ``t_max`` (even stages) this is (pp-1) t_avg / v, a third of it for ZB-H1."""
    pp = np.asarray(pp, dtype=float)
    vpp = np.asarray(vpp, dtype=float)
    zb = np.asarray(schedule) == Schedule.ZB
    units = np.where(zb, 1.0 / 3.0, 1.0)
    fill = (pp - 1) * t_avg / vpp * units
    if t_max is not None:
        fill = np.maximum(0.0, t_avg * 1.0 + fill - t_max)
    return np.where(pp > 1, fill, 0.0)


def exposed_p2p_messages(m, pp, vpp):
    """Activation and gradient messages on the step's critical path (module docstring): 2 (pp - 1) hand-offs
    of fill and drain plus the blocking steady-state exchanges without virtual stages; 2 (pp v - 1) with them
    (the steady state overlapped). 0 without a pipeline."""
    m, pp, vpp = (np.asarray(x, dtype=float) for x in (m, pp, vpp))
    neighbours = np.minimum(pp - 1, 2)
    blocking = 2 * (pp - 1) + np.maximum(0.0, neighbours * (m - 1) - (neighbours - 1))
    overlapped = 2 * (pp * vpp - 1)
    return np.where(pp > 1, np.where(vpp > 1, overlapped, blocking), 0.0)


def overlapped_p2p_excess_s(m, pp, vpp, message_s, stage_s):
    """The interleaved steady state's hand-offs that its compute cannot cover (module docstring), in seconds:
    m max(0, 2 v c - t_stage) with virtual stages, 0 without (there every message is counted blocking)."""
    m, pp, vpp = (np.asarray(x, dtype=float) for x in (m, pp, vpp))
    excess = m * np.maximum(0.0, 2 * vpp * np.asarray(message_s) - np.asarray(stage_s))
    return np.where((pp > 1) & (vpp > 1), excess, 0.0)


def pipeline_time_s(m, pp, vpp, schedule, t_max, t_avg):
    """Forward-and-backward time of all m micro-batches through the pipeline."""
    return m * t_max + bubble_s(pp, vpp, schedule, t_avg, t_max)


def bubble_fraction(m, pp, vpp=1, schedule="1f1b"):
    """Bubble over ideal time for even stages: (pp-1)/m for 1F1B, (pp-1)/(v m) interleaved, a third for ZB-H1."""
    t = 1.0
    return float(bubble_s(pp, vpp, Schedule(SCHEDULES.index(schedule)), t) / (m * t))


@lru_cache(maxsize=4096)
def _simulated_excess_units(chunk_layers: tuple[int, ...], pp: int, vpp: int, m: int) -> float:
    layers = [max(float(x), 0.25) for x in chunk_layers]  # an empty chunk: the embedding or the head alone
    step = simulated_step_s(pp, vpp, m, "interleaved", layers, [2.0 * x for x in layers])
    device = [sum(layers[c * pp + d] for c in range(vpp)) for d in range(pp)]
    t_max, t_avg = 3.0 * max(device), 3.0 * sum(device) / pp
    closed = (m - 1) * t_max + t_avg * (1 + (pp - 1) / vpp)
    return step - closed


def by_rounds(run, m: int, pp: int) -> float:
    """``run(m)`` for a pipeline schedule, simulated directly up to m = 3 pp and extrapolated linearly beyond from
    m = 2 pp and 3 pp: once the pipeline is full the schedule repeats every pp micro-batches, so step times (and
    their excess over the closed form) grow linearly in m (checked against direct simulation of unequal
    interleaved chunks for 61-126 layers, pp 2-16, v 2-8, m up to 16 pp: identical once clamped at zero)."""
    if m <= 3 * pp:
        return run(m)
    a, b = run(2 * pp), run(3 * pp)
    return b + (m - 3 * pp) * (b - a) / pp


def uneven_chunk_excess_units(chunk_layers: tuple[int, ...], pp: int, vpp: int, m: int) -> float:
    """What interleaved 1F1B with unequal chunks (layers per chunk ``chunk_layers``, asap.spec.layout) adds to
    the closed form, in units of one layer's forward (backward = 2 units, so a layer's forward + backward is 3),
    by event simulation (never negative)."""
    if vpp <= 1 or len(set(chunk_layers)) == 1:
        return 0.0
    return max(0.0, by_rounds(lambda mb: _simulated_excess_units(chunk_layers, pp, vpp, mb), m, pp))


def uneven_chunk_excess_s(layouts, layout_id, schedule, m, t_avg_s, num_layers: int):
    """``uneven_chunk_excess_units`` for arrays of strategies (each row follows ``layouts[layout_id]``), in
    seconds: a unit is a third of the mean stage's per-layer time (t_avg / (3 L / pp))."""
    layout_id, schedule, m = np.broadcast_arrays(layout_id, schedule, m)
    pp = np.array([lay.pp for lay in layouts])[layout_id]
    uneven = np.array([lay.vpp > 1 and not lay.is_uniform_chunks for lay in layouts])[layout_id]
    excess = np.zeros(layout_id.shape)
    todo = uneven & (schedule == Schedule.INTERLEAVED)
    if todo.any():
        code = layout_id[todo].astype(np.int64) * (1 << 40) + m[todo]
        _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        rows = np.nonzero(todo)[0][first]
        units = np.array([uneven_chunk_excess_units(layouts[layout_id[i]].chunk_layers, int(pp[i]),
                                                    layouts[layout_id[i]].vpp, int(m[i])) for i in rows])
        excess[todo] = units[np.ravel(inverse)]
    return excess * np.asarray(t_avg_s) * pp / (3.0 * num_layers)


@lru_cache(maxsize=4096)
def _zb_excess_units(pp: int, m: int) -> float:
    """ZB-H1's step beyond its closed form, by event simulation of even stages (forward 1 unit, backward 2):
    with m < pp micro-batches the warm-up never fills and the closed form's third of a bubble is not reached;
    the simulator gives (pp - m) units more (0 for m >= pp)."""
    step = simulated_step_s(pp, 1, m, "zb", [1.0] * pp, [2.0] * pp)
    return max(0.0, step - ((m - 1) * 3.0 + 3.0 * (1 + (pp - 1) / 3.0)))


def zb_small_batch_excess_s(pp, vpp, schedule, m, t_avg_s):
    """``_zb_excess_units`` for arrays of strategies, in seconds (a unit is a third of the mean stage time)."""
    pp, vpp, schedule, m = np.broadcast_arrays(pp, vpp, schedule, m)
    excess = np.zeros(pp.shape)
    todo = (schedule == Schedule.ZB) & (vpp == 1) & (pp > 1) & (m < pp)
    if todo.any():
        pairs, inverse = np.unique(np.stack([pp[todo], m[todo]]), axis=1, return_inverse=True)
        units = np.array([_zb_excess_units(int(p), int(mb)) for p, mb in pairs.T])
        excess[todo] = units[np.ravel(inverse)]
    return excess * np.asarray(t_avg_s) / 3.0


def simulated_pipeline_time_s(pp: int, vpp: int, m: int, schedule: str, forward_s: list[float],
                              backward_s: list[float], max_operations: int = 200_000) -> float:
    """One step of the pipeline by event simulation, for per-virtual-stage forward and backward times; beyond
    ``max_operations`` extrapolated ``by_rounds``."""

    def run(mb: int) -> float:
        return simulated_step_s(pp, vpp, mb, schedule, forward_s, backward_s)

    return run(m) if 3 * m * pp * vpp <= max_operations else by_rounds(run, m, pp)
