"""``estimate --lengths`` and ``plan --lengths``: the attention work packed samples leave on the slowest
data-parallel rank, priced through the cost model's attention FLOPs (factors worked out by hand)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from asap.balance import attention_work, offline_document_lengths, pack
from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec
from asap.spec.job import Job
from conftest import assert_one_line_error, run_cli

S = 8


def test_factors_by_hand():
    # q = sum(l^2) / S^2: 64/64, 32/64, 16/64, 64/64
    aw = attention_work([[8], [4, 4], [2, 2, 2, 2], [8]], global_batch=4, seq_len=S, dps=[1, 2, 3, 4])
    assert aw.steps == 1 and aw.samples == 4
    assert aw.mean == pytest.approx((1 + 0.5 + 0.25 + 1) / 4)
    assert aw.slowest[2] == pytest.approx(max((1 + 0.5) / 2, (0.25 + 1) / 2))  # contiguous rows per rank
    assert aw.slowest[4] == pytest.approx(1.0)
    assert aw.slowest[1] == pytest.approx(aw.mean)
    assert 3 not in aw.slowest  # 3 does not divide the batch


def test_factor_is_the_mean_over_whole_steps():
    # two steps of two samples, one left over; dp=2 -> step maxima 1.0 and 0.5
    aw = attention_work([[8], [4, 4], [4, 4], [2, 2, 2, 2], [8]], global_batch=2, seq_len=S, dps=[2])
    assert aw.steps == 2
    assert aw.slowest[2] == pytest.approx((1.0 + 0.5) / 2)


def job():
    return load_model("llama3-8b"), load_cluster("dgx-h100-1"), TrainSpec(16, 4096)


def test_full_length_documents_price_as_without_lengths():
    m, c, t = job()
    aw = attention_work([[4096]] * 16, 16, 4096, [1, 2, 4, 8])
    plain = estimate(Job.resolve(m, c, t), "tp=2,mbs=1")
    same = estimate(Job.resolve(m, c, replace(t, attention_work=aw.train_pairs())), "tp=2,mbs=1")
    assert same.step_time_s == plain.step_time_s


def test_halved_attention_saves_the_attention_kernels_share():
    m, c, t = job()
    plain = estimate(Job.resolve(m, c, t), "tp=2,mbs=1")
    half = estimate(Job.resolve(m, c, replace(t, attention_work=((4, 0.5),))), "tp=2,mbs=1")  # dp = 8 / 2 = 4
    other_dp = estimate(Job.resolve(m, c, replace(t, attention_work=((2, 0.5),))), "tp=2,mbs=1")
    assert half.step_time_s < plain.step_time_s
    assert other_dp.step_time_s == plain.step_time_s  # the factor of another dp degree does not apply
    assert half.peak_memory_gb == plain.peak_memory_gb


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    samples = pack(offline_document_lengths(300), 4096)
    path = tmp_path_factory.mktemp("lengths") / "samples.json"
    path.write_text(json.dumps(samples[: 16 * (len(samples) // 16)]))
    return path


def test_estimate_lengths_reports_the_slowest_rank(corpus_file):
    args = ["-m", "llama3-8b", "-c", "dgx-h100-1", "-b", "16", "-s", "4096", "--strategy", "tp=2,mbs=1", "--json"]
    plain = json.loads(run_cli("estimate", *args).stdout)
    proc = run_cli("estimate", *args, "--lengths", corpus_file)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    r = out["lengths"]
    assert r["attention_work"] == pytest.approx(r["attention_work_by_dp"]["4"])
    assert r["max_over_mean"] >= 1.0
    # short documents: less attention than full-length ones, so faster than the plain estimate
    assert r["attention_work"] < 1.0 and out["step_time_s"] < plain["step_time_s"]
    assert r["imbalance_s"] >= 0.0
    assert r["balanced"]["step_time_s"] <= out["step_time_s"] + 1e-12
    assert r["balanced"]["command"].startswith("asap balance --lengths")


def test_plan_rows_reproduce_through_estimate_with_the_same_lengths(corpus_file):
    base = ["-m", "llama3-8b", "-c", "dgx-h100-1", "-b", "16", "-s", "4096", "--lengths", corpus_file, "--json"]
    plan = json.loads(run_cli("plan", *base, "--top", "3").stdout)
    assert plan["lengths"]["steps"] >= 1
    for cand in plan["candidates"]:
        est = json.loads(run_cli("estimate", *base, "--strategy", cand["strategy_string"]).stdout)
        assert est["step_time_s"] == pytest.approx(cand["step_time_s"], rel=1e-9)


@pytest.mark.parametrize("content, needle", [
    ("[1, -3]", "document 1"),
    ('[[4096], ["x"]]', "sample 1 document 0"),
    ("{\"a\": 1}", "must be a JSON list"),
    ("[[8]]", "fewer than one global batch"),
    ("[[1, 2", "not JSON"),
])
def test_bad_lengths_file_is_one_line(tmp_path, content, needle):
    p = tmp_path / "bad.json"
    p.write_text(content)
    proc = run_cli("estimate", "-m", "llama3-8b", "-c", "dgx-h100-1", "-b", "16", "-s", "4096", "--lengths", p)
    assert_one_line_error(proc, "lengths", needle)
