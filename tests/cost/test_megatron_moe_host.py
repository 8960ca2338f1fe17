"""Megatron-Core's MoE layer on the host (``asap.spec.framework.MEGATRON_HOST_OPS``), by hand.

An MoE layer's micro-batch on an H100 dispatches 600 + 900 operators at the family's 6 us: 9 ms of host work.
The device hides it when its own work on the layer is longer (max(host, device), ``asap.cost.host``); the
dispatcher's token-count sync is paid either way (10 us + one operator)."""

from __future__ import annotations

import pytest

from asap.cost.batch import StrategyBatch
from asap.cost.host import D2H_SYNC_S
from asap.cost.units import paired_host_s, paired_hidden_s, unit_times
from asap.spec.framework import FRAMEWORKS, FUSED_HOST_OPS, MEGATRON_HOST_OPS
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.layout import Unit
from asap.spec.loader import load_model
from asap.spec.strategy import resolve_strategy
from asap.spec.train import TrainSpec

HOST_OP_S = 6e-6  # the Hopper family's host_op_s


def _moe_unit(mbs: int):
    job = Job.resolve(load_model("qwen3-30b-a3b"), load_cluster("h100-sxm", nodes=2),
                      TrainSpec(1024, 4096, "bf16", framework="megatron"))
    strategy = resolve_strategy(f"dp=16,ep=16,mbs={mbs},dispatcher=dedup", job.model, job.train, job.devices,
                                framework=job.framework)
    S = StrategyBatch.from_strategies([strategy])
    parts = unit_times(job, S).parts
    device = sum(parts[k][0, Unit.MOE] for k in ("compute", "tp", "ep", "cp"))
    return parts["host"][0, Unit.MOE], device


def test_megatron_moe_layer_dispatches_1500_operators_per_micro_batch():
    """Ten times the fused estimate of an MoE layer, split forward/backward as it is (2:3); dense layers keep it."""
    assert FRAMEWORKS["megatron"].host_ops is MEGATRON_HOST_OPS
    assert MEGATRON_HOST_OPS.moe_layer == (600.0, 900.0)
    assert sum(MEGATRON_HOST_OPS.moe_layer) == 10 * sum(FUSED_HOST_OPS.moe_layer)
    assert MEGATRON_HOST_OPS.dense_layer == FUSED_HOST_OPS.dense_layer


def test_a_thin_moe_layer_waits_for_its_host():
    """Qwen3-30B-A3B, micro-batch 1 (4096 tokens), ep16: the device's ~7 ms on the layer is below the host's
    1500 * 6 us = 9 ms, so the layer shows 9 ms - device, plus the sync."""
    host, device = _moe_unit(1)
    assert device < 1500 * HOST_OP_S
    assert host == pytest.approx(1500 * HOST_OP_S - device + D2H_SYNC_S + HOST_OP_S, rel=1e-9)


def test_a_thick_moe_layer_hides_its_host():
    """At micro-batch 4 the device works longer than 9 ms on the layer: only the sync shows."""
    host, device = _moe_unit(4)
    assert device > 1500 * HOST_OP_S
    assert host == pytest.approx(D2H_SYNC_S + HOST_OP_S, rel=1e-9)


def test_pairing_shows_the_host_work_the_hidden_traffic_hid():
    """A unit of 9 ms host work, 8 ms compute and 4 ms of EP traffic (12 ms on the device: the host hides).
    Paired, min(2, 16/3) + min(2, 8/3) = 4 ms of the traffic hides, the device works 8 ms and the host shows
    9 - 8 = 1 ms more; a unit whose host already showed (14 ms) adds the whole 4 ms; a host far below the
    shorter device time adds nothing."""
    assert paired_hidden_s(4e-3, 8e-3) == pytest.approx(4e-3)
    assert paired_host_s(9e-3, 12e-3, 4e-3, 8e-3) == pytest.approx(1e-3)
    assert paired_host_s(14e-3, 12e-3, 4e-3, 8e-3) == pytest.approx(4e-3)
    assert paired_host_s(1e-3, 12e-3, 4e-3, 8e-3) == 0.0
