"""Pipeline schedules as one discrete-event simulation: GPipe, 1F1B, interleaved 1F1B and ZB-H1.

The closed forms in :mod:`asap.cost.pipeline` assume even stages and free point-to-point transfers. This module
checks them and goes where they cannot: every schedule is written down as the *order* in which each device
runs its operations, and one simulator turns that order into times.

The model (the same for every schedule):

* ``pp`` devices, each holding ``vpp`` model chunks. Chunk ``c`` on device ``d`` is virtual stage ``c*pp + d``
  (Megatron-LM's interleaved assignment, Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
  on GPU Clusters Using Megatron-LM", sec. 2.2.2); with ``vpp = 1`` the virtual stage is the device.
* Operations: ``F`` (forward of one micro-batch through one virtual stage), ``B`` (its backward; for ZB-H1 only
  the input-gradient half) and ``W`` (ZB-H1 only: the weight-gradient half, Qi et al. 2023, "Zero Bubble
  Pipeline Parallelism", sec. 2).
* Dependencies: ``F(i, s)`` needs ``F(i, s-1)``; ``B(i, s)`` needs ``B(i, s+1)`` or, on the last virtual stage,
  ``F(i, s)``; ``W(i, s)`` needs ``B(i, s)``. A dependency that crosses devices adds the point-to-point latency.
* A device runs its ordered list one operation at a time; an operation starts as soon as the device is free
  and its dependency has ended (plus the latency). Transfers are asynchronous (they do not occupy the device).

Because every device's order is fixed, the start times are the least fixed point of
``start = max(device free, dependency end + latency)``; the simulator finds it in one pass over the operations
with a ready queue of devices (each device is woken when the operation it waits on ends), so the cost is
linear in the number of operations: pp=16, vpp=4, m=256 (32768 operations) takes a few tens of milliseconds.
An order that waits on itself (a schedule bug) is reported as a deadlock instead of hanging.

Memory: a micro-batch's activations on a virtual stage are allocated when its ``F`` starts and released when
its backward ends (``B`` ends; for ZB-H1 a ``w_retained_fraction`` share is kept until ``W`` ends, because the
weight gradient needs the linear layers' inputs and output gradients). ``peak_in_flight`` counts the
(micro-batch, chunk) pairs a device holds at its peak; ``peak_activation_bytes`` weights them by the
per-virtual-stage activation bytes.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter
from typing import Sequence, Union, cast

from asap.errors import AsapError
from asap.spec.knobs import SCHEDULES


F, B, W = 0, 1, 2
KIND_NAMES = ("F", "B", "W")

# guard against a run that would take minutes: 3 * 4M ops is a few seconds of Python already
MAX_OPERATIONS = 3_000_000

PerStage = Union[float, int, Sequence[float]]
OrderedOps = list[tuple[int, int, int]]  # (kind, micro_batch, chunk) in the order a device runs them


@dataclass(slots=True)
class PipelineOp:
    """One operation of the timeline: ``kind`` is ``"F"``, ``"B"`` or ``"W"``; times in seconds from step start.

    (Not frozen: a frozen dataclass costs three times as much to build, and a timeline has tens of thousands.)
    """

    device: int
    kind: str
    micro_batch: int
    chunk: int
    start_s: float
    end_s: float

    def to_dict(self) -> dict:
        return {"device": self.device, "kind": self.kind, "micro_batch": self.micro_batch, "chunk": self.chunk,
                "start_s": self.start_s, "end_s": self.end_s}


@dataclass(frozen=True)
class ScheduleSimulation:
    """What one simulated pipeline step yields; per-device tuples are indexed by pipeline rank.

    ``bubble_fraction`` is idle time over busy time summed over the devices, the convention of the closed forms
    (Narayanan et al. 2021, sec. 2.2: bubble time over ideal time): ``(pp-1)/m`` for 1F1B with even stages.
    """

    schedule: str
    pp: int
    vpp: int
    micro_batches: int
    step_time_s: float
    busy_s: tuple[float, ...]
    bubble_s: tuple[float, ...]
    bubble_fraction: float
    peak_in_flight: tuple[int, ...]
    peak_activation_bytes: tuple[float, ...]
    timeline: tuple[PipelineOp, ...]

    @property
    def idle_fraction_of_step(self) -> float:
        """Idle share of the devices' time over the step (bubble / (bubble + busy))."""
        return sum(self.bubble_s) / (self.step_time_s * self.pp)

    def to_dict(self, timeline: bool = True) -> dict:
        d = {"schedule": self.schedule, "pp": self.pp, "vpp": self.vpp, "micro_batches": self.micro_batches,
             "step_time_s": self.step_time_s, "bubble_fraction": self.bubble_fraction,
             "busy_s": list(self.busy_s), "bubble_s": list(self.bubble_s),
             "peak_in_flight": list(self.peak_in_flight),
             "peak_activation_bytes": list(self.peak_activation_bytes)}
        if timeline:
            d["timeline"] = [op.to_dict() for op in self.timeline]
        return d


