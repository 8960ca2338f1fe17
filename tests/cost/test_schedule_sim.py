"""The pipeline-schedule simulator against the closed forms, the papers' memory figures and its own invariants."""

import time
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from asap.spec.knobs import SCHEDULES, Schedule
from asap.cost.pipeline import pipeline_time_s
from asap.cost.schedule_sim import (closed_form_step_time_s, interleaved_chunk_and_micro_batch,
                                    schedule_order, simulate_schedule)
from asap.errors import AsapError

TF, TB = 1.0, 2.0  # a micro-batch's forward and backward on one stage (the usual 1:2)


# --- closed forms, even stages, free transfers ---------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize("pp, m", [(1, 1), (1, 5), (2, 1), (4, 2), (4, 4), (4, 8), (8, 3), (8, 64), (16, 16)])
def test_1f1b_and_gpipe_match_the_closed_form(schedule, pp, m):
    sim = simulate_schedule(pp, 1, m, schedule, forward_s=TF, backward_s=TB)
    assert sim.step_time_s == pytest.approx((m + pp - 1) * (TF + TB))
    assert sim.bubble_fraction == pytest.approx((pp - 1) / m)
    assert all(b == pytest.approx(m * (TF + TB)) for b in sim.busy_s)


@pytest.mark.parametrize("pp, vpp, m", [(2, 2, 4), (4, 2, 4), (4, 2, 8), (4, 4, 8), (4, 3, 12), (8, 2, 64),
                                        (8, 4, 16), (1, 2, 3)])
def test_interleaved_bubble_shrinks_by_vpp(pp, vpp, m):
    # the same model split into vpp chunks per device: each chunk takes 1/vpp of the stage's time
    sim = simulate_schedule(pp, vpp, m, "interleaved", forward_s=TF / vpp, backward_s=TB / vpp)
    ideal_s = m * (TF + TB)
    assert sim.bubble_fraction == pytest.approx((pp - 1) / (vpp * m))
    assert sim.step_time_s == pytest.approx(ideal_s * (1 + (pp - 1) / (vpp * m)))
    assert sim.step_time_s == pytest.approx(
        closed_form_step_time_s("interleaved", pp, vpp, m, TF / vpp, TB / vpp))


@pytest.mark.parametrize("pp, m", [(2, 4), (4, 4), (4, 8), (8, 16), (8, 32), (16, 64)])
def test_zb_h1_bubble_is_a_third_of_1f1b_when_f_b_w_are_equal(pp, m):
    # T_F = T_B = T_W: backward twice the forward, split in half (Qi et al. 2023, sec. 3.1)
    zb = simulate_schedule(pp, 1, m, "zb", forward_s=1.0, backward_s=2.0, b_share=0.5)
    one = simulate_schedule(pp, 1, m, "1f1b", forward_s=1.0, backward_s=2.0)
    zb_bubble_s = zb.step_time_s - 3.0 * m
    assert zb_bubble_s == pytest.approx((pp - 1) * (1.0 + 1.0 - 1.0))  # (p-1)(T_F + T_B - T_W)
    assert zb_bubble_s == pytest.approx((one.step_time_s - 3.0 * m) / 3)
    assert zb.bubble_fraction == pytest.approx(one.bubble_fraction / 3)


@pytest.mark.parametrize("tf, tb, share", [(2.0, 2.0, 0.5), (1.0, 3.0, 2 / 3), (1.5, 2.0, 0.5)])
def test_zb_h1_matches_the_paper_formula_when_w_is_not_longer_than_f(tf, tb, share):
    pp, m = 6, 24
    sim = simulate_schedule(pp, 1, m, "zb", forward_s=tf, backward_s=tb, b_share=share)
    t_b, t_w = tb * share, tb * (1 - share)
    assert t_w <= tf
    assert sim.step_time_s == pytest.approx(m * (tf + tb) + (pp - 1) * (tf + t_b - t_w))
    assert sim.step_time_s == pytest.approx(closed_form_step_time_s("zb", pp, 1, m, tf, tb, share))


@pytest.mark.parametrize("schedule, pp, vpp, m", [("1f1b", 4, 1, 8), ("gpipe", 8, 1, 16), ("zb", 4, 1, 12),
                                                  ("interleaved", 4, 2, 8), ("interleaved", 8, 4, 32)])
