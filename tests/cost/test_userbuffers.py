"""Transformer Engine's userbuffers for Megatron-Core's tensor-parallel communication overlap (issue 46.1), hand
figures from TE's ``initialize_ub`` (transformer_engine/pytorch/module/base.py) and Megatron-Core's
``_initialize_tp_communicators`` (the buffer shape [seq_length x micro_batch_size / cp, hidden_size]):

- twelve buffers of that shape: eight all-gather ones (ring exchange qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad;
  bulk qkv_dgrad, fc1_dgrad; external proj_wgrad, fc2_wgrad) in fp8 bytes under an fp8 recipe, four
  reduce-scatter ones (proj_fprop, fc2_fprop, qkv_wgrad, fc1_wgrad) in the activation dtype;
- the cuBLAS workspace repeated for three streams: two more 32 MiB workspaces on Hopper;
- only with tensor parallelism, only on stacks that register them (Megatron-Core; not torchtitan), only on the
  GPUs Transformer Engine runs on.
"""

import pytest

from asap.cost.estimate import estimate_spelled
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec

MIB, GIB = 2 ** 20, 2 ** 30
LLAMA3_70B_HIDDEN = 8192


def job(precision="bf16", framework="megatron", cluster="dgx-h100-8node", seq_len=8192):
    train = TrainSpec(global_batch=64, seq_len=seq_len, precision=precision, framework=framework)
    return Job.resolve(load_model("llama3-70b"), load_cluster(cluster), train)


def userbuffers_gib(j, spelled):
    return estimate_spelled(j, spelled).memory_detail_gb["allowance_tp_comm_buffers"]


def test_bf16_tp8_holds_twelve_sequence_buffers_and_two_more_workspaces():
    """8192 tokens x 8192 hidden x 2 B = 128 MiB a buffer, twelve of them (1536 MiB), and two 32 MiB cuBLAS
    workspaces: 1600 MiB."""
    expected = 8192 * LLAMA3_70B_HIDDEN * 2 * 12 + 2 * 32 * MIB
    assert expected == 1600 * MIB
    assert userbuffers_gib(job(), "tp8 pp2 mbs1") * GIB == pytest.approx(expected)


def test_fp8_all_gather_buffers_hold_one_byte():
    """Under fp8 the eight all-gather buffers hold fp8 (64 MiB each), the four reduce-scatter ones bf16 (128 MiB):
    512 + 512 + 64 MiB."""
    expected = 8192 * LLAMA3_70B_HIDDEN * (8 * 1 + 4 * 2) + 2 * 32 * MIB
    assert userbuffers_gib(job("fp8"), "tp8 pp2 mbs1") * GIB == pytest.approx(expected)


def test_the_shape_follows_micro_batch_and_context_parallelism():
    """Two sequences a micro-batch double every buffer; cp 2 halves the sequence each rank's buffer holds."""
    one = userbuffers_gib(job(), "tp8 pp2 mbs1") * GIB - 2 * 32 * MIB
    assert userbuffers_gib(job(), "tp8 pp2 mbs2") * GIB - 2 * 32 * MIB == pytest.approx(2 * one)
    assert userbuffers_gib(job(), "tp4 cp2 pp2 mbs1") * GIB - 2 * 32 * MIB == pytest.approx(one / 2)


@pytest.mark.parametrize("spelled,framework,cluster", [
    ("tp1 pp8 mbs1", "megatron", "dgx-h100-8node"),  # no tensor parallelism: no overlap to buffer
    ("tp8 pp2 mbs1", "torchtitan", "dgx-h100-8node"),  # DTensor TP: no userbuffers
])
def test_none_without_tp_or_without_transformer_engine(spelled, framework, cluster):
    assert userbuffers_gib(job(framework=framework, cluster=cluster), spelled) == 0.0


def test_they_are_in_the_allowance_not_in_what_torch_allocates():
    """Registered outside PyTorch's caching allocator: the peak and the allowance carry them, ``allocated`` (what
    torch.cuda.max_memory_allocated reports) does not."""
    e = estimate_spelled(job(), "tp8 pp2 mbs1")
    ub = e.memory_detail_gb["allowance_tp_comm_buffers"]
    assert ub > 1.5
    assert e.memory_gb["allowance"] == pytest.approx(1.0 + e.memory_detail_gb["allowance_allocator_reserve"] + ub)
    assert e.memory_gb["allocated"] == pytest.approx(e.peak_memory_gb - e.memory_gb["allowance"])
