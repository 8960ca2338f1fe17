"""``compare`` explains a gap with a per-knob path (issue 45.9): one knob at a time from A towards B, the move that
explains most first, each intermediate priced; intermediates no rule admits move together and say so."""

import json

import pytest
from conftest import run_cli

from asap.cli.common import JobOptions
from asap.compare import compare, knob_path
from asap.cost.estimate import estimate, estimate_spelled

JOB = ["-m", "llama3-8b", "-c", "dgx-h100-8node", "-b", "256", "-s", "4096"]


def test_path_prices_each_step_and_adds_up_to_the_gap():
    job = JobOptions("llama3-8b", "dgx-h100-8node", 256, 4096).load()
    a, b = estimate_spelled(job, "tp8 sp1 pp2 mbs1"), estimate_spelled(job, "tp2 sp1 mbs2 rc:sel zero1")
    path = knob_path(job, a.strategy, b.strategy, b.step_time_s)
    assert {r["knob"] for r in path} >= {"mbs"} and path[-1]["step_time_s"] == pytest.approx(b.step_time_s)
    assert sum(r["delta_s"] for r in path) == pytest.approx(b.step_time_s - a.step_time_s)
    now = a.step_time_s
    for r in path:  # each row is its intermediate's own price
        assert r["delta_s"] == pytest.approx(r["step_time_s"] - now)
        now = r["step_time_s"]
    # greedy: the first move is the single legal knob that moves the step most towards B
    first = path[0]
    if not first.get("combined"):
        from dataclasses import replace

        sign = -1.0 if b.step_time_s < a.step_time_s else 1.0
        for k in ("mbs", "recompute", "pp"):
            s = replace(a.strategy, **{k: getattr(b.strategy, k)})
            s = replace(s, dp=job.cluster.num_devices // (s.tp * s.pp * s.cp))
            try:
                alone = estimate(job, s, classes=False).step_time_s
            except Exception:
                continue
            assert sign * (first["step_time_s"] - a.step_time_s) >= sign * (alone - a.step_time_s) - 1e-12


def test_an_illegal_intermediate_moves_with_its_partner():
    job = JobOptions("llama3-8b", "dgx-h100-8node", 256, 4096).load()
    a, b = estimate_spelled(job, "tp4 sp1"), estimate_spelled(job, "tp1 sp0")
    path = compare([a, b], ["A", "B"], job)["path"]
    assert len(path) == 1 and path[0]["combined"] and set(path[0]["from"]) == {"tp", "sp"}
    assert "together" in path[0]["note"]


def test_compare_json_and_text_carry_the_path():
    r = run_cli("compare", *JOB, "-S", "tp8 sp1 pp2", "-S", "tp2 sp1 mbs2 rc:sel", "--json")
    d = json.loads(r.stdout)
    assert d["path"] and all({"knob", "from", "to", "step_time_s", "delta_s"} <= set(p) for p in d["path"])
    text = run_cli("compare", *JOB, "-S", "tp8 sp1 pp2", "-S", "tp2 sp1 mbs2 rc:sel").stdout
    assert "one knob at a time" in text and d["path"][0]["knob"] in text