def test_agrees_with_the_cost_model_closed_form(schedule, pp, vpp, m):
    """asap.cost.pipeline (what the cost model prices) and the simulator agree on even stages."""
    stage_s = TF + TB  # one micro-batch through one device's whole share
    sim = simulate_schedule(pp, vpp, m, schedule, forward_s=TF / vpp, backward_s=TB / vpp)
    closed = float(pipeline_time_s(m, pp, vpp, Schedule(SCHEDULES.index(schedule)), stage_s, stage_s))
    assert sim.step_time_s == pytest.approx(closed)


# --- memory: in-flight micro-batches ------------------------------------------------------------------------

@pytest.mark.parametrize("pp, m", [(4, 2), (4, 4), (4, 16), (8, 5), (8, 64)])
def test_1f1b_holds_min_m_pp_on_the_first_stage_and_gpipe_holds_m(pp, m):
    one = simulate_schedule(pp, 1, m, "1f1b")
    assert one.peak_in_flight[0] == min(m, pp)
    assert list(one.peak_in_flight) == [min(m, pp - r) for r in range(pp)]
    assert list(simulate_schedule(pp, 1, m, "gpipe").peak_in_flight) == [m] * pp


@pytest.mark.parametrize("pp, vpp, m", [(4, 2, 8), (4, 4, 8), (8, 2, 64), (8, 4, 16), (4, 2, 4)])
def test_interleaved_first_stage_in_flight_follows_megatron(pp, vpp, m):
    # Korthikanti et al. 2022 sec. 4.2.3 / Megatron's warm-up: (pp-1)*2 + (vpp-1)*pp chunks, plus the 1F1B one
    sim = simulate_schedule(pp, vpp, m, "interleaved")
    assert sim.peak_in_flight[0] == min((pp - 1) * 2 + (vpp - 1) * pp + 1, vpp * m)


@pytest.mark.parametrize("pp, m", [(4, 8), (8, 32), (8, 4)])
def test_zb_h1_keeps_1f1b_peak_memory(pp, m):
    zb = simulate_schedule(pp, 1, m, "zb", activation_bytes=10.0)
    assert max(zb.peak_in_flight) == max(simulate_schedule(pp, 1, m, "1f1b").peak_in_flight) == min(m, pp)
    assert max(zb.peak_activation_bytes) == pytest.approx(10.0 * min(m, pp))
    # releasing at B what W does not need lowers the later stages' peak (they defer the most W passes)
    lean = simulate_schedule(pp, 1, m, "zb", activation_bytes=10.0, w_retained_fraction=0.25)
    assert lean.peak_activation_bytes[-1] < zb.peak_activation_bytes[-1]


def test_activation_bytes_follow_the_stage():
    act = [4.0, 3.0, 2.0, 1.0]
    sim = simulate_schedule(4, 1, 8, "1f1b", activation_bytes=act)
    assert list(sim.peak_activation_bytes) == [a * n for a, n in zip(act, sim.peak_in_flight, strict=True)]


# --- uneven stages and transfers --------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_heavy_last_stage_sets_the_pace(schedule):
    pp, m = 4, 8
    fwd, bwd = [1.0, 1.0, 1.0, 1.5], [2.0, 2.0, 2.0, 3.0]  # the last stage carries the LM head
    stage_s = [f + b for f, b in zip(fwd, bwd, strict=True)]
    sim = simulate_schedule(pp, 1, m, schedule, forward_s=fwd, backward_s=bwd)
    mean_closed_s = (m + pp - 1) * sum(stage_s) / pp
    assert sim.step_time_s > mean_closed_s
    # exact: the heaviest stage runs all m micro-batches, every other stage adds one pass to the critical path
    assert sim.step_time_s == pytest.approx((m - 1) * max(stage_s) + sum(stage_s))


def test_uneven_interleaved_and_zb_are_slower_than_even():
    even = simulate_schedule(4, 2, 8, "interleaved", forward_s=0.5, backward_s=1.0)
    heavy = simulate_schedule(4, 2, 8, "interleaved", forward_s=[0.5] * 7 + [0.8], backward_s=[1.0] * 7 + [1.6])
    assert heavy.step_time_s > even.step_time_s
    assert simulate_schedule(4, 1, 8, "zb", forward_s=[1, 1, 1, 2]).step_time_s > \
        simulate_schedule(4, 1, 8, "zb").step_time_s


