"""The planner's layer split (``search.split_dp``) against the brute force over every split, and against the
default (uniform) split; the plan is the same on a loaded machine (the split search counts moves, not seconds)."""

import json
import os
import subprocess
import sys

import pytest

from asap.search.split_dp import exact_chain_split, planner_splits
from asap.search.stages import brute_force_split, build_problem, uniform_split
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.strategy import resolve_strategy
from conftest import run_cli

SMALL_MOE = dict(name="small-moe", num_layers=7, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
                 vocab_size=65536, moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=1024, shared_experts=1,
                                            first_dense_layers=2), mtp_layers=1)
SMALL_DENSE = dict(name="small-dense", num_layers=8, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=16,
                   vocab_size=128000)


def problem(model, strategy, cluster="h100-sxm", nodes=1, gb=64, seq=4096):
    job = Job.from_names(model, cluster, gb, seq, nodes=nodes)
    s = resolve_strategy(strategy, job.model, job.train, job.devices)
    return build_problem(job, s)


@pytest.mark.parametrize("model, strategy", [(SMALL_MOE, "pp=2,ep=4,mbs=1"), (SMALL_MOE, "pp=4,ep=2,mbs=1"),
                                             (SMALL_DENSE, "pp=2,tp=2,mbs=2"), (SMALL_DENSE, "pp=4,tp=2,mbs=1")])
def test_one_chunk_per_device_is_the_brute_force_optimum(model, strategy):
    """vpp = 1: the pipeline time (m-1) T_max + (1 + (pp-1)/v) T_avg varies only through T_max, which the
    dynamic programme minimises exactly; the brute force over every split (same recompute) agrees."""
    prob = problem(model, strategy)
    best = brute_force_split(prob, allow_recompute_choice=False)
    exact = exact_chain_split(prob)
    assert best is not None and exact is not None and exact.fits
    assert exact.pipeline_time_s == pytest.approx(best.pipeline_time_s, rel=1e-9)


def test_interleaved_splits_are_no_worse_than_the_default():
    prob = problem(SMALL_DENSE, "pp=2,vpp=2,tp=2,mbs=1")
    splits = planner_splits(prob)
    best = brute_force_split(prob, allow_recompute_choice=False)
    assert splits and best is not None
    assert min(s.pipeline_time_s for s in splits) <= uniform_split(prob).pipeline_time_s + 1e-12
    assert min(s.pipeline_time_s for s in splits) >= best.pipeline_time_s - 1e-12


@pytest.mark.parametrize("name, cluster, nodes, gb, seq, strategy", [
    ("deepseek-v3", "h800", 256, 15360, 4096, "pp=16,ep=64,mbs=1,recompute=full"),
    ("telechat3-105b", "ascend-910b", 64, 2048, 4096, "pp=8,ep=8,mbs=1"),
])
def test_the_split_beats_the_uniform_one_on_uneven_models(name, cluster, nodes, gb, seq, strategy):
    prob = problem(name, strategy, cluster, nodes, gb, seq)
    exact = exact_chain_split(prob)
    assert exact is not None and exact.fits
    assert exact.pipeline_time_s < 0.95 * uniform_split(prob).pipeline_time_s
    assert sum(exact.layers_per_stage) == load_model(name).num_layers


def _plan_json(*args) -> dict:
    proc = run_cli("plan", "--model", "deepseek-v3", "--cluster", "h800", "--nodes", 256, "--global-batch", 15360,
                   "--seq-len", 4096, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    out.pop("search_time_s")  # the one wall-clock field
    return out


@pytest.mark.slow
@pytest.mark.parametrize("args", [(), ("--fix", "pp=16,ep=64", "--split-candidates", "3")])
def test_plan_is_the_same_under_a_cpu_hog(args):
    """The split search counts moves, not seconds, so a loaded machine gives the same plan and stage splits."""
    quiet = _plan_json(*args)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        loaded = _plan_json(*args)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert loaded == quiet
    assert [c["stage_split"] for c in quiet["candidates"] if c.get("stage_split")]
