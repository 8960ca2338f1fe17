"""Against figures worked out by hand: data-parallel traffic that shares links with TP/CP
traffic or meets the step boundary (asap.cost.dp_overlap), and the stack defaults a published run leaves
unstated (asap.spec.framework.unstated_defaults, torchtitan's pipeline config)."""

from __future__ import annotations

import numpy as np
import pytest

from asap.cost.batch import StrategyBatch
from asap.cost.dp_overlap import bucketed_exposed_s, dp_buckets, dp_link_busy_s, dp_on_scale_out
from asap.cost.estimate import data_parallel_terms, estimate_spelled as estimate  # text is parsed at this edge
from asap.spec.framework import FRAMEWORKS, unstated_defaults
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.strategy import complete_strategy
from asap.spec.train import TrainSpec
from asap.validate import validate_case

HOPPER_TP_OVERLAP = 0.3  # families.py: the hopper family's tp_overlap


def _batch(text: str, devices: int) -> StrategyBatch:
    parts = dict(kv.split("=") for kv in text.split(","))
    return StrategyBatch.from_strategies([complete_strategy({k: int(v) for k, v in parts.items()}, devices)])


def test_bucket_pipeline_by_hand():
    # C = 1 s of traffic in 4 buckets behind a 2 s window: the first bucket is ready after 0.5 s, the traffic
    # fits, and the last bucket's 0.25 s is left after the window: max(1 - 2 * 3/4, 1/4) = 0.25
    assert float(bucketed_exposed_s(1.0, 2.0, 4)) == pytest.approx(0.25)
    # C = 3 s: the window hides 2 * 3/4 = 1.5 s of it
    assert float(bucketed_exposed_s(3.0, 2.0, 4)) == pytest.approx(1.5)
    # one bucket: nothing overlaps (the reduction starts when the backward ends)
    assert float(bucketed_exposed_s(1.0, 5.0, 1)) == pytest.approx(1.0)
    assert float(bucketed_exposed_s(0.0, 1.0, 4)) == 0.0


def test_stack_buckets():
    megatron, deepspeed, torchtitan = (FRAMEWORKS[n] for n in ("megatron", "deepspeed", "torchtitan"))
    # Megatron-Core: max(4e7, 1e6 * dp_cp) parameters: 4e7 at dp 8, 4.8e7 at dp 48; ZeRO-3 per layer (0)
    assert list(megatron.dp_bucket_elements(np.array([1, 1, 3]), np.array([8, 48, 48]))) == [4e7, 4.8e7, 0.0]
    assert float(deepspeed.dp_bucket_elements(1, 512)) == 5e8
    # torchtitan: DDP's 100 MiB of fp32 gradients; FSDP2 (zero 2 and 3) per block
    assert float(torchtitan.dp_bucket_elements(0, 8)) == 100 * 2 ** 20 / 4
    assert float(torchtitan.dp_bucket_elements(2, 8)) == 0.0
    # 1e9 parameters in buckets of 4.8e7: ceil(20.83) = 21; per layer over 10 layers: 10
    assert float(dp_buckets(4.8e7, 1e9, 10)) == 21
    assert float(dp_buckets(0.0, 1e9, 10)) == 10


def test_dp_shares_nvlink_with_tp_inside_a_node_but_not_across_nodes():
    one_node, eight_nodes = load_cluster("h100-sxm", nodes=1), load_cluster("h100-sxm", nodes=8)
    tp_s, cp_total, cp_exposed = np.array([1.0]), np.array([0.0]), np.array([0.0])
    inside = _batch("tp=2,dp=4", 8)
    # dp=4 and tp=2 in one NVLink node: the hidden TP traffic (0.3 of it) keeps the DP group's link busy
    assert not dp_on_scale_out(one_node, inside)[0]
    assert dp_link_busy_s(one_node, inside, tp_s, cp_total, cp_exposed)[0] == pytest.approx(HOPPER_TP_OVERLAP)
    # tp=8 inside each node, dp=8 across nodes over the NICs: other links
    across = _batch("tp=8,dp=8", 64)
    assert dp_on_scale_out(eight_nodes, across)[0]
    assert dp_link_busy_s(eight_nodes, across, tp_s, cp_total, cp_exposed)[0] == 0.0
    # cp=2 across nodes (stride tp=8) and dp across nodes: the hidden ring traffic shares the NICs
    cp_across = _batch("tp=8,cp=2,dp=4", 64)
    busy = dp_link_busy_s(eight_nodes, cp_across, np.array([0.0]), np.array([0.9]), np.array([0.1]))
    assert busy[0] == pytest.approx(0.8)


def test_tp_and_dp_on_an_ici_torus_use_their_own_links():
    slice_ = load_cluster("tpu-v5p", nodes=16)  # 64 chips, one 4x4x4 slice
    s = _batch("tp=4,dp=16", 64)
    assert dp_link_busy_s(slice_, s, np.array([1.0]), np.array([0.0]), np.array([0.0]))[0] == 0.0


