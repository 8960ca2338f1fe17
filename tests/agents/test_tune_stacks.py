"""Real trials of the real stacks on this machine's CPU processes (2-3 steps of tiny-dense): torchtitan 0.2.2
(FSDP2, TP, PP on gloo) and DeepSpeed 0.19.8 (ZeRO 1-3) through ``asap tune --executor ...``; Memory keeps
their measured step times and logs, the correction is refitted, ``asap diagnose`` reads their traces."""

import json
import sqlite3

import pytest

from asap import Job, TrainSpec, load_cluster, load_model
from asap.execute.factory import make_executor

JOB = ("-m", "tiny-dense", "-c", "local-cpu", "--devices", "2", "-b", "8", "-s", "64")


def _memory(db):
    with sqlite3.connect(db) as con:
        trials = con.execute("select status, measured_step_time_s, reason, traces from trials order by id").fetchall()
        results = [json.loads(r[0]) for r in con.execute(
            "select outputs from audit where agent='executor' and step='result' order by id")]
    return trials, results


def _tune(cli, tmp_path, executor, budget, *extra):
    db = tmp_path / "memory.db"
    p = cli("tune", *JOB, "--executor", executor, "--budget", budget, "--steps", "3", "--memory", db,
            "--profile", tmp_path / "trials", "--json", *extra, timeout=1500)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout), db


def test_tune_torchtitan_budget_3(cli, tmp_path):
    out, db = _tune(cli, tmp_path, "torchtitan", "3")
    ok = [t for t in out["trials"] if t["status"] == "ok"]
    assert len(out["trials"]) >= 2 and len(ok) >= 2, out["trials"]
    trials, results = _memory(db)
    assert [t[0] for t in trials] == [t["status"] for t in out["trials"] if t["status"] != "skipped"]
    for (status, measured, reason, traces), res in zip(trials, results, strict=True):
        if status == "ok":  # a measured step time, torchtitan's log, its rank traces
            assert measured > 0 and res["step_time_s"] == measured
            assert "step:" in res["details"]["log_tail"] and "tps:" in res["details"]["log_tail"]
            assert res["details"]["argv"][res["details"]["argv"].index("--job.config_file") + 1].endswith(".toml")
            assert json.loads(traces) and all(p.endswith("_trace.json") for p in json.loads(traces))
        else:
            assert reason
    assert out["correction"]["trials"] == len(ok)  # refitted to every measured trial
    trace = json.loads(trials[0][3])[0]
    d = cli("diagnose", trace, "--json")
    assert d.returncode == 0, d.stderr
    assert json.loads(d.stdout)["step_time_s"] > 0


@pytest.mark.parametrize("strategy,axis", [("dp=2,zero=3", "data_parallel_shard_degree = 2"),
                                           ("tp=2,zero=3", "tensor_parallel_degree = 2"),
                                           ("pp=2,zero=3", "pipeline_parallel_degree = 2")])
def test_torchtitan_fsdp_tp_pp(tmp_path, strategy, axis):
    m, c = load_model("tiny-dense"), load_cluster("local-cpu", devices=2)
    ex = make_executor("torchtitan", job=Job.resolve(m, c, TrainSpec(8, 64, "bf16", "torchtitan")), steps=3,
                       workdir=str(tmp_path))
    r = ex.run(ex.parse(strategy))
    assert r.ok, (r.reason, r.log_tail[-2000:])
    assert axis in (tmp_path / "trial1" / "torchtitan.toml").read_text()
    assert len(r.details["step_times_s"]) == 5 and r.step_time_s > 0  # 3 asked: warm-up + 3 timed + profiled
    # the first loss of a random model on a 512-token vocabulary: near ln 512 = 6.24 (torchtitan's own
    # initialisation and its tokenised corpus, docs/tune.md)
    assert 5.5 < r.losses[0] < 7.5


def test_tune_deepspeed(cli, tmp_path):
    out, db = _tune(cli, tmp_path, "deepspeed", "2")
    trials, results = _memory(db)
    assert trials[0][0] == "ok" and trials[0][1] > 0
    assert "time (ms) | fwd:" in results[0]["details"]["log_tail"]
    assert json.loads(trials[0][3])  # torch.profiler traces of the last step
    assert out["correction"]["trials"] == sum(t[0] == "ok" for t in trials)


@pytest.mark.parametrize("zero", [1, 3])
def test_deepspeed_zero_stages_and_the_reference_loss(tmp_path, zero):
    """DeepSpeed trains asap's reference model from the same seed on the same tokens as ``asap run``: the first
    step's loss is the reference trainer's (fp32; ZeRO does not change the forward pass)."""
    m, c = load_model("tiny-dense"), load_cluster("local-cpu", devices=2)
    train = TrainSpec(8, 64, "fp32", "deepspeed")
    ds_ex = make_executor("deepspeed", job=Job.resolve(m, c, train), steps=2, workdir=str(tmp_path / "ds"))
    ds = ds_ex.run(ds_ex.parse(f"dp=2,zero={zero}"))
    assert ds.ok, (ds.reason, ds.log_tail[-2000:])
    assert json.loads((tmp_path / "ds" / "trial1" / "deepspeed.json").read_text())["zero_optimization"]["stage"] == zero
    ref_ex = make_executor("torch", model=m, train=TrainSpec(8, 64, "fp32"), steps=2)
    ref = ref_ex.run(ref_ex.parse(f"dp=2,zero={min(zero, 2)}"))
    assert ref.ok, ref.reason
    assert ds.losses[0] == pytest.approx(ref.losses[0], abs=2e-5)
