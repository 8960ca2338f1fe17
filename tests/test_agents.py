"""The agents (Analyzer, Proposer, Coordinator) on the cost model and a real SQLite Memory.

The published optimizer's three TPU scenarios: the first proposal makes the expert's move. Every proposal is a
strategy ``estimate`` prices the same; the loop reaches the planner's best and never repeats a trial Memory has.
"""

from __future__ import annotations

import json

import pytest

from asap.agents.analyzer import Analyzer
from asap.agents.coordinator import Coordinator, fit_correction
from asap.agents.memory import Memory
from asap.agents.proposer import Proposer, changed_keys, parse_current
from asap.cost.estimate import estimate
from asap.execute.sim import SimExecutor
from asap.search.planner import plan
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec

V5P_64 = load_cluster("tpu-v5p", devices=64)


def _propose(model: str, cluster, train: TrainSpec, current: str):
    m = load_model(model)
    s = parse_current(current, m, cluster, train)
    diagnosis = Analyzer(cluster).analyze(estimate(m, cluster, train, s))
    return m, s, diagnosis, Proposer(m, cluster, train).propose(s, diagnosis)


def test_compute_bound_mesh_trades_sequence_sharding_for_data():
    """Llama 3 8B on 64 v5p chips with cp=4 where data parallelism would do: compute-bound; the first proposal
    shrinks the sequence sharding and grows the data-parallel degree."""
    _, s, d, ps = _propose("llama3-8b", V5P_64, TrainSpec(256, 8192), "dp=16,cp=4")
    assert d.bottleneck == "compute"
    first = ps.proposals[0].strategy
    assert first.cp < s.cp and first.dp > s.dp


def test_hbm_bound_data_parallel_run_adds_model_parallelism_or_sharding():
    """Llama 3 70B pure data parallel (zero 0) on 64 v5p chips does not fit: memory-bound; the first proposal
    fits by adding model parallelism or sharding."""
    _, s, d, ps = _propose("llama3-70b", V5P_64, TrainSpec(256, 8192), "dp=64,zero=0")
    assert d.bottleneck == "memory" and "does not fit" in d.evidence[0]
    first = ps.proposals[0].strategy
    assert ps.proposals[0].fits
    assert first.tp > s.tp or first.pp > s.pp or first.zero > s.zero


def test_communication_bound_mesh_halves_model_parallelism():
    """tp=16 over the slice for an 8B model: a third of the step in TP collectives (communication-bound); the
    first proposal shrinks tensor parallelism and grows data parallelism."""
    _, s, d, ps = _propose("llama3-8b", V5P_64, TrainSpec(64, 2048), "dp=4,tp=16")
    assert d.bottleneck == "communication"
    first = ps.proposals[0].strategy
    assert first.tp < s.tp and first.dp > s.dp


@pytest.mark.parametrize("model,cluster,train,current", [
    ("llama3-8b", V5P_64, TrainSpec(256, 8192), "dp=16,cp=4"),
    ("deepseek-v3", load_cluster("h800", devices=2048), TrainSpec(15360, 4096), "tp=8,pp=1,ep=8,recompute=full"),
])
def test_exactly_three_diverse_fitting_proposals_that_estimate_reproduces(model, cluster, train, current):
    m, s, _, ps = _propose(model, cluster, train, current)
    assert len(ps.proposals) == 3
    moved = [frozenset(changed_keys(p.strategy, s)) for p in ps.proposals]
    assert len(set(moved)) == 3 and all(moved)
    for p in ps.proposals:
        assert p.fits and p.rationale and p.evidence
        again = estimate(m, cluster, train, str(p.strategy))
        assert again.step_time_s == pytest.approx(p.predicted_step_time_s, rel=1e-12)
        lo, hi = p.expected_speedup_range
        assert lo <= p.expected_speedup <= hi
    assert any(c["kept"] is False for c in ps.considered)  # the audit trail records what was dropped and why


def test_tune_reaches_the_planners_best_and_never_repeats(tmp_path):
    """DeepSeek-V3 on 2048 H800 from a poor start (tp=8, no pipeline, ep=8, full recompute): within 5% of
    plan's best in at most 6 trials; a second run with the same Memory runs none of the first run's
    strategies again."""
    m, c, t = load_model("deepseek-v3"), load_cluster("h800", devices=2048), TrainSpec(15360, 4096)
    best = plan(m, c, t, {}, top=1).candidates[0].step_time_s
    db = tmp_path / "memory.sqlite"
    with Memory.open(db) as mem:
        r1 = Coordinator(m, c, t, SimExecutor(m, c, t), mem, budget=6, start="tp=8,pp=1,ep=8,recompute=full").run()
    ran = [x["strategy_string"] for x in r1["trials"] if x["status"] != "skipped"]
    assert len(ran) <= 6 and r1["best"]["measured_step_time_s"] <= best * 1.05
    with Memory.open(db) as mem:
        r2 = Coordinator(m, c, t, SimExecutor(m, c, t), mem, budget=3, start="tp=8,pp=1,ep=8,recompute=full").run()
        assert len(mem.trials()) == len(ran) + sum(x["status"] != "skipped" for x in r2["trials"])
    again = [x["strategy_string"] for x in r2["trials"] if x["status"] != "skipped"]
    assert not set(again) & set(ran)
    assert r2["trials"][0]["status"] == "skipped"


