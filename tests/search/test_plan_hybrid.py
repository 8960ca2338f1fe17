"""The planner's hybrid sharding: besides dp_replicate = 1, each mesh shape whose dp x cp group spans several
scale-up domains gets the one degree that keeps its ZeRO shard group inside a domain (``space.hybrid_degree``),
with a ZeRO stage its stack shards hybrid (``Framework.hsdp_zero``); nothing else."""

import numpy as np

from asap.search.space import enumerate_space, hybrid_degree
from asap.spec.framework import FRAMEWORKS
from asap.spec.loader import load_model
from asap.spec.strategy import check_strategy
from asap.spec.train import TrainSpec

DOMAIN = 8  # 8 nodes of 8 GPUs


def test_hybrid_degree_is_the_domains_the_dp_cp_group_spans():
    cols = {"dp": np.array([32, 4, 8, 16, 3]), "cp": np.array([1, 1, 2, 1, 1]), "tp": np.array([2, 2, 4, 1, 1])}
    # 64 ranks over 8 nodes; 8 ranks in one; 64 over 8; 16 over 2; 3 ranks (less than a node)
    assert hybrid_degree(cols, DOMAIN).tolist() == [8, 1, 8, 2, 1]


def test_space_offers_the_hybrid_degree_beside_one():
    model, train, fw = load_model("llama3-8b"), TrainSpec(256, 4096), FRAMEWORKS["torchtitan"]
    S = enumerate_space(model, 64, DOMAIN, train, {}, fw)
    rep = S.dp_replicate
    hybrid = rep > 1
    assert hybrid.any() and (rep == 1).any()
    span = S.dp * S.cp * S.tp // DOMAIN
    assert (rep[hybrid] == span[hybrid]).all()  # the shard group fills one node, the replicas cross nodes
    assert np.isin(S.zero[hybrid], fw.hsdp_zero).all()
    assert not hybrid[S.dp * S.cp * S.tp <= DOMAIN].any()
    for i in np.flatnonzero(hybrid)[::max(1, hybrid.sum() // 50)]:
        check_strategy(S.strategy(int(i)), model, train, 64, framework=fw)


def test_no_hybrid_rows_where_the_stack_has_none_or_the_key_is_pinned():
    model, train = load_model("llama3-8b"), TrainSpec(256, 4096)
    assert (enumerate_space(model, 64, DOMAIN, train, {}, FRAMEWORKS["asap"]).dp_replicate == 1).all()
    tt = FRAMEWORKS["torchtitan"]
    assert (enumerate_space(model, 64, DOMAIN, train, {"dp_replicate": 1}, tt).dp_replicate == 1).all()
    assert (enumerate_space(model, 64, DOMAIN, train, {"dp_replicate": 2}, tt).dp_replicate == 2).all()
    assert (enumerate_space(model, 8, DOMAIN, train, {}, tt).dp_replicate == 1).all()  # one node: no replicas