# --------------------------------------------------------------------------------------------------------------
# Orders: one list per device, in the order the device runs its operations
# --------------------------------------------------------------------------------------------------------------

def gpipe_order(pp: int, m: int) -> list[OrderedOps]:
    """GPipe (Huang et al. 2019, "GPipe", sec. 2.2): every forward, then every backward, micro-batches in order.

    Peak in flight on every stage: m micro-batches. Bubble with even stages: (pp-1)/m of the ideal time.
    """
    one = [(F, i, 0) for i in range(m)] + [(B, i, 0) for i in range(m)]
    return [list(one) for _ in range(pp)]


def one_f_one_b_order(pp: int, m: int) -> list[OrderedOps]:
    """1F1B, PipeDream-Flush (Narayanan et al. 2021, sec. 2.2.1; Megatron-Core
    ``forward_backward_pipelining_without_interleaving``).

    Rank r runs ``min(pp - r - 1, m)`` warm-up forwards, then alternates one forward and one backward, then
    drains the remaining backwards. Peak in flight on rank 0: ``min(m, pp)``; bubble (pp-1)/m as GPipe's.
    """
    orders = []
    for rank in range(pp):
        warmup = min(pp - rank - 1, m)
        order = [(F, i, 0) for i in range(warmup)]
        for i in range(m - warmup):
            order += [(F, warmup + i, 0), (B, i, 0)]
        order += [(B, i, 0) for i in range(m - warmup, m)]
        orders.append(order)
    return orders


