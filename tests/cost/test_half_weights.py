"""Which stacks keep a 16-bit copy of the weights beside the fp32 master (``Framework.half_weight_copy``):
Megatron-Core does (2 + 4 + 12 bytes per parameter); torchtitan's FSDP2 and MaxText do not (4 + 12: the fp32
shard is the master, cast to bf16 only for the all-gather or in the computation)."""

from __future__ import annotations

import numpy as np
import pytest

from asap.cost.batch import StrategyBatch
from asap.cost.device_memory import GB, memory, state_bytes_per_param
from asap.spec.framework import FRAMEWORKS
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.strategy import complete_strategy
from asap.spec.train import TrainSpec


def test_state_bytes_with_and_without_the_half_copy():
    with_copy = state_bytes_per_param("bf16", 3, 8, 4.0, half_weights=True)
    without = state_bytes_per_param("bf16", 3, 8, 4.0, half_weights=False)
    assert float(sum(with_copy)) * 8 == pytest.approx(18.0)
    assert float(sum(without)) * 8 == pytest.approx(16.0)
    assert float(without[0]) == 0.0 and float(without[2]) * 8 == pytest.approx(12.0)  # the master is in the 12
    # fp32 runs hold their weights in fp32 either way
    assert float(state_bytes_per_param("fp32", 0, 1, 4.0, half_weights=False)[0]) == 4.0


def weights_gb(stack: str) -> float:
    model, cluster = load_model("llama3-8b"), load_cluster("h100-sxm", nodes=2)
    fw = FRAMEWORKS[stack]
    s = complete_strategy({"dp": 16, "zero": 3}, cluster.num_devices, framework=fw)
    mem = memory(model, cluster.accelerator, TrainSpec(64, 4096, framework=stack), StrategyBatch.from_strategies([s]),
                 framework=fw)
    return float(np.asarray(mem.weights_gb)[0])


@pytest.mark.parametrize("stack", ["torchtitan", "maxtext"])
def test_fsdp2_and_maxtext_hold_no_bf16_shard(stack):
    """ZeRO-3 over 16 ranks: Megatron-Core's weights term is the 2 B bf16 shard plus the gathered layers; the
    others' is the gathered layers alone (torchtitan's also its unresharded head unit), so the difference is
    the shard, 2 N / 16 bytes, less that unit."""
    n = load_model("llama3-8b").num_params()
    assert not FRAMEWORKS[stack].half_weight_copy and FRAMEWORKS["megatron"].half_weight_copy
    # torchtitan also holds its [norm, output] unit gathered (never resharded after forward): 2 B x (V h + h)
    head = 2.0 * (128256 * 4096 + 4096) if stack == "torchtitan" else 0.0
    assert weights_gb("megatron") - weights_gb(stack) == pytest.approx((2.0 * n / 16 - head) / GB, rel=1e-9)
