"""DeepEP's buffers, held by the dedup dispatcher outside PyTorch's allocator (issue 46.1), hand figures from
DeepEP's own sizing (csrc/config.hpp ``get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint`` with
deep_ep/buffer.py's dispatch and combine configs, 20 SMs: 10 channels):

- the NVLink buffer: channels x NVLink ranks x (a few ints + nvl_recv tokens x (hidden x 2 B + 8 B of source
  metadata + 128 int64 top-k indices + 128 fp32 weights + 128 fp32 scales));
- the RDMA buffer, only where the group spans nodes, in whole 512 MiB NVSHMEM pieces;
- a 32 MiB workspace;
- only with the dedup dispatcher, only for an MoE model with expert parallelism, only on GPUs;
- and a plan names the dispatcher of every row before pricing its memory, so a planned row holds its
  dispatcher's buffers, as ``estimate`` of the same strategy does.
"""

import numpy as np
import pytest

from asap.cost.ep_buffers import deepep_buffer_bytes, ep_comm_buffer_bytes
from asap.cost.estimate import estimate, estimate_spelled
from asap.search.planner import plan, plan_headroom
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec

MIB, GIB = 2 ** 20, 2 ** 30
DEEPSEEK_HIDDEN = 7168
TOKEN_BYTES = DEEPSEEK_HIDDEN * 2 + 8 + 128 * 8 + 128 * 4 + 128 * 4  # 16,392 B a token in the NVLink buffer


def align128(n):
    """DeepEP rounds each hint up to 128 B."""
    return -(-n // 128) * 128


def test_one_node_group_holds_the_nvlink_buffer_and_the_workspace():
    """ep 8: 10 channels x 8 ranks x (5 ints + 256 tokens x 16,392 B) = 320.2 MiB, + 32 MiB."""
    nvl = align128(10 * 8 * (5 * 4 + 256 * TOKEN_BYTES))
    assert deepep_buffer_bytes(DEEPSEEK_HIDDEN, 8) == nvl + 32 * MIB
    assert deepep_buffer_bytes(DEEPSEEK_HIDDEN, 8) / MIB == pytest.approx(352.16, abs=0.01)


def test_a_group_across_nodes_adds_the_rdma_buffer_in_whole_nvshmem_pieces():
    """ep 64 (8 nodes): NVLink 10 x 8 x (19 ints + 288 tokens x 16,392 B) = 360.2 MiB; RDMA 10 x 8 rdma ranks x
    (36 ints + 2 x 140 tokens x 16,408 B) + 1 MiB = 351.5 MiB, held as one 512 MiB piece; + 32 MiB."""
    nvl = align128(10 * 8 * (19 * 4 + 288 * TOKEN_BYTES))
    rdma = 10 * 8 * (36 * 4 + 2 * 140 * (TOKEN_BYTES + 16)) + MIB
    assert rdma < 512 * MIB
    assert deepep_buffer_bytes(DEEPSEEK_HIDDEN, 64) == nvl + 512 * MIB + 32 * MIB


def test_a_group_size_without_a_config_takes_the_next_one():
    """DeepEP has configs up to 160 ranks: 256 is priced at 160's (larger chunks), more than 128's."""
    assert deepep_buffer_bytes(DEEPSEEK_HIDDEN, 256) > deepep_buffer_bytes(DEEPSEEK_HIDDEN, 128)
    assert deepep_buffer_bytes(DEEPSEEK_HIDDEN, 1) == 0


def job(framework="megatron", cluster="h800", nodes=32):
    train = TrainSpec(global_batch=1024, seq_len=4096, precision="bf16", framework=framework)
    return Job.resolve(load_model("deepseek-v3"), load_cluster(cluster, nodes=nodes), train)


def test_estimate_lists_the_buffers_of_the_dedup_dispatcher_only():
    """The same layout with dedup holds 904 MiB more than with alltoall, listed as its own allowance part."""
    j = job()
    base = "tp1 pp8 ep32 mbs1 recompute=full zero1"
    dedup = estimate_spelled(j, base + " dispatcher=dedup")
    flat = estimate_spelled(j, base + " dispatcher=alltoall")
    assert dedup.memory_detail_gb["allowance_ep_comm_buffers"] * GIB == deepep_buffer_bytes(DEEPSEEK_HIDDEN, 32)
    assert flat.memory_detail_gb["allowance_ep_comm_buffers"] == 0
    assert dedup.peak_memory_gb - flat.peak_memory_gb == pytest.approx(904.18 / 1024, abs=1e-3)


def test_none_for_a_dense_model_or_off_the_gpus():
    class Rows:
        ep, etp, dispatcher = np.array([8, 8]), np.array([1, 1]), np.array([2, 2])
    moe, dense = load_model("deepseek-v3"), load_model("llama3-8b")
    assert (ep_comm_buffer_bytes(moe, "hopper", Rows) > 0).all()
    assert (ep_comm_buffer_bytes(dense, "hopper", Rows) == 0).all()
    assert (ep_comm_buffer_bytes(moe, "tpu", Rows) == 0).all()


def test_planned_rows_hold_their_dispatchers_buffers_as_estimate_prices_them():
    """Megatron-Core offers every dispatcher, so the planner leaves it free and names the fastest per row before
    memory: every candidate's figures are ``estimate``'s for its strategy, dedup rows hold the buffers, and no
    row runs the expert overlap with the allgather dispatcher (the stack refuses it)."""
    j = plan_headroom(job())
    result = plan(j, top=5, split_candidates=0)
    assert any(c.strategy.dispatcher.value == "dedup" for c in result.candidates)
    for c in result.candidates:
        again = estimate(j, c.strategy)
        assert again.step_time_s == c.step_time_s and again.peak_memory_gb == c.peak_memory_gb
        held = c.memory_detail_gb["allowance_ep_comm_buffers"]
        assert (held > 0) == (c.strategy.dispatcher.value == "dedup" and c.strategy.ep > 1)
        assert not (c.strategy.a2a_overlap and c.strategy.dispatcher.value == "allgather")
