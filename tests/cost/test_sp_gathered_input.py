"""Sequence parallelism's saved GEMM inputs as the stacks allocate them (issue 46.1, point 2), hand figures on the
68M-parameter dense model (h 1024, 4 layers) at tp=2, one micro-batch of 128 tokens, fp32 (4 B):

- Megatron-Core / Transformer Engine save the norm's output at its sequence shard (T / tp = 64 tokens) and
  all-gather it again in backward;
- DTensor TP (torchtitan's plan and the reference trainer's, ``runners/torch/parallel.py``:
  ``PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Replicate())`` before the column-parallel
  linears) redistributes it to the whole sequence before ``aten.mm``, which saves that: QKV's and the MLP's inputs
  at T = 128 tokens, 2 x (128 - 64) x 1024 x 4 B = 0.5 MiB more per layer;
- torchtitan's op-level SAC does not save the all-gather's output (off its save list): recomputed, no change.
"""

import pytest

from asap.cost.activations import layer_saves
from asap.cost.batch import StrategyBatch
from asap.spec.framework import FRAMEWORKS
from asap.spec.job import Job
from asap.spec.strategy import parse_strategy, resolve_strategy

MIB = 2 ** 20


@pytest.fixture(scope="module")
def job(mid_dense_file):
    return Job.from_names(mid_dense_file, "local-cpu", 4, 128, "fp32", framework="asap", devices=2)


def batch(job, text):
    return StrategyBatch.from_strategies([resolve_strategy(parse_strategy(text), job.model, job.train, 2,
                                                           framework=job.framework)])


def test_dtensor_sp_keeps_the_gathered_gemm_inputs(job):
    S = batch(job, "tp=2,sp=1,mbs=1,recompute=none")
    shard, gathered = (layer_saves(job.model, job.train, S, False, g).stored_bytes()[0] for g in (False, True))
    assert gathered - shard == pytest.approx(2 * (128 - 64) * 1024 * 4)  # 0.5 MiB per layer
    # without sequence parallelism the input is whole either way
    S0 = batch(job, "tp=2,sp=0,mbs=1,recompute=none")
    assert (layer_saves(job.model, job.train, S0, False, True).stored_bytes()[0]
            == layer_saves(job.model, job.train, S0, False, False).stored_bytes()[0])


def test_which_stacks_save_the_gathered_input():
    assert FRAMEWORKS["torchtitan"].sp_gathered_input and FRAMEWORKS["asap"].sp_gathered_input
    assert not FRAMEWORKS["megatron"].sp_gathered_input and not FRAMEWORKS["mindspore"].sp_gathered_input


def test_op_sac_recomputes_the_all_gather(job):
    """torchtitan at tp=2, one micro-batch of 4 x 128 = 512 tokens: without recompute its estimate holds
    4 layers x 2 x (512 - 256) x 1024 x 4 B = 8 MiB more than the same stack saving the shard would; under its
    op-level SAC (``recompute=selective``) the same."""
    from dataclasses import replace

    from asap.cost.estimate import estimate_spelled

    titan = replace(job, framework=FRAMEWORKS["torchtitan"])
    shard = replace(titan, framework=replace(FRAMEWORKS["torchtitan"], sp_gathered_input=False))
    for recompute, extra in (("none", 4 * 2 * (512 - 256) * 1024 * 4), ("selective", 0.0)):
        text = f"tp=2,sp=1,mbs=4,recompute={recompute}"
        a, b = (estimate_spelled(j, text).memory_gb["activations"] for j in (titan, shard))
        assert (a - b) * 2**30 == pytest.approx(extra, abs=1.0)
