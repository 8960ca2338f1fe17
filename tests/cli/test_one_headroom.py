"""One default headroom for every command that chooses (issue 45.3): ``plan``, ``compare --plan-best`` and
``propose``'s re-plan name the same best for Qwen3-30B-A3B on 32 x 8 H100 (before: compare and propose kept no
headroom and chose a row over plan's own memory limit); ``estimate`` judges against the device and says so."""

import json

from conftest import run_cli

JOB = ["-m", "qwen3-30b-a3b", "-c", "dgx-h100-8node", "--nodes", "32", "-b", "512", "-s", "4096"]


def _json(*args):
    r = run_cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_plan_compare_and_propose_choose_one_best_under_plans_limit():
    plan = _json("plan", *JOB, "--top", "1")
    best = plan["candidates"][0]
    assert best["peak_memory_gb"] <= plan["memory_limit_gb"] < plan["device_memory_gb"]
    compare = _json("compare", *JOB, "-S", "tp2 ep8", "--plan-best")
    chosen = compare["estimates"][-1]
    assert chosen["strategy"] == best["strategy"] and chosen["step_time_s"] == best["step_time_s"]
    propose = _json("propose", *JOB, "-S", "tp2 ep8")
    replan = [p for p in propose["proposals"] if p["kind"] == "re-plan"]
    assert replan and replan[0]["strategy"] == best["strategy"]
    for p in propose["proposals"]:  # every proposal chosen under the same limit
        est = _json("estimate", *JOB, "-S", p["strategy_string"])
        assert est["peak_memory_gb"] <= plan["memory_limit_gb"] and est["fits_with_headroom"]


def test_a_memory_margin_moves_every_choice_alike():
    plan = _json("plan", *JOB, "--top", "1", "--memory-margin", "0")
    compare = _json("compare", *JOB, "-S", "tp2 ep8", "--plan-best", "--memory-margin", "0")
    assert compare["estimates"][-1]["strategy"] == plan["candidates"][0]["strategy"]


def test_estimate_says_it_judges_against_the_device():
    r = run_cli("estimate", *JOB, "-S", "tp2 ep8")
    assert r.returncode == 0 and "headroom a plan keeps" in r.stdout
    r = run_cli("validate", "--cases", "../shared/reference/fp4_runs_2025.json")
    assert r.returncode == 0 and "fits the device memory" in " ".join(r.stdout.split())
