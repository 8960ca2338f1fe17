"""The host-overhead term (asap.cost.host), by construction and by hand.

- The reference trainer's operator counts (``asap.spec.framework.EAGER_HOST_OPS``) are recounted here with a
  dispatch mode over the trainer's own modules, so they cannot drift from the code.
- The host term of a one-device CPU step, worked out by hand from those counts.
- On an accelerator the host hides behind the device unless it is slower.
- A calibrated CPU's figures follow the job's process count; its measured collective lines are what the cost
  model prices.
"""

from __future__ import annotations

import dataclasses
import os
import socket

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from asap.cost.collectives import all_gather_s, all_reduce_s, reduce_scatter_s
from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
from asap.spec.framework import EAGER_HOST_OPS, FRAMEWORKS
from asap.spec.hardware import cluster_from_dict, load_cluster
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec
from asap.runners.torch.model import build_model
from asap.spec.job import Job


class _Count(TorchDispatchMode):
    def __init__(self, of_type=None):
        super().__init__()
        self.n, self.of_type = 0, of_type

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_leaves

        if self.of_type is None or any(isinstance(a, self.of_type) for a in tree_leaves((args, kwargs or {}))):
            self.n += 1
        return func(*args, **(kwargs or {}))


def _block_ops(model, block, dim, seq=64):
    h = torch.randn(2, seq, dim, requires_grad=True)
    with _Count() as fwd:
        out = block(h, model.rope[:seq])
    with _Count() as bwd:
        out.sum().backward()
    return fwd.n, bwd.n


def test_dense_block_ops_match_the_trainer():
    spec = load_model("tiny-dense")
    m = build_model(spec, 64, 0)
    assert _block_ops(m, m.layers["1"], spec.hidden_size) == EAGER_HOST_OPS.dense_layer


@pytest.mark.parametrize("experts", [4, 8])
def test_moe_block_ops_grow_per_local_expert(experts):
    base = load_model("tiny-moe")
    spec = dataclasses.replace(base, moe=dataclasses.replace(base.moe, num_experts=experts))
    m = build_model(spec, 64, 0)
    block = next(b for b in m.layers.values() if b.moe is not None)
    f, b = _block_ops(m, block, spec.hidden_size)
    h = EAGER_HOST_OPS
    assert (f, b) == (h.moe_layer[0] + h.per_local_expert[0] * experts, h.moe_layer[1] + h.per_local_expert[1] * experts)


def test_ends_and_optimizer_ops_match_the_trainer():
    spec = load_model("tiny-dense")
    m = build_model(spec, 64, 0)
    x = torch.randint(0, spec.vocab_size, (1, 64))
    with _Count() as fwd:
        logits = m(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), x.view(-1))
    with _Count() as bwd:
        loss.backward()
    f_layer, b_layer = EAGER_HOST_OPS.dense_layer
    ends = (fwd.n - spec.num_layers * f_layer, bwd.n - spec.num_layers * b_layer)
    assert ends == EAGER_HOST_OPS.ends
    opt = torch.optim.AdamW(m.parameters())
    with _Count() as step:
        opt.step()
    tensors = len(list(m.parameters()))
    # 13 per tensor, and a couple once per step (the step counters' first update)
    assert step.n == pytest.approx(EAGER_HOST_OPS.optimizer_per_tensor * tensors, abs=4)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sp", [0, 1])
