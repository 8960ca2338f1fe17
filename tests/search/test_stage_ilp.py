"""The pipeline-stage ILP against a brute-force split, and against Megatron's uniform split."""

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from asap.search.stage_ilp import solve_split
from asap.search.stages import brute_force_split, build_problem, uniform_split
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.strategy import resolve_strategy
from asap.spec.train import TrainSpec
from asap.spec.job import Job
from conftest import run_cli

SMALL_MOE = dict(name="small-moe", num_layers=7, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=8,
                 vocab_size=65536, moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=1024, shared_experts=1,
                                            first_dense_layers=2), mtp_layers=1)
SMALL_DENSE = dict(name="small-dense", num_layers=8, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=16,
                   vocab_size=128000)


def problem(model_dict, strategy, hbm_gb=None, gb=64, seq=4096):
    model = load_model(model_dict)
    cluster = load_cluster("h100-sxm", nodes=1)
    train = TrainSpec(gb, seq)
    s = resolve_strategy(strategy, model, train, cluster.num_devices)
    prob = build_problem(Job.resolve(model, cluster, train), s)
    if hbm_gb is not None:
        prob = replace(prob, hbm_bytes=hbm_gb * 2**30)
    return prob


CASES = [
    (SMALL_MOE, "pp=2,ep=4,mbs=1", None),
    (SMALL_MOE, "pp=4,ep=2,mbs=1", None),
    (SMALL_DENSE, "pp=2,tp=2,mbs=2", None),
    (SMALL_DENSE, "pp=4,tp=2,mbs=1", None),
    (SMALL_DENSE, "pp=2,vpp=2,tp=2,mbs=1", None),
]


@pytest.mark.parametrize("model, strategy, _", CASES)
def test_ilp_matches_brute_force(model, strategy, _):
    prob = problem(model, strategy)
    best = brute_force_split(prob)
    ilp = solve_split(prob, time_limit_s=20)
    assert best is not None and ilp.fits
    assert ilp.pipeline_time_s == pytest.approx(best.pipeline_time_s, rel=1e-6)


def test_ilp_chooses_recompute_per_stage_under_memory_pressure():
    """Shrink the memory until the unconstrained optimum no longer fits: the ILP and the brute force must agree
    on a split that recomputes only some stages."""
    prob = problem(dict(SMALL_DENSE, vocab_size=32000), "pp=4,tp=2,mbs=4", gb=128)
    free = solve_split(prob, time_limit_s=20)
    need = max(free.device_memory_gb)
    for factor in (0.7, 0.6):
        tight = replace(prob, hbm_bytes=factor * need * 2**30)
        best = brute_force_split(tight)
        ilp = solve_split(tight, time_limit_s=20)
        assert best is not None
        assert ilp.fits and max(ilp.device_memory_gb) <= factor * need + 1e-9
        assert ilp.pipeline_time_s == pytest.approx(best.pipeline_time_s, rel=1e-6)
        assert any(ilp.recompute) and not all(ilp.recompute)  # only some stages pay for recompute
        assert ilp.pipeline_time_s >= free.pipeline_time_s


@pytest.mark.parametrize("name, cluster, nodes, gb, seq, strategy", [
    ("deepseek-v3", "h800", 256, 15360, 4096, "pp=16,ep=64,mbs=1,recompute=full"),
    ("telechat3-105b", "ascend-910b", 64, 2048, 4096, "pp=8,ep=8,mbs=1"),
])
def test_ilp_beats_uniform_split_on_uneven_models(name, cluster, nodes, gb, seq, strategy):
    model = load_model(name)
    c = load_cluster(cluster, nodes=nodes)
    train = TrainSpec(gb, seq)
    s = resolve_strategy(strategy, model, train, c.num_devices)
    prob = build_problem(Job.resolve(model, c, train), s)
    uniform = uniform_split(prob)
    ilp = solve_split(prob, time_limit_s=3)
    assert ilp.fits
    assert ilp.pipeline_time_s < 0.95 * uniform.pipeline_time_s
    parts = ilp.to_dict()["bubble_s"]
    assert parts["ideal"] > 0 and parts["imbalance"] >= 0 and parts["recompute"] >= 0
    assert sum(ilp.layers_per_stage) == model.num_layers


def test_ilp_never_worse_than_uniform_on_even_dense():
    prob = problem(SMALL_DENSE, "pp=4,tp=2,mbs=1")
    assert solve_split(prob, time_limit_s=5).pipeline_time_s <= uniform_split(prob).pipeline_time_s + 1e-12


def _plan_json(*args) -> dict:
    proc = run_cli("plan", "--model", "deepseek-v3", "--cluster", "h800", "--nodes", 256, "--global-batch", 15360,
                   "--seq-len", 4096, "--json", *args)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    out.pop("search_time_s")  # the one wall-clock field
    return out


@pytest.mark.slow
@pytest.mark.parametrize("args", [(), ("--fix", "pp=16,ep=64", "--ilp-candidates", "3")])
def test_plan_is_the_same_under_a_cpu_hog(args):
    """The stage ILP stops on a count of branch-and-bound nodes, not on seconds, so a loaded machine gives
    the same plan, stage splits and solver status (the pinned layout's ILPs are the ones a 0.2 s limit cut)."""
    quiet = _plan_json(*args)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        loaded = _plan_json(*args)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert loaded == quiet
    splits = [c["stage_split"] for c in quiet["candidates"] if c.get("stage_split")]
    assert splits and all("Time limit" not in s["solver"] for s in splits)
