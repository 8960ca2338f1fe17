"""Context parallelism's exchange (``cp_comm``): the Ulysses all-to-alls and the K,V all-gather against hand
figures (Llama 3 8B, s = 32K, cp = 4 inside one H100 node), the a2a head rule, and the ring as the default."""

import numpy as np
import pytest

from asap.cost.batch import StrategyBatch
from asap.cost.collectives import _tier_Bps, all_gather_s, all_to_all_s
from asap.cost.communication import cp_exchange_s
from asap.cost.estimate import estimate_spelled
from asap.errors import AsapError
from asap.spec.placement import Placement
from asap.spec.strategy import Strategy
from asap.spec.job import Job

MIB = 2 ** 20


def job(framework="megatron", model="llama3-8b", nodes=1):
    return Job.from_names(model, "dgx-h100-8node", 8, 32768, "bf16", framework=framework, nodes=nodes)


def _exchange(comm: str):
    j = job()
    S = StrategyBatch.from_strategies([Strategy(dp=2, cp=4, cp_comm=comm)])
    place = Placement.of(S)
    return j, S, place, cp_exchange_s(j, S, S.mbs * 32768 / S.cp, place)


def test_a2a_hand_figure():
    """T = 32768/4 = 8192 tokens per rank: Q and O are 8192 x 4096 x 2 B = 64 MiB each, K,V 8192 x 2 x 8 x 128 x
    2 B = 32 MiB (kv width); 4 all-to-alls move 3/4 of (64 + 16 + 16 + 64) MiB = 120 MiB per pass over NVLink."""
    j, S, place, (ring, fwd, bwd) = _exchange("a2a")
    intra, _ = _tier_Bps(j.cluster)
    latency = all_to_all_s(j.cluster, 0.0, *place.group("cp"))
    moved = 3 / 4 * (64 + 16 + 16 + 64) * MIB
    assert fwd[0] - 4 * latency[0] == pytest.approx(moved / intra, rel=1e-6)
    assert bwd[0] == pytest.approx(fwd[0]) and ring[0] == 0.0


def test_allgather_hand_figure():
    """The gathered K,V: 4 x 32 MiB; backward gathers again and reduce-scatters dK,dV."""
    j, S, place, (ring, fwd, bwd) = _exchange("allgather")
    gather = all_gather_s(j.cluster, 4 * 32 * MIB, *place.group("cp"))
    assert fwd[0] == pytest.approx(gather[0]) and bwd[0] == pytest.approx(2 * gather[0]) and ring[0] == 0.0


def test_ring_is_overlapped_and_default():
    j, S, place, (ring, fwd, bwd) = _exchange("p2p")
    assert ring[0] > 0 and fwd[0] == 0 and bwd[0] == 0
    default = estimate_spelled(job(), "cp=4")
    p2p = estimate_spelled(job(), "cp=4,cp_comm=p2p")
    assert default.step_time_s == p2p.step_time_s and default.strategy.cp_comm == "p2p"
    assert "cp_comm" not in str(default.strategy)
    a2a = estimate_spelled(job(), "cp=4,cp_comm=a2a")
    assert a2a.step_time_s != default.step_time_s and "cp_comm=a2a" in str(a2a.strategy)


def test_stack_defaults():
    assert estimate_spelled(job("maxtext"), "cp=4").strategy.cp_comm == "allgather"
    assert estimate_spelled(job("maxtext"), "cp=1").strategy.cp_comm == "p2p"  # no exchange at cp=1
    with pytest.raises(AsapError, match="cp_comm"):
        estimate_spelled(job("maxtext"), "cp=4,cp_comm=p2p")


def test_bad_input():
    with pytest.raises(AsapError, match="strategy.cp_comm"):
        estimate_spelled(job(), "cp=4,cp_comm=ring")
    # Ulysses splits heads: tp*cp = 16 does not divide the 8 KV heads
    with pytest.raises(AsapError, match="strategy.cp_comm"):
        estimate_spelled(job(nodes=2), "tp=4,cp=4,dp=1,cp_comm=a2a")
    assert np.isfinite(estimate_spelled(job(nodes=2), "tp=4,cp=4,dp=1,cp_comm=allgather").step_time_s)
