"""The planner names the dispatcher of every MoE row it leaves free (Megatron-Core offers all three) before it
prices the row's memory: the fastest one the stack runs with the row's pinned keys. Qwen3-30B-A3B (128 experts,
top 8) on ep 2 inside a node: the allgather dispatcher moves 2 x T tokens against the all-to-all's 8 x T / 2, so it
is the fastest; but Megatron-Core refuses it beside the expert overlap (``--overlap-moe-expert-parallel-comm``
needs alltoall or flex), so with the overlap pinned the planner names the next fastest, and every row it shows is
one ``estimate`` prices the same."""

import pytest

from asap.cost.estimate import estimate
from asap.errors import AsapError
from asap.search.planner import plan, plan_headroom
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.stack_rules import runnable_strategy
from asap.spec.train import TrainSpec


@pytest.fixture(scope="module")
def job():
    train = TrainSpec(global_batch=256, seq_len=4096, precision="bf16", framework="megatron")
    return plan_headroom(Job.resolve(load_model("qwen3-30b-a3b"), load_cluster("h100-sxm", nodes=2), train))


def test_free_dispatcher_is_the_fastest(job):
    r = plan(job, fixed={"ep": 2}, top=5, split_candidates=0)
    assert {c.strategy.dispatcher.value for c in r.candidates} == {"allgather"}
    assert not any(c.strategy.a2a_overlap for c in r.candidates)  # the overlap stays off beside allgather


def test_pinned_overlap_names_a_dispatcher_the_stack_runs(job):
    with pytest.raises(AsapError, match="allgather"):  # what `asap estimate` and `emit` refuse
        runnable_strategy(job, "ep2 pp2 vpp8 mbs1 dispatcher=allgather a2a_overlap=1")
    r = plan(job, fixed={"ep": 2, "a2a_overlap": 1}, top=5, split_candidates=0)
    assert r.candidates
    for c in r.candidates:
        assert c.strategy.a2a_overlap and c.strategy.dispatcher.value != "allgather"
        again = estimate(job, runnable_strategy(job, str(c.strategy)))
        assert (again.step_time_s, again.peak_memory_gb) == (c.step_time_s, c.peak_memory_gb)
