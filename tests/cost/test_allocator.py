"""The allocator's reserve beyond the live tensors (issue 46.1), from PyTorch's CUDA caching allocator's rules
(c10/cuda/CUDACachingAllocator.cpp: ``get_allocation_size``, ``should_split``, ``release_cached_blocks``; the
derivation in ``asap.cost.allocator``), hand figures per case:

- a request's segment: up to 1 MiB the small pool's 2 MiB; 1 to 10 MiB a 20 MiB segment; above, its size rounded up
  to 2 MiB;
- the caching allocator on a stack that frees its gradients every step (fenced): one segment of the step's largest
  transient tensor; on a stack whose gradients live in a buffer allocated once (Megatron-Core), and with expandable
  segments: at most two 20 MiB segments or pages (40 MiB); XLA's static plan and host malloc: nothing;
- a published Megatron-LM log (GPT-345M, 4 A800, fp16, 1 x 1024 tokens, vocabulary 50304, contiguous grad
  buffers): max allocated 8696.85 MiB, max reserved 8786 MiB, a reserve of 89.15 MiB, between the unfenced
  figure (40 MiB) and a fenced segment of its fp32 logits (1024 x 50304 x 4 B = 196.5 MiB, segment 198 MiB).
"""

from dataclasses import replace

import json

import numpy as np
import pytest

from conftest import run_cli

from asap.cost.allocator import layer_tensor_bytes, logits_tensor_bytes, reserve_bytes, segment_bytes
from asap.cost.device_memory import fixed_allowance_bytes
from asap.cost.estimate import estimate_spelled
from asap.errors import AsapError
from asap.spec.framework import Allocator
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.model import model_from_dict
from asap.spec.train import TrainSpec

MIB, GIB = 2 ** 20, 2 ** 30


def test_segments_follow_get_allocation_size():
    requests = np.array([0, 512 * 1024, MIB, MIB + 512, 5 * MIB, 10 * MIB - 1, 10 * MIB, 33.5 * MIB])
    assert list(segment_bytes(requests) / MIB) == [0, 2, 2, 20, 20, 20, 10, 34]


@pytest.mark.parametrize("allocator,fenced,expected_mib", [
    (Allocator.CACHING, True, 198),  # 196.5 MiB rounded up to 2 MiB: a segment of its own
    (Allocator.CACHING, False, 40),  # the same shapes every step: two partly used 20 MiB segments
    (Allocator.EXPANDABLE, True, 40),  # free pages unmapped under pressure: the two partly used at a hole's ends
    (Allocator.STATIC, True, 0),
    (Allocator.HOST, True, 0),
])
def test_reserve_per_allocator(allocator, fenced, expected_mib):
    logits = logits_tensor_bytes(1, 1024, 1, 50304, 1, 1, True)
    assert logits == 1024 * 50304 * 4
    assert reserve_bytes(allocator, logits, fenced) == expected_mib * MIB


def test_a_small_transient_costs_its_segment_at_most():
    """A 3 MiB largest transient: its 20 MiB segment under the caching allocator, whether fenced or not (min with
    the two pages)."""
    assert reserve_bytes(Allocator.CACHING, 3 * MIB, True) == 20 * MIB
    assert reserve_bytes(Allocator.CACHING, 3 * MIB, False) == 20 * MIB
    assert reserve_bytes(Allocator.EXPANDABLE, 3 * MIB, True) == 20 * MIB


GPT_345M = {"name": "gpt-345m", "num_layers": 24, "hidden_size": 1024, "ffn_hidden_size": 4096,
            "num_attention_heads": 16, "vocab_size": 50304, "activation": "gelu"}


def gpt345m_job(framework="megatron", allocator="caching"):
    train = TrainSpec(global_batch=8, seq_len=1024, precision="fp16", framework=framework, allocator=allocator)
    return Job.resolve(model_from_dict(GPT_345M), load_cluster("a100-80gb", devices=4), train)


def test_the_published_megatron_reserve_lies_between_the_unfenced_and_fenced_figures():
    """Megatron-LM's report_memory after 100 iterations of GPT-345M (fp16, dp=4, 1 x 1024 tokens, contiguous grad
    buffers, the caching allocator): max reserved 8786 MiB less max allocated 8696.85 MiB = 89.15 MiB. asap prices
    Megatron-Core's preallocated buffers as unfenced (40 MiB); a stack that frees its gradients would strand a
    segment of the fp32 logits (198 MiB). The published figure lies between the two."""
    measured = (8786.0 - 8696.8515625) * MIB
    e = estimate_spelled(gpt345m_job(), "dp=4,mbs=1,zero=0,recompute=none")
    reserve = e.memory_detail_gb["allowance_allocator_reserve"] * GIB
    assert reserve == 40 * MIB
    assert e.memory_detail_gb["allowance_largest_transient"] * GIB == 1024 * 50304 * 4
    fenced = estimate_spelled(gpt345m_job("deepspeed"), "dp=4,mbs=1,zero=0,recompute=none")
    assert fenced.memory_detail_gb["allowance_allocator_reserve"] * GIB == 198 * MIB
    assert reserve < measured < fenced.memory_detail_gb["allowance_allocator_reserve"] * GIB
    # the allowance is the reserve and the runtime's share; memory_gb keeps its keys
    acc = load_cluster("a100-80gb", devices=4).accelerator
    assert e.memory_gb["allowance"] * GIB == pytest.approx(reserve + fixed_allowance_bytes(acc))
    assert e.memory_gb["allocated"] == pytest.approx(e.peak_memory_gb - e.memory_gb["allowance"])