def test_p2p_latency_adds_the_fill_and_drain_hops_to_gpipe():
    pp, m, p2p = 4, 8, 0.1
    sim = simulate_schedule(pp, 1, m, "gpipe", p2p_s=p2p)
    assert sim.step_time_s == pytest.approx((m + pp - 1) * 3.0 + 2 * (pp - 1) * p2p)
    for schedule in ("1f1b", "zb"):
        free = simulate_schedule(pp, 1, m, schedule).step_time_s
        assert simulate_schedule(pp, 1, m, schedule, p2p_s=p2p).step_time_s >= free + 2 * (pp - 1) * p2p


# --- invariants on every operation ------------------------------------------------------------------------------

def assert_timeline_is_consistent(sim, fwd, bwd, share, p2p):
    """Every op once; no op before its dependency (plus p2p across devices); a device runs one op at a time."""
    pp, vpp, m = sim.pp, sim.vpp, sim.micro_batches
    stages = pp * vpp
    split = sim.schedule == "zb"
    ops = {(op.kind, op.micro_batch, op.chunk * pp + op.device): op for op in sim.timeline}
    kinds = "FBW" if split else "FB"
    assert len(ops) == len(sim.timeline) == len(kinds) * stages * m
    assert Counter(op.kind for op in sim.timeline) == {k: stages * m for k in kinds}
    for (kind, mb, s), op in ops.items():
        dur = {"F": fwd[s], "B": bwd[s] * (share if split else 1.0), "W": bwd[s] * (1 - share)}[kind]
        assert op.end_s - op.start_s == pytest.approx(dur)
        hop = p2p if pp > 1 else 0.0
        if kind == "F" and s > 0:
            assert op.start_s >= ops["F", mb, s - 1].end_s + hop - 1e-9
        if kind == "B":
            if s < stages - 1:
                assert op.start_s >= ops["B", mb, s + 1].end_s + hop - 1e-9
            assert op.start_s >= ops["F", mb, s].end_s - 1e-9
        if kind == "W":
            assert op.start_s >= ops["B", mb, s].end_s - 1e-9
    for d in range(pp):
        mine = sorted((op for op in sim.timeline if op.device == d), key=lambda op: op.start_s)
        for a, b in zip(mine, mine[1:], strict=False):
            assert b.start_s >= a.end_s - 1e-9
    assert [op.start_s for op in sim.timeline] == sorted(op.start_s for op in sim.timeline)
    assert sim.step_time_s == pytest.approx(max(op.end_s for op in sim.timeline))


@settings(max_examples=60, deadline=None)
@given(data=st.data(), schedule=st.sampled_from(SCHEDULES), pp=st.integers(1, 6), group=st.integers(1, 4),
       p2p=st.sampled_from([0.0, 0.05, 0.5]), share=st.floats(0.2, 0.8))
def test_dependencies_hold_on_every_op(data, schedule, pp, group, p2p, share):
    vpp = data.draw(st.integers(2, 3)) if schedule == "interleaved" else 1
    m = pp * group if schedule == "interleaved" else data.draw(st.integers(1, 12))
    times = st.lists(st.floats(0.1, 3.0), min_size=pp * vpp, max_size=pp * vpp)
    fwd, bwd = data.draw(times), data.draw(times)
    sim = simulate_schedule(pp, vpp, m, schedule, forward_s=fwd, backward_s=bwd, b_share=share, p2p_s=p2p)
    assert_timeline_is_consistent(sim, fwd, bwd, share, p2p)
    assert sim.step_time_s >= max(sim.busy_s) - 1e-9
    assert all(b >= -1e-9 for b in sim.bubble_s)


def test_interleaved_order_follows_megatron_chunk_ids():
    pp, vpp = 4, 2
    # forwards: micro-batches 0-3 through chunk 0, then 0-3 through chunk 1, then 4-7 through chunk 0, ...
    fwd = [interleaved_chunk_and_micro_batch(k, pp, vpp, True) for k in range(12)]
    assert fwd == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3), (0, 4), (0, 5), (0, 6), (0, 7)]
    # backwards start from the last chunk
    assert interleaved_chunk_and_micro_batch(0, pp, vpp, False) == (1, 0)
    order = schedule_order("interleaved", pp, vpp, 8)
    warmup = [(pp - r - 1) * 2 + (vpp - 1) * pp for r in range(pp)]
    for rank, ops in enumerate(order):
        first_b = next(i for i, (kind, _, _) in enumerate(ops) if kind == 1)
        assert first_b == warmup[rank] + 1  # the warm-up, then one forward, then the first backward


