"""Strategies: parsing, defaults and every legality rule, each a one-line message naming the key."""

import pytest

from asap.errors import AsapError
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.strategy import Schedule, parse_strategy, resolve_strategy
from asap.spec.train import TrainSpec

LLAMA = load_model("llama3-70b")
QWEN_MOE = load_model("qwen3-30b-a3b")
TRAIN = TrainSpec(global_batch=256, seq_len=8192)


def test_parse_and_fill_defaults():
    s = resolve_strategy("tp=8,pp=4,recompute=full", LLAMA, TRAIN, 256)
    assert (s.dp, s.tp, s.pp, s.vpp, s.cp, s.mbs, s.sp, s.zero, str(s.schedule)) == (8, 8, 4, 1, 1, 1, 1, 1, "1f1b")
    assert str(s.recompute) == "full"
    assert resolve_strategy("tp=2,pp=4,vpp=2", LLAMA, TRAIN, 64).schedule == Schedule.INTERLEAVED


@pytest.mark.parametrize("text, devices, field, needle", [
    ("tp=8,pp=4,dp=4", 256, "strategy.dp", "256 devices"),
    ("tp=3", 24, "strategy.tp", "num_attention_heads"),
    ("tp=1,sp=1", 8, "strategy.sp", "tp > 1"),
    ("pp=1,vpp=2", 8, "strategy.vpp", "pp > 1"),
    ("pp=2,schedule=interleaved", 8, "strategy.schedule", "vpp > 1"),
    ("tp=8,pp=5,vpp=2", 80, "strategy.vpp", "divisible by pp"),
    ("mbs=3", 8, "strategy.mbs", "not divisible"),
    ("tp=8,ep=2", 8, "strategy.ep", "no experts"),
    ("tp=8,pp=82", 656, "strategy.pp", "num_layers"),
    ("cp=3", 9, "strategy.cp", "seq_len"),
    ("tp=8,pp=4,vpp=21", 256, "strategy.vpp", "virtual stages"),
    ("foo=1", 8, "strategy.foo", "unknown key"),
    ("tp=two", 8, "strategy.tp", "integer"),
    ("recompute=some", 8, "strategy.recompute", "none, selective, full"),
    ("zero=4", 8, "strategy.zero", "0, 1, 2 or 3"),
    ("tp", 8, "strategy", "key=value"),
])
def test_illegal_strategies_name_the_key(text, devices, field, needle):
    train = TrainSpec(global_batch=240, seq_len=8193) if "cp=3" in text else TRAIN
    with pytest.raises(AsapError) as e:
        resolve_strategy(text, LLAMA, train, devices)
    assert e.value.field == field
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_expert_placement_rules():
    # Megatron-Core folding: etp*ep must divide tp*cp*dp of a stage; ep must divide the experts
    s = resolve_strategy("tp=2,ep=8", QWEN_MOE, TRAIN, 16)
    assert s.edp == 2 * 8 // (s.etp * 8)
    with pytest.raises(AsapError, match="etp\\*ep"):
        resolve_strategy("tp=2,ep=16,etp=2", QWEN_MOE, TRAIN, 16)
    with pytest.raises(AsapError, match="does not divide num_experts"):
        resolve_strategy("ep=3", QWEN_MOE, TrainSpec(global_batch=12, seq_len=4096), 6)
    with pytest.raises(AsapError, match="expert_ffn_hidden_size"):
        odd = dict(name="odd", num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=8,
                   vocab_size=100, moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=100))
        resolve_strategy("tp=8,etp=8,ep=1", load_model(odd), TRAIN, 8)
    # default etp falls back to 1 when ep*tp would not fit the stage
    assert resolve_strategy("tp=2,ep=16", QWEN_MOE, TRAIN, 16).etp == 1


def test_cluster_overrides_and_errors(tmp_path):
    c = load_cluster("h100-sxm", nodes=4)
    assert c.num_devices == 32
    assert load_cluster("dgx-h100-8", devices=16).nodes == 2
    f = tmp_path / "c.yaml"
    f.write_text("accelerator: {peak_tflops: {bf16: 100}, hbm_gb: 24, hbm_gbps: 900}\ndevices_per_node: 4\nnodes: 2\n"
                 "inter_node_gbps: 12.5\n")
    c = load_cluster(str(f))
    assert c.num_devices == 8 and c.accelerator.inter_node_gbps == 12.5
    f.write_text("accelerator: h100-sxm\nnodes: -1\n")
    with pytest.raises(AsapError, match="cluster.nodes"):
        load_cluster(str(f))
    f.write_text("accelerator: h900\n")
    with pytest.raises(AsapError, match="cluster.accelerator"):
        load_cluster(str(f))


def test_parse_returns_only_given_keys():
    assert parse_strategy("tp=2, pp=4 ,recompute=selective") == {"tp": 2, "pp": 4, "recompute": "selective"}
    assert parse_strategy("") == {}


def test_tp_beyond_the_kv_heads_replicates_them():
    """tp may exceed the KV heads when it is a multiple of them (each KV head replicated over tp / kv ranks);
    a tp that neither divides nor is a multiple of them is refused."""
    s = resolve_strategy("tp=16", LLAMA, TRAIN, 256)  # 8 KV heads, tp = 16: each head on two ranks
    assert s.tp == 16
    mixtral = load_model("mixtral-8x22b")  # 48 heads, 8 KV heads: tp = 6 divides the heads only
    with pytest.raises(AsapError, match="strategy.tp: tp=6 neither divides nor is a multiple of num_kv_heads=8"):
        resolve_strategy("tp=6", mixtral, TRAIN, 48)


@pytest.mark.parametrize("text", ["tp=2", "tp=8,pp=4,vpp=2,layer_split=3/2/2/2/2/2/2/1,recompute=moe_act+layernorm",
                                  "tp=4,cp=2,ep=4,zero=3,dispatcher=dedup,a2a_overlap=1,offload_act=1,offload_layers=3",
                                  "pp=2,schedule=zb,fp8_param=1,grad_bf16=1,offload_opt=1,mbs=4"])
def test_key_is_the_sorted_text_of_what_str_prints(text):
    """``Strategy.key`` (Memory's text) is ``canonical_text`` of ``str`` parsed again, without the round trip."""
    from asap.spec.strategy import canonical_text, complete_strategy, parse_strategy

    s = complete_strategy(parse_strategy(text), 64)
    assert s.key() == canonical_text(parse_strategy(str(s)))
    assert complete_strategy(parse_strategy(s.key()), 64) == s