def test_expandable_segments_shrink_the_fenced_reserve():
    """The same job on DeepSpeed (gradients freed every step) under ``allocator: expandable``: two pages."""
    e = estimate_spelled(gpt345m_job("deepspeed", "expandable"), "dp=4,mbs=1,zero=0,recompute=none")
    assert e.memory_detail_gb["allowance_allocator_reserve"] * GIB == 40 * MIB


def test_a_layer_tensor_is_the_largest_transient_away_from_the_head():
    """A middle pipeline stage holds no logits: its largest transient is the MLP's first GEMM output, 1 x 1024
    tokens x 4096 / tp 2 x 2 B = 8 MiB (a 20 MiB segment)."""
    job = gpt345m_job("deepspeed")
    from asap.cost.batch import StrategyBatch
    from asap.spec.strategy import parse_strategy, resolve_strategy

    s = resolve_strategy(parse_strategy("tp=2,dp=2,mbs=1,zero=0,recompute=none"), job.model, job.train, 4,
                         framework=job.framework)
    assert layer_tensor_bytes(job.model, job.train, StrategyBatch.from_strategies([s]))[0] == 1024 * 4096 / 2 * 2


def test_an_moe_layer_with_narrow_experts_dispatches_its_largest_tensor():
    """DeepSeek-V3's routed experts are narrow (expert ffn 2048, hidden 7168): the dispatched tokens' hidden
    states, T x top_k x hidden x 2 B = 4096 x 8 x 7168 x 2, outweigh the expert GEMM's fused gate/up output
    (4096 x 8 x 2 x 2048 x 2) and the dense layers' first GEMM (4096 x 2 x 18432 / tp 8 x 2)."""
    from asap.cost.batch import StrategyBatch
    from asap.spec.loader import load_model
    from asap.spec.strategy import parse_strategy, resolve_strategy

    train = TrainSpec(global_batch=64, seq_len=4096, precision="bf16", framework="megatron")
    j = Job.resolve(load_model("deepseek-v3"), load_cluster("h800", devices=256), train)
    s = resolve_strategy(parse_strategy("tp=8,pp=4,ep=8,etp=1,mbs=1"), j.model, j.train, 256, framework=j.framework)
    dispatched = 4096 * 8 * 7168 * 2
    assert dispatched > 4096 * 8 * 2 * 2048 * 2 and dispatched > 4096 * 2 * 18432 / 8 * 2
    assert layer_tensor_bytes(j.model, j.train, StrategyBatch.from_strategies([s]))[0] == dispatched


def test_xla_and_the_cpu_hold_no_reserve():
    train = TrainSpec(global_batch=8, seq_len=1024, precision="bf16", framework="maxtext")
    tpu = Job.resolve(model_from_dict(GPT_345M), load_cluster("tpu-v6e", devices=4), train)
    assert estimate_spelled(tpu, "dp=4,mbs=1,zero=3").memory_detail_gb["allowance_allocator_reserve"] == 0
    cpu = Job.resolve(model_from_dict(GPT_345M), load_cluster("local-cpu", devices=2),
                      replace(train, framework="asap", precision="fp32"))
    assert estimate_spelled(cpu, "dp=2,mbs=1,zero=0").memory_detail_gb["allowance_allocator_reserve"] == 0


def test_a_bad_allocator_names_the_field():
    with pytest.raises(AsapError) as err:
        TrainSpec.from_dict({"global_batch": 8, "seq_len": 1024, "allocator": "cudamallocasync"})
    assert "allocator" in str(err.value)


def test_explain_lists_the_reserve(tmp_path):
    model = tmp_path / "gpt345m.json"
    model.write_text(json.dumps(GPT_345M))
    args = ["estimate", "-m", model, "-c", "a100-80gb", "--devices", "4", "-b", "8", "-s", "1024", "--precision",
            "fp16", "--framework", "deepspeed", "-S", "dp=4,mbs=1,zero=0,recompute=none"]
    out = json.loads(run_cli(*args, "--json").stdout)
    assert "allowance" in out["memory_gb"]
    assert out["memory_detail_gb"]["allowance_allocator_reserve"] * GIB == pytest.approx(198 * MIB)
    text = run_cli(*args, "--explain").stdout
    assert "a fenced segment of the largest" in text