def test_zb_h1_defers_w_by_the_stage_index():
    order = schedule_order("zb", 4, 1, 8)
    for rank, ops in enumerate(order):
        before_first_w = [op for op in ops[:next(i for i, op in enumerate(ops) if op[0] == 2)] if op[0] == 1]
        assert len(before_first_w) == min(rank + 1, 8)


# --- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, kwargs, field", [
    ((4, 1, 8, "interleaved"), {}, "vpp"),
    ((4, 2, 6, "interleaved"), {}, "micro_batches"),
    ((4, 2, 8, "1f1b"), {}, "vpp"),
    ((4, 2, 8, "zb"), {}, "vpp"),
    ((4, 1, 8, "pipedream"), {}, "schedule"),
    ((0, 1, 8, "1f1b"), {}, "pp"),
    ((4, 1, 0, "gpipe"), {}, "micro_batches"),
    ((4, 1, 8, "1f1b"), {"forward_s": [1.0, 1.0]}, "forward_s"),
    ((4, 1, 8, "1f1b"), {"backward_s": -1.0}, "backward_s"),
    ((4, 1, 8, "1f1b"), {"forward_s": float("nan")}, "forward_s"),
    ((4, 1, 8, "zb"), {"b_share": 1.0}, "b_share"),
    ((4, 1, 8, "1f1b"), {"p2p_s": -0.1}, "p2p_s"),
    ((4, 1, 8, "1f1b"), {"activation_bytes": "lots"}, "activation_bytes"),
    ((64, 8, 10**5, "interleaved"), {}, "micro_batches"),
])
def test_bad_inputs_name_the_field(args, kwargs, field):
    with pytest.raises(AsapError) as e:
        simulate_schedule(*args, **kwargs)
    assert e.value.field == field and "\n" not in str(e.value)


def test_default_schedule_follows_vpp():
    assert simulate_schedule(4, 1, 8).schedule == "1f1b"
    assert simulate_schedule(4, 2, 8).schedule == "interleaved"


def test_a_deadlocking_order_is_reported(monkeypatch):
    import asap.cost.schedule_sim as sim_mod

    monkeypatch.setattr(sim_mod, "schedule_order", lambda *a: [[(1, 0, 0), (0, 0, 0)], [(0, 0, 0), (1, 0, 0)]])
    with pytest.raises(AsapError, match="deadlock"):
        sim_mod.simulate_schedule(2, 1, 1, "1f1b")


# --- speed -------------------------------------------------------------------------------------------------------

def test_pp16_vpp4_m256_simulates_well_under_a_second():
    best_s = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        sim = simulate_schedule(16, 4, 256, "interleaved", forward_s=0.25, backward_s=0.5)
        best_s = min(best_s, time.perf_counter() - t0)
    assert len(sim.timeline) == 2 * 16 * 4 * 256
    assert sim.bubble_fraction == pytest.approx(15 / (4 * 256))
    assert best_s < 1.0, best_s


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["1f1b", "interleaved", "zb", "gpipe"]), st.sampled_from([1, 2, 3, 4, 8]),
       st.sampled_from([2, 3, 4]), st.integers(1, 6), st.randoms(use_true_random=False))
def test_the_planners_step_is_the_full_simulations_step(schedule, pp, vpp, rounds, rng):
    """``simulated_step_s`` (the planner's: a cached per-shape operation table) gives exactly the step of
    ``simulate_schedule`` (the order decoded afresh), twice in a row (the second from the cache)."""
    from asap.cost.schedule_sim import simulated_step_s

    vpp = vpp if schedule == "interleaved" else 1
    m = rounds * pp if schedule == "interleaved" else rounds
    stages = pp * vpp
    fwd = [rng.uniform(0.1, 2.0) for _ in range(stages)]
    bwd = [rng.uniform(0.1, 4.0) for _ in range(stages)]
    full = simulate_schedule(pp, vpp, m, schedule, forward_s=fwd, backward_s=bwd).step_time_s
    assert simulated_step_s(pp, vpp, m, schedule, fwd, bwd) == full == simulated_step_s(pp, vpp, m, schedule, fwd,
                                                                                        bwd)