def interleaved_chunk_and_micro_batch(k: int, pp: int, vpp: int, forward: bool) -> tuple[int, int]:
    """The chunk and micro-batch of a device's k-th forward (or backward) in Megatron's interleaved order.

    Megatron-Core ``get_model_chunk_id`` and ``get_microbatch_id_in_model_chunk`` (schedules.py): micro-batches
    go in groups of ``pp``; a group runs through chunk 0, then chunk 1, ... (backwards: the last chunk first).
    """
    group_size = pp * vpp
    chunk = (k % group_size) // pp
    if not forward:
        chunk = vpp - chunk - 1
    micro_batch = (k // group_size) * pp + k % pp
    return chunk, micro_batch


def interleaved_order(pp: int, vpp: int, m: int) -> list[OrderedOps]:
    """Interleaved 1F1B (Narayanan et al. 2021, sec. 2.2.2; Megatron-Core
    ``forward_backward_pipelining_with_interleaving`` / ``get_pp_rank_microbatches``).

    Each device runs ``vpp * m`` chunk-forwards and as many chunk-backwards. Rank r warms up with
    ``(pp - r - 1) * 2 + (vpp - 1) * pp`` chunk-forwards (all of them when that is more than ``vpp * m``), then
    alternates one forward and one backward, then drains. Peak in flight on rank 0:
    ``(pp-1)*2 + (vpp-1)*pp + 1`` (micro-batch, chunk) pairs (Korthikanti et al. 2022, "Reducing Activation
    Recomputation in Large Transformer Models", sec. 4.2.3); bubble (pp-1)/(vpp m) of the ideal time.
    """
    total = vpp * m
    orders = []
    # every rank runs the same sequence of forwards and of backwards; only its warm-up differs
    fwd = [(F, mb, c) for c, mb in (interleaved_chunk_and_micro_batch(k, pp, vpp, True) for k in range(total))]
    bwd = [(B, mb, c) for c, mb in (interleaved_chunk_and_micro_batch(k, pp, vpp, False) for k in range(total))]
    for rank in range(pp):
        warmup = min((pp - rank - 1) * 2 + (vpp - 1) * pp, total)
        order = fwd[:warmup]
        for k in range(total - warmup):
            order += [fwd[warmup + k], bwd[k]]
        order += bwd[total - warmup:]
        orders.append(order)
    return orders


def zb_h1_order(pp: int, m: int) -> list[OrderedOps]:
    """ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", sec. 3.1, fig. 3): 1F1B with the backward split
    into B (input gradient, on the critical path) and W (weight gradient, deferrable).

    Rank r keeps 1F1B's ``min(pp - r - 1, m)`` warm-up forwards and its forward/backward alternation, and runs
    each W ``r`` backwards late (the last stage defers pp-1 of them), so the W passes fill the drain where 1F1B
    idles; the remaining W passes close the step. In-flight micro-batches (F started, W not ended) stay at most
    pp, 1F1B's peak. Bubble: (pp-1)(T_F + T_B - T_W) against 1F1B's (pp-1)(T_F + T_B + T_W), a third of it when
    T_F = T_B = T_W (paper, sec. 3.1), as long as T_W <= T_F.
    """
    orders = []
    for rank in range(pp):
        warmup = min(pp - rank - 1, m)
        lag = rank
        pending: deque[int] = deque()
        order = [(F, i, 0) for i in range(warmup)]

        def backward(i: int, order=order, pending=pending, lag: int = lag) -> None:  # this rank's
            order.append((B, i, 0))
            pending.append(i)
            if len(pending) > lag:
                order.append((W, pending.popleft(), 0))

        for i in range(m - warmup):
            order.append((F, warmup + i, 0))
            backward(i)
        for i in range(m - warmup, m):
            backward(i)
        order += [(W, i, 0) for i in pending]
        orders.append(order)
    return orders


def schedule_order(schedule: str, pp: int, vpp: int, m: int) -> list[OrderedOps]:
    """The per-device operation order of a named schedule (inputs already validated)."""
    if schedule == "gpipe":
        return gpipe_order(pp, m)
    if schedule == "1f1b":
        return one_f_one_b_order(pp, m)
    if schedule == "interleaved":
        return interleaved_order(pp, vpp, m)
    return zb_h1_order(pp, m)


def default_schedule(vpp: int) -> str:
    """Interleaved when a device holds several chunks, else 1F1B."""
    return "interleaved" if vpp > 1 else "1f1b"


# --------------------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------------------

def _positive_int(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AsapError(field, f"must be a positive integer, got {value!r}")
    return value


def validate_shape(schedule: str, pp: int, vpp: int, m: int) -> None:
    """Reject the (schedule, pp, vpp, m) combinations no framework runs, with the field to change."""
    _positive_int(pp, "pp")
    _positive_int(vpp, "vpp")
    _positive_int(m, "micro_batches")
    if schedule not in SCHEDULES:
        raise AsapError("schedule", f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if schedule == "interleaved":
        if vpp < 2:
            raise AsapError("vpp", f"the interleaved schedule needs vpp > 1 (virtual stages per device), got {vpp}")
        if m % pp:
            raise AsapError("micro_batches", f"the interleaved schedule needs a multiple of pp ({pp}), got {m}")
    elif vpp != 1:
        raise AsapError("vpp", f"the {schedule} schedule runs one chunk per device (vpp = 1), got {vpp}; "
                               "use the interleaved schedule for virtual stages")
    operations = pp * vpp * m * (3 if schedule == "zb" else 2)
    if operations > MAX_OPERATIONS:
        raise AsapError("micro_batches", f"pp*vpp*m = {pp * vpp * m} is too large to simulate "
                                         f"({operations} operations, at most {MAX_OPERATIONS})")


def per_virtual_stage(value: PerStage, stages: int, field: str, positive: bool = True) -> list[float]:
    """A scalar or one value per virtual stage (ordered by virtual stage ``chunk*pp + device``) → a list."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        values = [float(value)] * stages
    else:
        try:
            # a bool (an int to mypy) lands here: iterating it raises the TypeError reported below
            values = [float(v) for v in cast(Sequence[float], value)]
        except (TypeError, ValueError):
            raise AsapError(field, f"must be a number or a list of numbers, got {value!r}") from None
        if len(values) != stages:
            raise AsapError(field, f"needs one value per virtual stage ({stages}), got {len(values)}")
    for v in values:
        if not math.isfinite(v) or v < 0 or (positive and v == 0):
            raise AsapError(field, f"must be {'positive' if positive else 'non-negative'} and finite, got {v}")
    return values


def _fraction(value: float, field: str, open_interval: bool) -> float:
    v = float(value)
    ok = 0 < v < 1 if open_interval else 0 <= v <= 1
    if not (math.isfinite(v) and ok):
        raise AsapError(field, f"must lie in {'(0, 1)' if open_interval else '[0, 1]'}, got {value}")
    return v


# --------------------------------------------------------------------------------------------------------------
# The simulator
# --------------------------------------------------------------------------------------------------------------

def simulate_schedule(pp: int, vpp: int, micro_batches: int, schedule: str | None = None, *,
                      forward_s: PerStage = 1.0, backward_s: PerStage = 2.0, b_share: float = 0.5,
                      p2p_s: float = 0.0, activation_bytes: PerStage = 0.0,
                      w_retained_fraction: float = 1.0, timeline: bool = True) -> ScheduleSimulation:
    """Simulate one pipeline step of ``micro_batches`` micro-batches and return its timeline and figures.

    ``forward_s`` and ``backward_s`` are one micro-batch's forward and full backward time on one virtual stage
    (one chunk): a scalar for even stages, or a list of ``pp * vpp`` values by virtual stage (``chunk*pp +
    device``), e.g. a heavier last stage carrying the LM head. For ZB-H1 the backward splits into B =
    ``b_share * backward_s`` and W = the rest. ``p2p_s`` is the latency of one activation or gradient transfer
    between devices. ``activation_bytes`` (scalar or per virtual stage) is what one micro-batch's forward keeps
    until its backward; ``w_retained_fraction`` of it is held until W for ZB-H1. ``timeline=False`` skips
    building the per-operation timeline (the planner needs only the figures; about twice as fast).
    """
    schedule = schedule or default_schedule(vpp)
    validate_shape(schedule, pp, vpp, micro_batches)
    stages = pp * vpp
    fwd = per_virtual_stage(forward_s, stages, "forward_s")
    bwd = per_virtual_stage(backward_s, stages, "backward_s")
    act = per_virtual_stage(activation_bytes, stages, "activation_bytes", positive=False)
    latency_s = per_virtual_stage(p2p_s, 1, "p2p_s", positive=False)[0]
    split = schedule == "zb"
    share = _fraction(b_share, "b_share", open_interval=True) if split else 1.0
    retained = _fraction(w_retained_fraction, "w_retained_fraction", open_interval=False) if split else 0.0
    durations = (fwd, [t * share for t in bwd], [t * (1.0 - share) for t in bwd])

    orders = schedule_order(schedule, pp, vpp, micro_batches)
    starts, ends = run_orders(orders, pp, vpp, micro_batches, durations, latency_s)
    return summarize(schedule, pp, vpp, micro_batches, orders, starts, ends, durations, act, retained, timeline)


def simulated_step_s(pp: int, vpp: int, micro_batches: int, schedule: str, forward_s: Sequence[float],
                     backward_s: Sequence[float], b_share: float = 0.5) -> float:
    """Only the step time of ``simulate_schedule`` (no memory walk, no timeline): what the cost model's
    corrections need, a few hundred times per plan. Times are per virtual stage, as there."""
    validate_shape(schedule, pp, vpp, micro_batches)
    stages = pp * vpp
    fwd, bwd = list(forward_s), list(backward_s)
    share = b_share if schedule == "zb" else 1.0
    durations = (fwd, [t * share for t in bwd], [t * (1.0 - share) for t in bwd])
    orders = _frozen_order(schedule, pp, vpp, micro_batches)
    walk = _frozen_walk(schedule, pp, vpp, micro_batches)
    if walk is None or any(len(times) < stages for times in durations):  # run_orders says what is wrong
        run_orders(orders, pp, vpp, micro_batches, durations, 0.0, _frozen_table(schedule, pp, vpp, micro_batches))
        raise AssertionError("run_orders raises where no walk exists")  # pragma: no cover
    duration = [t for kind in range(3) for t in durations[kind][:stages]]  # by kind * stages + stage
    ends = [-1.0] * (3 * stages * micro_batches)
    free_s = [0.0] * pp
    # ``run_orders``' times without its parking: each operation starts when its device is free and its
    # dependency has ended (no p2p latency here), in an order where every dependency comes first
    for device, dep, op, d in walk:
        now = free_s[device]
        if dep >= 0 and ends[dep] > now:
            now = ends[dep]
        now += duration[d]
        ends[op] = free_s[device] = now
    return max(device_end_s(order, d, pp, stages, micro_batches, ends) for d, order in enumerate(orders))


@lru_cache(maxsize=256)
def _frozen_walk(schedule: str, pp: int, vpp: int, m: int) -> tuple[tuple[int, int, int, int], ...] | None:
    """Every operation of the shape as (device, its dependency's ``_op_id`` or -1, its own, its duration's
    index), in the order ``run_orders`` runs them (None where it deadlocks). Which operation runs next there
    depends only on which have ended, never on the times, so this order puts every dependency first whatever
    the durations: walking it gives ``run_orders``' times (the same maxima and sums, in the same order)."""
    table = _frozen_table(schedule, pp, vpp, m)
    ran = bytearray(3 * pp * vpp * m)
    position, ready = [0] * pp, deque(range(pp))
    parked: dict[int, list[int]] = {}
    walk: list[tuple[int, int, int, int]] = []
    while ready:
        device = ready.popleft()
        ops, i = table[device], position[device]
        while i < len(ops):
            dep, _, op, d = ops[i]
            if dep >= 0 and not ran[dep]:
                parked.setdefault(dep, []).append(device)
                break
            walk.append((device, dep, op, d))
            ran[op] = 1
            i += 1
            ready.extend(parked.pop(op, ()))
        position[device] = i
    return None if any(position[d] < len(table[d]) for d in range(pp)) else tuple(walk)


@lru_cache(maxsize=256)
def _frozen_order(schedule: str, pp: int, vpp: int, m: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """``schedule_order``, built once per shape and kept read-only: the planner simulates many unequal chunk
    layouts of one (pp, vpp, m), every one in the same order."""
    return tuple(tuple(order) for order in schedule_order(schedule, pp, vpp, m))


def _op_id(kind: int, micro_batch: int, stage: int, stages: int, m: int) -> int:
    return (kind * stages + stage) * m + micro_batch


def op_table(orders: Sequence[Sequence[tuple[int, int, int]]], pp: int, vpp: int,
             m: int) -> tuple[tuple[tuple[int, bool, int, int], ...], ...]:
    """Each device's operations as ``run_orders`` walks them: (the operation its dependency is, ``_op_id``, -1
    for none; whether that dependency is on another device; its own ``_op_id``; its duration's index,
    kind * stages + stage). They depend on the order alone, not on the times."""
    stages = pp * vpp
    last = stages - 1
    cross = pp > 1
    table = []
    for device, order in enumerate(orders):
        ops = []
        for kind, mb, chunk in order:
            stage = chunk * pp + device
            if kind == F:
                dep, hop = ((stage - 1) * m + mb, cross) if stage else (-1, False)
            elif kind == B:
                dep, hop = ((stages + stage + 1) * m + mb, cross) if stage < last else (stage * m + mb, False)
            else:
                dep, hop = (stages + stage) * m + mb, False
            ops.append((dep, hop, (kind * stages + stage) * m + mb, kind * stages + stage))
        table.append(tuple(ops))
    return tuple(table)


@lru_cache(maxsize=256)
def _frozen_table(schedule: str, pp: int, vpp: int, m: int) -> tuple[tuple[tuple[int, bool, int, int], ...], ...]:
    return op_table(_frozen_order(schedule, pp, vpp, m), pp, vpp, m)


def run_orders(orders: Sequence[Sequence[tuple[int, int, int]]], pp: int, vpp: int, m: int,
               durations: tuple[list[float], ...], latency_s: float,
               table: Sequence[Sequence[tuple[int, bool, int, int]]] | None = None) -> tuple[list[float], list[float]]:
    """Start and end time of every operation, indexed by ``_op_id``; ``-1`` marks one that never ran.

    Each device advances through its order while the next operation's dependency has ended; otherwise it
    parks on that dependency and is woken when it ends. Raises ``AsapError`` if some device never finishes.
    ``table``: the orders' ``op_table``, where the caller keeps it.
    """
    stages = pp * vpp
    ops_of = op_table(orders, pp, vpp, m) if table is None else table
    if any(len(times) < stages for times in durations):
        raise AsapError("schedule", f"each kind of operation needs a time per virtual stage ({stages})")
    duration = [t for kind in range(3) for t in durations[kind][:stages]]  # by kind * stages + stage
    starts = [-1.0] * (3 * stages * m)
    ends = [-1.0] * (3 * stages * m)
    position = [0] * pp
    free_s = [0.0] * pp
    parked: dict[int, list[int]] = {}
    ready = deque(range(pp))
    while ready:
        device = ready.popleft()
        ops = ops_of[device]
        i, now = position[device], free_s[device]
        while i < len(ops):
            dep, hop, op, d = ops[i]
            if dep >= 0:
                dep_end = ends[dep]
                if dep_end < 0:
                    parked.setdefault(dep, []).append(device)
                    break
                start = max(now, dep_end + latency_s) if hop else max(now, dep_end)
            else:
                start = now
            now = start + duration[d]
            starts[op], ends[op] = start, now
            i += 1
            waiting = parked.pop(op, None)
            if waiting:
                ready.extend(waiting)
        position[device], free_s[device] = i, now
    stuck = [d for d in range(pp) if position[d] < len(orders[d])]
    if stuck:
        kind, mb, chunk = orders[stuck[0]][position[stuck[0]]]
        raise AsapError("schedule", f"deadlock: device {stuck[0]} waits forever before "
                                    f"{KIND_NAMES[kind]}{mb} (chunk {chunk})")
    return starts, ends


def device_memory(order: OrderedOps, device: int, pp: int, act: list[float],
                  retained: float) -> tuple[int, float]:
    """Peak (micro-batch, chunk) pairs held and peak activation bytes on one device, walking its order.

    F allocates; B releases (all of it, or all but ``retained`` for a split backward); W releases the rest.
    The device runs one operation at a time, so its order is also the order of its memory events.
    """
    held = peak_held = 0
    bytes_now = peak_bytes = 0.0
    split = any(kind == W for kind, _, _ in order)
    for kind, _, chunk in order:
        a = act[chunk * pp + device]
        if kind == F:
            held += 1
            bytes_now += a
            peak_held = max(peak_held, held)
            peak_bytes = max(peak_bytes, bytes_now)
        elif kind == B:
            bytes_now -= a * (1.0 - retained) if split else a
            held -= 0 if split else 1
        else:
            bytes_now -= a * retained
            held -= 1
    return peak_held, peak_bytes


def summarize(schedule: str, pp: int, vpp: int, m: int, orders: list[OrderedOps], starts: list[float],
              ends: list[float], durations: tuple[list[float], ...], act: list[float], retained: float,
              keep_timeline: bool = True) -> ScheduleSimulation:
    """Step time, busy and bubble time per device, memory peaks and the timeline (sorted by start)."""
    stages = pp * vpp
    busy = [sum(durations[kind][chunk * pp + d] for kind, _, chunk in order) for d, order in enumerate(orders)]
    step_s = max(device_end_s(order, d, pp, stages, m, ends) for d, order in enumerate(orders))
    bubble = [step_s - b for b in busy]
    memory = [device_memory(order, d, pp, act, retained) for d, order in enumerate(orders)]
    return ScheduleSimulation(
        schedule=schedule, pp=pp, vpp=vpp, micro_batches=m, step_time_s=step_s, busy_s=tuple(busy),
        bubble_s=tuple(bubble), bubble_fraction=sum(bubble) / sum(busy),
        peak_in_flight=tuple(p for p, _ in memory), peak_activation_bytes=tuple(b for _, b in memory),
        timeline=build_timeline(orders, pp, m, starts, ends) if keep_timeline else ())


def build_timeline(orders: list[OrderedOps], pp: int, m: int, starts: list[float],
                   ends: list[float]) -> tuple[PipelineOp, ...]:
    """Every operation with its device, kind, micro-batch, chunk and times, sorted by start then device."""
    stages = len(starts) // (3 * m)
    ops = []
    for device, order in enumerate(orders):
        for kind, mb, chunk in order:
            op = _op_id(kind, mb, chunk * pp + device, stages, m)
            ops.append(PipelineOp(device, KIND_NAMES[kind], mb, chunk, starts[op], ends[op]))
    ops.sort(key=attrgetter("start_s", "device"))
    return tuple(ops)


def device_end_s(order: Sequence[tuple[int, int, int]], device: int, pp: int, stages: int, m: int, ends: list[float]) -> float:
    """When a device's last operation ends (its order is sequential, so the last one ends last)."""
    kind, mb, chunk = order[-1]
    return ends[_op_id(kind, mb, chunk * pp + device, stages, m)]


# --------------------------------------------------------------------------------------------------------------
# Closed forms, for comparison (even stages, no p2p latency)
# --------------------------------------------------------------------------------------------------------------

def closed_form_step_time_s(schedule: str, pp: int, vpp: int, m: int, forward_s: float, backward_s: float,
                            b_share: float = 0.5) -> float:
    """The textbook step time for even stages and free transfers; times are per virtual stage (chunk).

    1F1B and GPipe: ``(m + pp - 1)(t_f + t_b)``; interleaved: ``m vpp (t_f + t_b) + (pp - 1)(t_f + t_b)`` (the
    bubble shrinks by vpp because each chunk is 1/vpp of the stage, Narayanan et al. 2021, eq. 2); ZB-H1:
    ``m (t_f + t_b) + (pp - 1)(t_f + t_B - t_W)`` (Qi et al. 2023, sec. 3.1).
    """
    t = forward_s + backward_s
    if schedule == "zb":
        t_b, t_w = backward_s * b_share, backward_s * (1.0 - b_share)
        return m * t + (pp - 1) * (forward_s + t_b - t_w)
    return m * vpp * t + (pp - 1) * t
