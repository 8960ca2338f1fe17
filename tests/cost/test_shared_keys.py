"""Rows that share a key combination share their figures: ``unit_times`` prices once per distinct combination of
``UNIT_KEYS`` and ``device_figures`` once per combination of ``DEVICE_KEYS``. A knob either figure reads but its
keys leave out makes rows that differ only in that knob share the first one's figures (``vocab_tiles``, read by the
LM head's GEMM count, once did). Each test turns every knob of ``asap.spec.knobs.KNOBS`` to another value, one at
a time from a base strategy, and holds the shared pricing equal to pricing every row on its own."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from asap.cost.estimate import UNIT_KEYS
from asap.cost.units import device_figures, unit_times
from asap.spec.batch import StrategyBatch
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.knobs import KNOBS
from asap.spec.loader import load_model
from asap.spec.strategy import complete_strategy
from asap.spec.train import TrainSpec

DEVICES = 64  # 8 nodes of 8
BASE = {"tp": 2, "pp": 2, "cp": 2, "ep": 2, "mbs": 1}
# another value of every knob, the knobs it needs beside it where the base lacks them
OTHER = {
    "dp": {"dp": 4, "tp": 4}, "tp": {"tp": 4, "dp": 4}, "pp": {"pp": 4, "dp": 4}, "vpp": {"vpp": 2},
    "cp": {"cp": 4, "dp": 4}, "ep": {"ep": 4}, "etp": {"etp": 2}, "mbs": {"mbs": 2}, "zero": {"zero": 3},
    "sp": {"sp": 0}, "recompute": {"recompute": "full"}, "schedule": {"schedule": "interleaved", "vpp": 2},
    "dispatcher": {"dispatcher": "allgather"}, "a2a_overlap": {"a2a_overlap": 1},
    "layer_split": {"layer_split": (17, 15)}, "offload_act": {"offload_act": 1}, "offload_opt": {"offload_opt": 1},
    "fp8_param": {"fp8_param": 1}, "offload_layers": {"offload_layers": 2}, "grad_bf16": {"grad_bf16": 1},
    "dp_replicate": {"dp_replicate": 2}, "cp_comm": {"cp_comm": "allgather"}, "cp_a2a": {"cp_a2a": 2},
    "vocab_tiles": {"vocab_tiles": 4},
}
STACKS = ["megatron", "torchtitan", "maxtext"]


def job_of(stack: str) -> Job:
    return Job.resolve(load_model("mixtral-8x7b"), load_cluster("h100-sxm", nodes=DEVICES // 8),
                       TrainSpec(256, 8192, framework=stack))


def batch_of(job: Job) -> StrategyBatch:
    rows = [complete_strategy(BASE, DEVICES, framework=job.framework)]
    for changed in OTHER.values():
        rows.append(complete_strategy({**BASE, **changed}, DEVICES, framework=job.framework))
    return StrategyBatch.from_strategies(rows)


def test_every_knob_is_varied():
    assert set(OTHER) == {k.name for k in KNOBS}


@pytest.mark.parametrize("stack", STACKS)
def test_unit_times_shared_by_unit_keys_equal_each_rows_own(stack):
    job = job_of(stack)
    S = batch_of(job)
    shared, own = unit_times(job, S, UNIT_KEYS), unit_times(job, S, None)
    for part in own.parts:
        np.testing.assert_allclose(shared.parts[part][shared.row], own.parts[part][own.row], rtol=1e-12,
                                   atol=0.0, err_msg=f"{stack}: unit time part {part!r}")


@pytest.mark.parametrize("stack", STACKS)
def test_device_figures_shared_by_device_keys_equal_each_rows_own(stack):
    job = job_of(stack)
    S = batch_of(job)
    fw = job.framework
    ut = unit_times(job, S, None)
    shared = device_figures(job.model, job.train, S, ut, fw.selective, fw.logits_bytes, fw.sp_gathered_input)
    for i in range(len(S)):
        one = S.take(np.array([i]))
        alone = device_figures(job.model, job.train, one, ut.subset(np.array([i])), fw.selective,
                               fw.logits_bytes, fw.sp_gathered_input)
        for f in fields(shared):
            got = getattr(shared, f.name)
            if f.name == "row" or not isinstance(got, np.ndarray) or len(got) != len(np.unique(shared.row)):
                continue
            mine = getattr(alone, f.name)[alone.row[0]]
            # [n, K] figures per representative device: the batch pads K with repeats of its first device
            theirs = got[shared.row[i]][..., :np.shape(mine)[-1]] if np.ndim(mine) else got[shared.row[i]]
            np.testing.assert_allclose(theirs, mine, rtol=1e-12, err_msg=f"{stack}: row {i} {f.name}")
