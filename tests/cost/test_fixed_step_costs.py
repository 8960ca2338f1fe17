"""Against figures worked out by hand: the fixed costs of a step that weigh on small models at scale
(asap.cost.step_fixed; the data-parallel buckets as separate collectives, asap.cost.communication), and the
overlap tax at one micro-batch per step."""

from __future__ import annotations

import math

import numpy as np
import pytest

from asap.cost.batch import StrategyBatch
from asap.cost.communication import data_parallel_comm
from asap.cost.dp_overlap import dp_buckets
from asap.cost.estimate import estimate_spelled as estimate
from asap.cost.step_fixed import (ADAM_BYTES_PER_PARAM, OPTIMIZER_KERNELS, fp8_param_amax_s, grad_buffer_zero_s,
                                  grad_norm_s, loss_all_reduce_s, optimizer_step_s, step_fixed_s,
                                  weight_quantise_s)
from asap.spec.framework import FRAMEWORKS
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.strategy import complete_strategy
from asap.spec.train import TrainSpec

LAUNCH_S, HOP_S = 20e-6, 5e-6  # the GPU families' collective launch and ring-hop latencies (spec.families)
HALF_CHUNK = 128 * 1024  # collectives.HALF_BANDWIDTH_CHUNK_BYTES
NET_EFF = 0.9  # hopper / blackwell net_efficiency


def _batch(text: str, devices: int) -> StrategyBatch:
    parts = dict(kv.split("=") for kv in text.split(","))
    return StrategyBatch.from_strategies([complete_strategy({k: int(v) for k, v in parts.items()}, devices)])


def test_each_bucket_is_its_own_collective():
    # 256 H100s on 32 nodes, ZeRO-1 over dp 256: the ring spans the nodes, 8 NICs of 50 GB/s per node against
    # 450 GB/s of NVLink: bus bandwidth 0.9 x 400 = 360 GB/s. 2.048e9 fp32 gradients (8.192 GB) in 8 buckets of
    # 1.024 GB: each rank's chunk per ring step is 1.024e9 / 256 = 4e6 B, at 4e6 / (4e6 + 128 KiB) of the bus.
    cluster = load_cluster("h100-sxm", nodes=32)
    S = _batch("dp=256,zero=1", 256)
    busbw = NET_EFF * 400e9
    latency = LAUNCH_S + 255 * HOP_S  # 1.295 ms: 255 ring steps
    bucket = 1.024e9
    one_bucket = 255 / 256 * bucket / (busbw * 4e6 / (4e6 + HALF_CHUNK)) + latency
    eight = data_parallel_comm(cluster, S, 2.048e9, 0.0, 32, grad_bytes=4.0, buckets=8)
    assert float(eight.grad_sync_s[0]) == pytest.approx(8 * one_bucket, rel=1e-9)
    # the same bytes as one collective pay the latency once, at the bandwidth of a 32 MB chunk
    whole = 255 / 256 * 8 * bucket / (busbw * 32e6 / (32e6 + HALF_CHUNK)) + latency
    one = data_parallel_comm(cluster, S, 2.048e9, 0.0, 32, grad_bytes=4.0)
    assert float(one.grad_sync_s[0]) == pytest.approx(whole, rel=1e-9)
    # seven more latencies: 8 x 4.22 ms against 24.1 ms
    assert float(eight.grad_sync_s[0] - one.grad_sync_s[0]) > 7 * latency
    # the weight all-gathers after a ZeRO-1 step go bucket by bucket too (bf16: half the bytes)
    gather = 255 / 256 * bucket / 2 / (busbw * 2e6 / (2e6 + HALF_CHUNK)) + latency
    assert float(eight.param_gather_s[0]) == pytest.approx(8 * gather, rel=1e-9)


