"""The planner ranks only what the chosen stack can run: the rules ``emit`` refuses with (asap.spec.stack_rules)
prune the planner's space, so ``plan --emit F`` writes its first candidate and ``--top 1`` never comes back
empty."""

import json

import pytest

from asap.search.advice import emit_strategy
from asap.emit import FORMATS, FRAMEWORK_OF
from asap.search.planner import plan
from asap.spec.strategy import parse_strategy
from asap.spec.job import Job

from conftest import assert_one_line_error

ISSUE = ("-m", "deepseek-v3", "-c", "h800", "--nodes", "64", "-b", "1024", "-s", "4096")


def test_the_issue_case_writes_the_first_candidate(cli):
    """Pinned to pp=16,vpp=1, the planner used to rank a2a_overlap=1 first (Megatron-Core needs virtual stages
    for it under a pipeline); ``plan --emit megatron --top 1`` then exited 2 and printed nothing."""
    p = cli("plan", *ISSUE, "--top", "1", "--fix", "pp=16,vpp=1", "--emit", "megatron", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    best = d["candidates"][0]
    assert d["emit"]["strategy_string"] == best["strategy_string"] and d["emit"]["skipped"] == []
    assert best["strategy"]["pp"] == 16 and best["strategy"]["a2a_overlap"] == 0
    assert "--pipeline-model-parallel-size 16" in d["emit"]["text"]
    assert "--overlap-moe-expert-parallel-comm" not in d["emit"]["text"]
    text = cli("plan", *ISSUE, "--top", "1", "--fix", "pp=16,vpp=1", "--emit", "megatron")
    assert text.returncode == 0 and text.stdout.startswith("# Megatron-LM") and "not expressible" not in text.stderr


def test_pinning_what_the_stack_cannot_run_is_one_line(cli):
    p = cli("plan", *ISSUE, "--top", "1", "--fix", "pp=16,vpp=1,ep=16,a2a_overlap=1", "--framework", "megatron")
    assert_one_line_error(p, "fix.a2a_overlap", "megatron cannot express a2a_overlap=1 with pp>1 and vpp=1")
    p = cli("plan", "-m", "llama3-8b", "-c", "h100-sxm", "--devices", "8", "-b", "64", "-s", "4096", "--precision",
            "fp8", "--framework", "deepspeed")
    assert_one_line_error(p, "precision", "deepspeed cannot express fp8")


CLUSTER_OF = {"maxtext": "v5p-512"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_candidate_of_a_stack_plan_is_emitted(fmt):
    """Planned with a format's stack, every ranked candidate (default and ILP splits alike) passes the emitter."""
    cluster = CLUSTER_OF.get(fmt, "ascend-910b-64" if fmt == "mindformers" else "dgx-h100-8node")
    job = Job.from_names("mixtral-8x7b", cluster, 256, 4096, "bf16", FRAMEWORK_OF[fmt])
    if fmt == "torchtitan":  # torchtitan 0.2.2 balances experts by the expert bias only (no balancing loss)
        from dataclasses import replace

        m = job.model
        job = replace(job, model=replace(m, moe=replace(m.moe, expert_bias=True, aux_loss_coef=0.0)))
    result = plan(job, fixed=parse_strategy("", field="fix"), top=8, split_candidates=2)
    assert result.candidates
    for e in result.candidates:
        emit_strategy(fmt, job, e.strategy)  # raises AsapError where the stack cannot express it