def test_the_correction_reproduces_a_uniformly_slower_machine():
    """Trials measured 1.3x slower than predicted in every term: both factors come out 1.3."""
    m, c, t = load_model("llama3-8b"), load_cluster("h100-sxm", devices=16), TrainSpec(64, 4096)
    pairs = [(e, 1.3 * e.step_time_s) for e in (estimate(m, c, t, s) for s in ("tp=2", "tp=4", "dp=16,zero=3"))]
    corr = fit_correction(pairs)
    assert corr.compute == pytest.approx(1.3, rel=0.05) and corr.communication == pytest.approx(1.3, rel=0.3)


def test_propose_cli_answers_with_three_proposals(cli):
    p = cli("propose", "-m", "llama3-8b", "-c", "tpu-v5p", "--devices", "64", "-b", "256", "-s", "8192",
            "-S", "dp=16,cp=4", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert set(d) >= {"diagnosis", "proposals"} and len(d["proposals"]) == 3
    for prop in d["proposals"]:
        assert set(prop) >= {"strategy", "rationale", "expected_speedup", "predicted_step_time_s", "tradeoffs",
                             "evidence", "fits"}


SLOW_MACHINE = """\
accelerator:
  name: h100-slow-net
  family: hopper
  peak_tflops: {bf16: 989, fp16: 989, fp8: 1979}
  hbm_gb: 80
  hbm_gbps: 3350
  intra_node_gbps: 450
  inter_node_gbps: 25
  devices_per_node: 8
  scale_up_domain: 8
devices_per_node: 8
nodes: 16
efficiency: {gemm_efficiency: 0.523, fp8_gemm_efficiency: 0.51}
"""


def test_the_loop_learns_a_machine_that_differs_from_the_catalog(tmp_path):
    """The sim executor 'measures' on an H100 cluster whose inter-node network runs at half the catalog's 50 GB/s
    per GPU and whose GEMMs are 15% slower (0.523 against 0.615). On Llama 3 70B, 128 GPUs, that machine's best
    strategy is not the catalog's; tune ends within 5% of it in at most 8 trials, and its recalibrated
    predictions are closer to what the machine measured than the catalog's were."""
    path = tmp_path / "slow.yaml"
    path.write_text(SLOW_MACHINE)
    m, c, t = load_model("llama3-70b"), load_cluster("h100-sxm", devices=128), TrainSpec(512, 8192)
    machine = load_cluster(str(path))
    machine_best = plan(m, machine, t, {}, top=1).candidates[0]
    assert str(machine_best.strategy) != str(plan(m, c, t, {}, top=1).candidates[0].strategy)
    with Memory.open(tmp_path / "memory.sqlite") as mem:
        r = Coordinator(m, c, t, SimExecutor(m, machine, t), mem, budget=8).run()
    assert len(r["trials"]) <= 8
    assert r["best"]["measured_step_time_s"] <= 1.05 * machine_best.step_time_s
    ok = [x for x in r["trials"] if x["status"] == "ok"][1:]  # after the first measurement the model is corrected
    assert ok
    rel = lambda key: sum(abs(x[key] / x["measured_step_time_s"] - 1) for x in ok) / len(ok)  # noqa: E731
    assert rel("predicted_step_time_s") < rel("catalog_step_time_s")
    assert r["correction"]["compute"] > 1.0  # the machine is slower than the catalog


def test_tune_with_real_runs_on_four_cpu_processes(tmp_path, monkeypatch):
    """``asap tune --executor torch``: tiny-dense on 4 gloo processes, global batch 16, 128 tokens, budget 4.
    It ends no slower than its first trial, every trial is in Memory, and a second run with the same Memory
    runs none of them again."""
    from asap.execute.torch_exec import TorchExecutor

    monkeypatch.setenv("ASAP_DATA_DIR", str(tmp_path))  # no calibration of this machine: the catalog's figures
    m, c, t = load_model("tiny-dense"), load_cluster("local-cpu"), TrainSpec(16, 128, "fp32")
    db = tmp_path / "memory.sqlite"
    with Memory.open(db) as mem:
        r1 = Coordinator(m, c, t, TorchExecutor(m, t, steps=3), mem, budget=4).run()
        stored = {x["strategy_string"] for x in mem.trials()}
    first = r1["trials"][0]
    assert first["status"] == "ok" and r1["best"]["measured_step_time_s"] <= first["measured_step_time_s"]
    assert len(stored) == len([x for x in r1["trials"] if x["status"] != "skipped"])
    with Memory.open(db) as mem:
        r2 = Coordinator(m, c, t, TorchExecutor(m, t, steps=3), mem, budget=2).run()
    ran_again = [x for x in r2["trials"] if x["status"] != "skipped"]
    assert not {x["strategy_string"] for x in ran_again} & {x["strategy_string"] for x in r1["trials"]}