def test_megatron_buckets_at_many_ranks():
    # Megatron-Core's bucket: max(4e7, 1e6 x dp x cp) = 2.56e8 parameters at dp x cp 256; Llama 3.1 8B at tp 2
    # holds 4.015e9 parameters per rank: ceil(15.7) = 16 buckets, 16 reduce-scatters per step
    megatron = FRAMEWORKS["megatron"]
    elements = megatron.dp_bucket_elements(np.array([1]), np.array([256]))
    assert float(elements[0]) == 2.56e8
    assert float(dp_buckets(elements, 4.015e9, 32)[0]) == 16


def test_grad_buffer_memset_by_hand():
    # Megatron-Core zeroes its whole fp32 buffer every step: Llama 3.1 8B at tp 2 on a B200 (8 TB/s at 0.86):
    # 4.0e9 x 4 B = 16 GB, 2.33 ms (+ one launch); torchtitan frees its gradients: nothing
    cluster = load_cluster("b200", nodes=64)
    S = _batch("dp=64,tp=2,cp=4,sp=1,zero=1", 512)
    by_hand = 4.0e9 * 4.0 / (8000e9 * 0.86) + 4e-6
    assert float(grad_buffer_zero_s(cluster, S, FRAMEWORKS["megatron"], 4.0e9, 4.0)[0]) == pytest.approx(by_hand)
    assert float(grad_buffer_zero_s(cluster, S, FRAMEWORKS["torchtitan"], 4.0e9, 4.0)[0]) == 0.0
    # a sharded gradient (ZeRO-3: Megatron-FSDP) clears its 1/(dp cp) shard: 4e9 / 256 elements
    sharded = _batch("dp=64,tp=2,cp=4,sp=1,zero=3", 512)
    shard = 4.0e9 / 256 * 2.0 / (8000e9 * 0.86) + 4e-6
    assert float(grad_buffer_zero_s(cluster, sharded, FRAMEWORKS["megatron"], 4.0e9, 2.0)[0]) == pytest.approx(shard)


def test_optimizer_streams_the_sharded_states():
    # ZeRO-1 over dp x cp = 256: 4.0e9 / 256 = 1.5625e7 states x 32 B = 0.5 GB at 6.88 TB/s, plus 20 launches
    cluster = load_cluster("b200", nodes=64)
    S = _batch("dp=64,tp=2,cp=4,sp=1,zero=1", 512)
    by_hand = 4.0e9 / 256 * ADAM_BYTES_PER_PARAM / (8000e9 * 0.86) + OPTIMIZER_KERNELS * 4e-6
    assert float(optimizer_step_s(cluster, S, 4.0e9, 0.0)[0]) == pytest.approx(by_hand)


def test_grad_norm_and_fp8_amax_all_reduces():
    # the norm: one fp32 scalar over all 512 devices, a tree all-reduce's latency 20 us + 2 log2(512) x 5 us =
    # 110 us (its 8 bytes on the wire add nothing)
    cluster = load_cluster("b200", nodes=64)
    S = _batch("dp=64,tp=2,cp=4,sp=1,zero=1,fp8_param=1", 512)
    tree = LAUNCH_S + 2 * math.log2(512) * HOP_S
    assert float(grad_norm_s(cluster, S)[0]) == pytest.approx(tree, rel=0.01)
    assert float(grad_norm_s(cluster, _batch("dp=1", 1))[0]) == 0.0
    # fp8 primary weights: 291 tensors' amaxes packed (1164 B), all-reduced over the 256 ranks of dp x cp
    dp_tree = LAUNCH_S + 2 * math.log2(256) * HOP_S
    assert float(fp8_param_amax_s(cluster, S, 291)[0]) == pytest.approx(dp_tree, rel=0.01)
    assert float(fp8_param_amax_s(cluster, _batch("dp=64,tp=2,cp=4,sp=1,zero=1", 512), 291)[0]) == 0.0
    # the step's optimizer term is their sum
    parts = step_fixed_s(cluster, S, FRAMEWORKS["megatron"], 4.0e9, 0.0, 4.0, 291)
    assert set(parts) == {"adam", "zero_grads", "grad_norm", "fp8_amax", "loss", "weight_quantise"}
    assert all(float(v[0]) > 0 for k, v in parts.items() if k != "weight_quantise")  # a bf16 job: no casts
    # Megatron-LM all-reduces the loss over dp x cp every step: the same tree over 256 ranks; torchtitan does not
    assert float(loss_all_reduce_s(cluster, S, FRAMEWORKS["megatron"])[0]) == pytest.approx(dp_tree, rel=0.01)
    assert float(loss_all_reduce_s(cluster, S, FRAMEWORKS["torchtitan"])[0]) == 0.0


