"""The pipeline's exposed point-to-point messages (asap.cost.pipeline.exposed_p2p_messages) against event
simulations of the stacks' schedules.

Non-interleaved 1F1B: Megatron-LM's ``forward_backward_pipelining_without_interleaving`` written down call by
call (recv_forward, forward, send_forward in the warm-up; forward, send_forward_recv_backward, backward,
send_backward_recv_forward in the steady state; recv_backward, backward, send_backward in the cool-down), every
call blocking and each batched exchange a rendezvous of the two neighbours that holds both for the message's
time. Interleaved 1F1B: the schedule simulator of the cost model with a transfer latency (the steady state's
exchanges overlapped, ``--overlap-p2p-communication``)."""

import numpy as np
import pytest

from asap.cost.pipeline import exposed_p2p_messages
from asap.cost.schedule_sim import simulate_schedule


def _megatron_1f1b_orders(pp: int, m: int) -> list[list]:
    orders = []
    for d in range(pp):
        first, last = d == 0, d == pp - 1
        warmup = min(pp - d - 1, m)
        order = []
        for j in range(warmup):
            order += ([] if first else [("comm", [("rf", j)])]) + [("F", j)] + ([] if last else [("comm", [("sf", j)])])
        steady = m - warmup
        if steady and not first:
            order.append(("comm", [("rf", warmup)]))
        for i in range(steady):
            order += [("F", warmup + i)] + ([] if last else [("comm", [("sf", warmup + i), ("rb", i)])])
            order.append(("B", i))
            if first:
                continue
            order.append(("comm", [("sb", i)] if i == steady - 1 else [("sb", i), ("rf", warmup + i + 1)]))
        for j in range(steady, m):
            order += ([] if last else [("comm", [("rb", j)])]) + [("B", j)] + ([] if first else [("comm", [("sb", j)])])
        orders.append(order)
    return orders


def blocking_1f1b_step_s(pp: int, m: int, forward_s: float, backward_s: float, message_s: float) -> float:
    """One step of Megatron's non-interleaved 1F1B with blocking, rendezvous transfers (even stages)."""
    link = {"sf": lambda d, j: ("act", d, j), "rf": lambda d, j: ("act", d - 1, j),
            "sb": lambda d, j: ("grad", d - 1, j), "rb": lambda d, j: ("grad", d, j)}
    orders = _megatron_1f1b_orders(pp, m)
    posted: dict = {}
    position, now = [0] * pp, [0.0] * pp
    moved = True
    while moved:
        moved = False
        for d in range(pp):
            while position[d] < len(orders[d]):
                kind, arg = orders[d][position[d]]
                if kind != "comm":
                    now[d] += forward_s if kind == "F" else backward_s
                else:
                    keys = [link[call](d, j) for call, j in arg]
                    for key in keys:
                        posted.setdefault(key, {})[d] = now[d]
                    if any(len(posted[key]) < 2 for key in keys):
                        break  # the neighbour has not reached its side of the exchange yet
                    now[d] = max(max(posted[key].values()) + message_s for key in keys)
                position[d] += 1
                moved = True
    assert all(position[d] == len(orders[d]) for d in range(pp)), "the order deadlocked"
    return max(now)


@pytest.mark.parametrize("pp,m", [(2, 1), (2, 2), (2, 16), (3, 1), (3, 8), (4, 2), (4, 8), (8, 3), (8, 16),
                                  (8, 64), (16, 32)])
def test_blocking_1f1b_exposes_fill_drain_and_two_exchanges_per_micro_batch(pp, m):
    message_s = 0.05  # below a forward (1) and a backward (2): the exchanges wait on nothing but themselves
    exposed = (blocking_1f1b_step_s(pp, m, 1.0, 2.0, message_s) - blocking_1f1b_step_s(pp, m, 1.0, 2.0, 0.0))
    assert exposed / message_s == pytest.approx(float(exposed_p2p_messages(m, pp, 1)))


@pytest.mark.parametrize("pp,vpp,m", [(4, 2, 8), (8, 2, 16), (8, 2, 64), (4, 4, 16), (8, 4, 32)])
def test_interleaved_exposes_every_virtual_stage_hand_off_of_fill_and_drain(pp, vpp, m):
    def step(latency_s):
        return simulate_schedule(pp, vpp, m, "interleaved", forward_s=1.0 / vpp, backward_s=2.0 / vpp,
                                 p2p_s=latency_s, timeline=False).step_time_s

    assert (step(0.01) - step(0.0)) / 0.01 == pytest.approx(float(exposed_p2p_messages(m, pp, vpp)))


def test_no_pipeline_no_messages_and_arrays_broadcast():
    got = exposed_p2p_messages(np.array([16, 16, 16]), np.array([1, 8, 8]), np.array([1, 1, 2]))
    assert got.tolist() == [0.0, 43.0, 30.0]