def test_dtensor_share_matches_the_trainers_tp_plan(sp):
    """One process, a tensor-parallel mesh of one: the trainer's own TP plan, its DTensor operators counted."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from asap.runners.torch.parallel import apply_tp

    if not dist.is_initialized():
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
        dist.init_process_group("gloo", rank=0, world_size=1)
    spec = load_model("tiny-dense")
    m = build_model(spec, 64, 0)
    apply_tp(m, init_device_mesh("cpu", (1,)), bool(sp))
    x = torch.randint(0, spec.vocab_size, (1, 64))
    with _Count() as every, _Count(of_type=DTensor) as on_dtensors:
        out = m(x)
        (out.full_tensor() if isinstance(out, DTensor) else out).float().mean().backward()
    assert on_dtensors.n / every.n == pytest.approx(EAGER_HOST_OPS.dtensor_share[sp], abs=0.05)


# A CPU with round figures: 1e-5 s per operator, 1e-4 s per blocking call
HAND_CPU = cluster_from_dict({"accelerator": "local-cpu", "devices_per_node": 1, "nodes": 1,
                              "efficiency": {"host_op_s": 1e-5, "sync_s": 1e-4, "dtensor_op_s": 0.0}})


def test_host_term_of_a_one_device_cpu_step_by_hand():
    """tiny-dense, one device, global batch 2 of mbs 1: m = 2 micro-batches of 4 dense layers (97 + 156 ops) and
    the ends (13 + 18): 2 * (4 * 253 + 31) = 2086 operators; AdamW steps 39 tensors of 13 operators: 507; one
    blocking call (the loss's all-reduce). Host: 2593 * 1e-5 + 1 * 1e-4 = 0.02603 s."""
    est = estimate(Job.resolve(load_model("tiny-dense"), HAND_CPU, TrainSpec(2, 64, "fp32")), "dp=1")
    assert 2 * (4 * 253 + 31) + 13 * 39 == 2593
    assert est.exposed_s["host"] == pytest.approx(2593 * 1e-5 + 1e-4, rel=1e-9)


def test_full_recompute_reruns_the_forward_operators():
    """Full recompute adds each layer's 97 forward operators again: 2 micro-batches * 4 layers * 97 * 1e-5 s."""
    base = estimate(Job.resolve(load_model("tiny-dense"), HAND_CPU, TrainSpec(2, 64, "fp32")), "dp=1")
    full = estimate(Job.resolve(load_model("tiny-dense"), HAND_CPU, TrainSpec(2, 64, "fp32")), "dp=1,recompute=full")
    assert full.exposed_s["host"] - base.exposed_s["host"] == pytest.approx(2 * 4 * 97 * 1e-5, rel=1e-9)


def test_an_accelerator_hides_its_host_behind_the_device():
    """An H100 running a 405B-class layer's micro-batch spends far longer on the device than its host takes to
    launch it: no host time shows. The same stack with a tiny micro-batch of a tiny model is host-bound."""
    train = TrainSpec(64, 4096)
    big = estimate(Job.resolve(load_model("llama3-70b"), load_cluster("h100-sxm", nodes=8), train), "tp=8,pp=2")
    assert big.exposed_s["host"] == 0.0
    tiny = estimate(Job.resolve(load_model("tiny-dense"), load_cluster("h100-sxm", devices=1), TrainSpec(1, 32)), "dp=1")
    assert tiny.exposed_s["host"] > 0.0
    assert FRAMEWORKS["maxtext"].host_ops.dense_layer == (0, 0)  # XLA launches the step as one program


def _calibrated_doc(processes=4, cpu_count=2):
    lines = [{"op": "all_reduce", "group": 2, "latency_s": 1e-3, "busbw_gbps": 1.0},
             {"op": "all_reduce", "group": 4, "latency_s": 4e-3, "busbw_gbps": 1.0},
             {"op": "all_gather", "group": 2, "latency_s": 5e-4, "busbw_gbps": 2.0},
             {"op": "all_gather", "group": 4, "latency_s": 2e-3, "busbw_gbps": 2.0}]
    measured = {"format": "asap-calibration/1", "date": "2026-12-01T00:00:00+00:00", "versions": {"asap": "0"},
                "machine": {"hostname": "h", "cpu_count": cpu_count}, "processes": processes, "backend": "gloo",
                "collectives": lines}
    return {"accelerator": {"name": "local-cpu-calibrated", "family": "cpu", "peak_tflops": {"fp32": 1.0},
                            "hbm_gb": 8, "hbm_gbps": 10.0, "intra_node_gbps": 1.0, "inter_node_gbps": 1.0,
                            "devices_per_node": processes},
            "devices_per_node": processes, "nodes": 1, "efficiency": {"host_op_s": 4e-6},
            "measured": measured}


def test_a_calibrated_cpu_follows_the_jobs_process_count():
    """Calibrated with 4 processes on 2 cores (half a core each): a job of 2 processes has a core each, twice
    the GEMM and memory rate and half the host time per operator; a job of 4 has the calibrated figures."""
    four = cluster_from_dict(_calibrated_doc())
    two = four.with_devices(2)
    assert four.accelerator.peak_tflops["fp32"] == pytest.approx(1.0)
    assert two.accelerator.peak_tflops["fp32"] == pytest.approx(2.0)
    assert two.accelerator.hbm_gbps == pytest.approx(20.0)
    assert two.accelerator.efficiency.host_op_s == pytest.approx(2e-6)
    assert two.with_devices(4).accelerator.peak_tflops["fp32"] == pytest.approx(1.0)  # no compounding


def test_measured_collective_lines_price_the_groups_measured():
    """The cost model reads the machine's own lines: a 1 MB all-reduce over 2 ranks is 1e-3 + 2 (1/2) 1e6 / 1e9
    = 2e-3 s; over 3 ranks the line is interpolated in log2(g) halfway...: latency 1e-3 + 0.585 * 3e-3; an
    all-gather over 4: 2e-3 + (3/4) 1e6 / 2e9; a reduce-scatter on gloo costs the all-reduce."""
    c = cluster_from_dict(_calibrated_doc())
    assert float(all_reduce_s(c, 1e6, 2, 1)) == pytest.approx(1e-3 + 1e6 / 1e9, rel=1e-9)
    lat3 = 1e-3 + (torch.log2(torch.tensor(3.0)).item() - 1.0) * 3e-3
    assert float(all_reduce_s(c, 1e6, 3, 1)) == pytest.approx(lat3 + 2 * (2 / 3) * 1e6 / 1e9, rel=1e-6)
    assert float(all_gather_s(c, 1e6, 4, 1)) == pytest.approx(2e-3 + 0.75 * 1e6 / 2e9, rel=1e-9)
    assert float(reduce_scatter_s(c, 1e6, 4, 1)) == pytest.approx(float(all_reduce_s(c, 1e6, 4, 1)), rel=1e-12)