def test_weight_quantisation_once_per_step():
    # Llama 3.1 8B's 6.98e9 linear weights on a GB200 (8 TB/s at 0.86): NVFP4 reads the bf16 weight twice (amax,
    # cast) and writes a rowwise and a columnwise copy of 0.5 + 1/16 B: 5.125 B x 6.98e9 = 35.8 GB, 5.2 ms
    cluster = load_cluster("gb200", nodes=2)
    S = _batch("dp=8,mbs=2,zero=1", 8)
    rate = 8000e9 * 0.86
    nvfp4 = (2 + 2 + 2 * 0.5625) * 6.98e9 / rate + 4e-6
    assert float(weight_quantise_s(cluster, S, "nvfp4", 6.98e9)[0]) == pytest.approx(nvfp4)
    # fp8: one read, two 1-byte copies (4 B); with fp8 primary weights only the columnwise copy is rebuilt (2 B)
    assert float(weight_quantise_s(cluster, S, "fp8", 6.98e9)[0]) == pytest.approx(4 * 6.98e9 / rate + 4e-6)
    kept = _batch("dp=8,mbs=2,zero=1,fp8_param=1", 8)
    assert float(weight_quantise_s(cluster, kept, "fp8", 6.98e9)[0]) == pytest.approx(2 * 6.98e9 / rate + 4e-6)
    assert float(weight_quantise_s(cluster, S, "bf16", 6.98e9)[0]) == 0.0
    # the vocabulary matrices stay bf16: the stage's 8.03e9 parameters less 2 x 0.525e9
    parts = step_fixed_s(cluster, S, FRAMEWORKS["megatron"], 8.03e9, 0.0, 4.0, 291, "nvfp4", 2 * 0.525e9)
    assert float(parts["weight_quantise"][0]) == pytest.approx(nvfp4)


def _mlperf_8b(cluster: dict):
    model = load_model("llama3.1-8b")
    job = Job.resolve(model, load_cluster(cluster), TrainSpec(global_batch=64, seq_len=8192, precision="fp8",
                                                              framework="megatron"))
    return estimate(job, "dp=64,tp=2,cp=4,sp=1,mbs=1,zero=1,fp8_param=1")


def test_overlap_tax_applies_at_one_micro_batch():
    # one micro-batch per step (GBS 64 over dp 64): the DP traffic hidden behind the backward and the TP traffic
    # hidden behind the GEMMs still slow those GEMMs by the family's overlap_tax (0.15) of every hidden second
    base = {"accelerator": "b200", "nodes": 64, "devices_per_node": 8}
    taxed = _mlperf_8b(base)
    free = _mlperf_8b(dict(base, efficiency={"overlap_tax": 0.0}))
    b, e = taxed.breakdown_s, taxed.exposed_s
    hidden = (b["dp_comm"] - e["dp_comm"]) + (b["tp_comm"] - e["tp_comm"]) + (b["cp_comm"] - e["cp_comm"])
    assert hidden > 0
    assert e["compute"] - free.exposed_s["compute"] == pytest.approx(0.15 * hidden, rel=1e-6)
    # the fixed terms land in the optimizer term: the 16 GB memset alone is 2.3 ms
    assert e["optimizer"] > 4.0e9 * 4.0 / (8000e9 * 0.86)