def test_one_micro_batch_leaves_a_bucket_of_each_collective_exposed():
    """Megatron ZeRO-1 with one micro-batch per step: whatever the backward's length, the last reduce-scatter
    bucket and the first all-gather bucket serialize with the optimizer at the step boundary."""
    model = load_model("llama3-8b")
    est = estimate(Job.resolve(model, load_cluster("h100-sxm", nodes=8), TrainSpec(64, 4096, "bf16")),
                   "dp=64,mbs=1,zero=1")
    buckets = np.ceil(model.num_params() / 6.4e7)  # max(4e7, 1e6 * 64) per bucket
    assert est.exposed_s["dp_comm"] >= est.breakdown_s["dp_comm"] / buckets * (1 - 1e-9)
    assert est.exposed_s["dp_comm"] > 0.0


def test_shared_links_expose_more_dp_traffic():
    """One micro-batch, ZeRO-1 on one node: the reduction and gather hide behind the compute whose link time
    they have to themselves; hidden TP traffic on the same NVLink (``link_busy_s``) shrinks that window by its
    seconds, forward and backward in the compute's proportion (1 : 2)."""
    c = load_cluster("h100-sxm", nodes=1)
    S = _batch("tp=2,dp=4,zero=1", 8)
    fw = FRAMEWORKS["megatron"]
    params = 1e9  # one bucket of 1e9 / 4e7 = 25

    def exposed(busy):
        return float(data_parallel_terms(c, S, fw, params, 0.0, 32, np.array([1.0]), np.array([1.0]),
                                         link_busy_s=np.array([busy])).exposed_s[0])

    total = float(data_parallel_terms(c, S, fw, params, 0.0, 32, np.array([1.0]), np.array([1.0])).total_s[0])
    # a 1 s micro-batch hides all but the buckets at the step boundary: 1/25 of the traffic
    assert exposed(0.0) == pytest.approx(total / 25)
    # the window shrinks as the link is busier: exposure grows, and is all of it once no link time is left
    assert exposed(0.0) < exposed(0.99) < exposed(1.0) == pytest.approx(total)


def test_torchtitan_pipeline_defaults_from_its_config():
    tt = FRAMEWORKS["torchtitan"]
    # Llama 3.1 405B: 126 layers, pp 8, Interleaved1F1B without layers_per_stage: 2 stages per rank, 16
    # stages over 126 + 2 effective layers = 8 each, the first and last giving one to the embedding / output
    d = unstated_defaults(tt, {"pp": 8, "schedule": "interleaved"}, 126)
    assert d["vpp"] == 2 and d["mbs"] == 1 and "schedule" not in d
    assert d["layer_split"] == (7,) + (8,) * 14 + (7,)
    assert d["zero"] == 3 and d["recompute"] == "selective"  # FSDP over all ranks, activation_checkpoint
    # no schedule named: 1F1B, one stage per rank; 32 layers + 2 over 4 stages: 9, 9, 8, 8 less the ends
    d = unstated_defaults(tt, {"pp": 4}, 32)
    assert d["schedule"] == "1f1b" and d["vpp"] == 1 and d["layer_split"] == (8, 9, 8, 7)
    # what the run states stays; without a pipeline no pipeline knob is pinned
    assert "mbs" not in unstated_defaults(tt, {"pp": 4, "mbs": 2}, 32)
    assert set(unstated_defaults(tt, {"tp": 8}, 32)) == {"zero", "recompute", "a2a_overlap"}
    # Megatron: the distributed optimizer of its recipes, no recomputation, the expert all-to-all overlap off
    # (overlap_moe_expert_parallel_comm False unless a recipe turns it on), no pipeline defaults
    assert unstated_defaults(FRAMEWORKS["megatron"], {"pp": 4}, 32) == {"zero": 1, "recompute": "none",
                                                                        "a2a_overlap": 0}
    # a run that states the overlap keeps it; the dispatcher is never pinned (the best completion's)
    stated = unstated_defaults(FRAMEWORKS["megatron"], {"pp": 4, "a2a_overlap": 1}, 32)
    assert "a2a_overlap" not in stated and "dispatcher" not in stated
    assert unstated_defaults(FRAMEWORKS["maxtext"], {}, 32)["recompute"] == "full"


def test_torchtitan_completes_stages_per_rank_for_a_looped_schedule():
    s = complete_strategy({"pp": 4, "schedule": "interleaved"}, 32, framework=FRAMEWORKS["torchtitan"])
    assert s.vpp == 2
    assert complete_strategy({"pp": 4, "schedule": "interleaved"}, 32, framework=FRAMEWORKS["megatron"]).vpp == 1


def test_validate_prices_a_torchtitan_run_with_its_pipeline_defaults():
    case = {"id": "tt-pp", "model": dict(name="llama-like", num_layers=32, hidden_size=4096, ffn_hidden_size=14336,
                                         num_attention_heads=32, num_kv_heads=8, vocab_size=128256),
            "cluster": {"accelerator": "h100-sxm", "devices_per_node": 8, "nodes": 4},
            "train": {"global_batch": 64, "seq_len": 4096, "precision": "bf16", "framework": "torchtitan"},
            "strategy": {"tp": 2, "pp": 4, "schedule": "interleaved"}, "published": {"step_time_s": 1.0}}
    r = validate_case(case)
    assert r.strategy["vpp"] == 2 and r.strategy["mbs"] == 1 and r.strategy["zero"] == 3
    assert r.strategy["recompute"] == "selective"
    # 32 + 2 effective layers over 8 stages: 5, 5, then 4s; the ends give one to the embedding / output
    assert r.strategy["layer_split"] == "4/5/4/4/4/4/4/3"
