"""Host offload and fp8 weights: what the keys save on the device and what they cost over the host link."""

import pytest

from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
from asap.cost.offload import HOST_LINK_EFFICIENCY
from asap.errors import AsapError
from asap.search.planner import plan
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec
from asap.spec.job import Job

JOB = dict(global_batch=64, seq_len=8192)


def _pair(acc: str, base: str, nodes: int = 16):
    model, cluster, train = load_model("llama3-70b"), load_cluster(acc, nodes=nodes), TrainSpec(**JOB)
    return (estimate(Job.resolve(model, cluster, train), base), estimate(Job.resolve(model, cluster, train), base + ",offload_act=1"),
            cluster)


def test_activation_offload_keeps_a_window_and_pays_the_link():
    """On PCIe Gen5 (H100) the copies outlast the passes and show as host time; NVLink-C2C (GH200) hides them."""
    off, on, _ = _pair("h100-sxm", "tp=8,mbs=1")
    assert on.memory_gb["activations"] < 0.5 * off.memory_gb["activations"]
    for k in ("weights", "grads", "optimizer"):
        assert on.memory_gb[k] == pytest.approx(off.memory_gb[k])
    assert on.breakdown_s["host"] > off.breakdown_s["host"]
    assert on.step_time_s > off.step_time_s
    off_c2c, on_c2c, c = _pair("gh200", "tp=4,mbs=1", nodes=32)
    assert c.accelerator.host_link_gbps > 5 * 64
    assert on_c2c.step_time_s - off_c2c.step_time_s < 0.2 * (on.step_time_s - off.step_time_s)


def test_optimizer_offload_moves_the_states_and_steps_on_the_host():
    model, cluster, train = load_model("llama3-70b"), load_cluster("h100-sxm", nodes=2), TrainSpec(**JOB)
    off = estimate(Job.resolve(model, cluster, train), "tp=8,pp=2,zero=1")
    on = estimate(Job.resolve(model, cluster, train), "tp=8,pp=2,zero=1,offload_opt=1")
    assert on.memory_gb["optimizer"] == 0 and off.memory_gb["optimizer"] > 1
    # the device's shard: P parameters, 6 B each over the link at its efficiency, or the host's Adam
    params = off.memory_gb["optimizer"] * 2**30 / 12
    link_s = 6 * params / (cluster.accelerator.host_link_gbps * 1e9 * HOST_LINK_EFFICIENCY)
    host_s = 32 * params / (cluster.accelerator.host_mem_gbps * 1e9)
    assert on.breakdown_s["optimizer"] == pytest.approx(max(link_s, host_s), rel=0.02)
    assert on.breakdown_s["optimizer"] > off.breakdown_s["optimizer"]
    with pytest.raises(AsapError, match="offload_opt"):
        estimate(Job.resolve(model, cluster, train), "tp=8,pp=2,zero=0,offload_opt=1")


def test_fp8_weights_are_one_byte_and_need_fp8():
    """Megatron-Core on Hopper (Transformer Engine: rowwise fp8 and its transpose, 1 B each): bf16 + both copies,
    2 + 2 B per parameter; fp8_param keeps no bf16 copy, 2 B."""
    model, cluster = load_model("llama3-70b"), load_cluster("h100-sxm", nodes=8)
    fp8 = TrainSpec(**JOB, precision="fp8")
    copy = estimate(Job.resolve(model, cluster, fp8), "tp=8,pp=2")
    only = estimate(Job.resolve(model, cluster, fp8), "tp=8,pp=2,fp8_param=1")
    assert only.memory_gb["weights"] == pytest.approx(copy.memory_gb["weights"] / 2)
    with pytest.raises(AsapError, match="fp8_param"):
        estimate(Job.resolve(model, cluster, TrainSpec(**JOB)), "tp=8,pp=2,fp8_param=1")


def test_planner_offloads_the_optimizer_only_when_nothing_fits_without():
    """Llama 3 70B on one 8-GPU H100 node: no strategy fits with the optimizer on the device (ZeRO-1 over dp <= 8
    leaves too much), so the plan's candidates are the ones with the optimizer on the host."""
    model, cluster, train = load_model("llama3-70b"), load_cluster("h100-sxm", nodes=1), TrainSpec(16, 4096)
    with pytest.raises(AsapError):
        plan(Job.resolve(model, cluster, train), fixed={"offload_opt": 0}, top=1)
    r = plan(Job.resolve(model, cluster, train), top=2)
    assert r.candidates and all(c.strategy.offload_opt == 1 and c.fits for c in r.candidates)
