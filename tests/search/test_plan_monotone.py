"""A tighter memory limit never gives a faster #1 (issue 32): the layer split is tried on every shape that
could win (``search.planner.adopt_stage_splits``: branch and bound on the step less the stage imbalance), so
the best fitting row is the minimum over all of them, and equal step times go to the row needing less memory."""

from __future__ import annotations

import pytest

from asap.search.planner import plan
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec

CASES = [
    ("deepseek-v3", "h800", 256, 15360, 4096),
    ("llama3-70b", "h100-sxm", 8, 256, 8192),
    ("qwen3-30b-a3b", "h100-sxm", 4, 256, 4096),
    ("llama3-8b", "h100-sxm", 1, 64, 8192),
    ("mixtral-8x7b", "h100-sxm", 8, 256, 4096),
]
MARGINS_GB = (0.0, 4.0, 8.0, 16.0)


def best(name, acc, nodes, gb, seq, margin):
    job = Job.resolve(load_model(name), load_cluster(acc, nodes=nodes), TrainSpec(gb, seq, memory_margin_gb=margin))
    r = plan(job, top=5)
    return r.candidates[0] if r.candidates else None


@pytest.mark.parametrize("name,acc,nodes,gb,seq", CASES, ids=[f"{c[0]}-{c[2]}n" for c in CASES])
def test_no_margin_is_never_slower_than_a_margin(name, acc, nodes, gb, seq):
    firsts = [best(name, acc, nodes, gb, seq, m) for m in MARGINS_GB]
    for looser, tighter, m in zip(firsts, firsts[1:], MARGINS_GB[1:], strict=False):
        if tighter is None:
            continue
        assert looser is not None
        assert looser.step_time_s <= tighter.step_time_s * (1 + 1e-9), (m, str(looser.strategy), str(tighter.strategy))
        if looser.step_time_s >= tighter.step_time_s * (1 - 1e-9):  # a tie: the row needing less memory
            assert looser.peak_memory_gb <= tighter.peak_memory_gb + 1e-9
