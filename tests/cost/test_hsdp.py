"""Hybrid sharded data parallelism (``dp_replicate``): the ZeRO states over one replica's shard group, and the
all-reduce of the sharded gradients across replicas, against hand figures on 2 nodes x 8 H100 (an 8B model)."""

import numpy as np
import pytest

from asap.cost.batch import StrategyBatch
from asap.cost.collectives import spans_domains
from asap.cost.communication import data_parallel_comm, replica_all_reduce_s
from asap.cost.device_memory import dense_and_expert_shards
from asap.cost.estimate import estimate_spelled
from asap.errors import AsapError
from asap.spec.placement import Placement
from asap.spec.strategy import Strategy
from asap.spec.job import Job
from asap.spec.stack_rules import runnable_strategy

GIB = 2 ** 30


def job(framework="megatron", model="llama3-8b"):
    return Job.from_names(model, "dgx-h100-8node", 64, 8192, "bf16", framework=framework, nodes=2)


def test_groups_shard_inside_a_node_and_replicate_across():
    S = StrategyBatch.from_strategies([Strategy(dp=16, zero=1, dp_replicate=2), Strategy(dp=16, zero=1)])
    place, c = Placement.of(S), job().cluster
    assert list(place.group("dp_shard").size) == [8, 16] and list(place.group("dp_replicate").size) == [2, 1]
    assert list(place.group("dp_replicate").stride) == [8, 16]  # the replicas outermost: one node apart
    assert list(spans_domains(c, *place.group("dp_shard"))) == [False, True]
    assert list(spans_domains(c, *place.group("dp_replicate"))) == [True, False]
    assert list(dense_and_expert_shards(S)[0]) == [8, 16]


def test_replica_all_reduce_hand_figure():
    """8.03e9 fp32 gradients reduce-scattered over the node's 8 GPUs leave a 4.015 GB shard per GPU; the
    all-reduce over 2 ranks moves 2 (g-1)/g = 1x it over one 400 Gb/s NIC per GPU (50 GB/s x the family's
    network efficiency): about 90 ms per gradient sync, 0 without replicas."""
    j = job()
    P = j.model.num_params()
    S = StrategyBatch.from_strategies([Strategy(dp=16, zero=1, dp_replicate=2), Strategy(dp=16, zero=1)])
    eff = j.cluster.accelerator.family_constants.net_efficiency
    hand_s = 4.0 * P / 8 / (eff * 50e9)
    t = replica_all_reduce_s(j.cluster, Placement.of(S), P, 0.0, 4.0)
    assert t[0] == pytest.approx(hand_s, rel=0.01) and t[1] == 0.0
    # the sync adds it to the shard group's reduce-scatter (in-node now, so cheaper than over both nodes)
    dpc = data_parallel_comm(j.cluster, S, P, 0.0, grad_bytes=4.0)
    assert dpc.grad_sync_s[0] > t[0] and dpc.grad_sync_s[0] - t[0] < dpc.grad_sync_s[1]


def test_memory_hand_figure_and_estimate():
    """Megatron's distributed optimizer (zero 1) over dp=16: 12 B x 8.03e9 / 16 = 5.61 GiB of fp32 master and
    Adam states per GPU; with two instances (dp_replicate=2) each shards over 8: 11.22 GiB."""
    j = job()
    P = j.model.num_params()
    one = estimate_spelled(j, "zero=1,recompute=full")
    two = estimate_spelled(j, "zero=1,recompute=full,dp_replicate=2")
    assert one.memory_gb["optimizer"] == pytest.approx(12 * P / 16 / GIB, rel=1e-3)
    assert two.memory_gb["optimizer"] == pytest.approx(12 * P / 8 / GIB, rel=1e-3)
    assert two.memory_gb["weights"] == one.memory_gb["weights"] and two.strategy.dp_replicate == 2


def test_legality_one_line():
    with pytest.raises(AsapError, match=r"strategy\.dp_replicate.*zero=0"):
        estimate_spelled(job(), "zero=0,dp_replicate=2")
    with pytest.raises(AsapError, match=r"strategy\.dp_replicate.*does not divide dp=16"):
        estimate_spelled(job(), "zero=1,dp_replicate=3")
    # the stacks' limits are rows of asap.spec.stack_rules: refused where the stack must run it, priced as a what-if
    with pytest.raises(AsapError, match=r"strategy\.dp_replicate: deepspeed cannot express dp_replicate=2 with "
                                        r"zero=1 \(hybrid sharding with zero 3\)"):
        runnable_strategy(job("deepspeed"), "zero=1,dp_replicate=2")  # MiCS: ZeRO-3
    with pytest.raises(AsapError, match=r"strategy\.dp_replicate: asap cannot express .*\(no hybrid sharding\)"):
        runnable_strategy(job("asap"), "zero=1,dp_replicate=2")
    assert runnable_strategy(job("asap"), "zero=1,dp_replicate=2", any_stack=True).dp_replicate == 2


def test_batch_default_is_one_and_prices_alike():
    S = StrategyBatch.from_strategies([Strategy(dp=16, zero=3)])
    assert int(S.dp_replicate[0]) == 1 and "dp_replicate" not in Strategy(dp=16).to_dict()
    assert np.array_equal(StrategyBatch(**{k: S[k] for k in S.keys() if k != "dp_replicate"}).dp_replicate, [1])
