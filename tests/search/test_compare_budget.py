"""``asap compare`` and ``--tokens`` / ``--price-per-device-hour``: figures checked by hand against the
estimates each one is made of."""

from __future__ import annotations

import json

import pytest

from asap.budget import parse_tokens, training_budget
from asap.errors import AsapError
from conftest import assert_one_line_error, run_cli

JOB = ["-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "64", "-s", "4096"]
A, B = "tp=8,pp=2", "tp=4,pp=4"


def estimate(strategy: str, *extra) -> dict:
    proc = run_cli("estimate", *JOB, "--strategy", strategy, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("text, tokens", [("15T", 15e12), ("300B", 3e11), ("2.5e12", 2.5e12), ("1000000", 1e6),
                                          ("7.5m", 7.5e6), ("1G", 1e9)])
def test_token_budgets_parse(text, tokens):
    assert parse_tokens(text) == pytest.approx(tokens)


@pytest.mark.parametrize("text", ["15X", "-1T", "0", "inf", "T", "", "1e30"])
def test_bad_token_budgets_are_refused(text):
    with pytest.raises(AsapError, match="tokens"):
        parse_tokens(text)


def test_budget_arithmetic():
    # 1e12 tokens at 1e6 tokens/s: 1e6 s = 11.574 days; 64 devices: 1e6 / 3600 * 64 = 17,777.8 device-hours
    b = training_budget(1e6, 64, 1e12, price_per_device_hour=2.0)
    assert b["time_to_train_days"] == pytest.approx(1e6 / 86400)
    assert b["device_hours"] == pytest.approx(1e6 / 3600 * 64)
    assert b["cost"] == pytest.approx(1e6 / 3600 * 64 * 2.0)


def test_estimate_tokens_on_the_estimate_itself():
    plain = estimate(A)
    est = estimate(A, "--tokens", "15T", "--price-per-device-hour", "2.5")
    assert est["step_time_s"] == plain["step_time_s"]
    seconds = 15e12 / plain["tokens_per_s"]
    assert est["time_to_train_days"] == pytest.approx(seconds / 86400)
    assert est["device_hours"] == pytest.approx(seconds / 3600 * 64)
    assert est["cost"] == pytest.approx(seconds / 3600 * 64 * 2.5)


def test_plan_candidates_carry_the_budget():
    proc = run_cli("plan", *JOB, "--tokens", "1T", "--json", "--top", "2")
    out = json.loads(proc.stdout)
    for cand in out["candidates"]:
        assert cand["time_to_train_days"] == pytest.approx(1e12 / cand["tokens_per_s"] / 86400)


def test_price_without_tokens_is_one_line():
    assert_one_line_error(run_cli("estimate", *JOB, "--price-per-device-hour", "2"), "price-per-device-hour",
                          "--tokens")
    assert_one_line_error(run_cli("estimate", *JOB, "--tokens", "lots"), "tokens")


def test_compare_deltas_are_the_differences_of_the_estimates():
    a, b = estimate(A), estimate(B)
    proc = run_cli("compare", *JOB, "-S", A, "-S", B, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [e["step_time_s"] for e in out["estimates"]] == [a["step_time_s"], b["step_time_s"]]
    assert out["deltas_s"]["step_time_s"] == pytest.approx(b["step_time_s"] - a["step_time_s"])
    for k in a["exposed_s"]:
        assert out["deltas_s"][k] == pytest.approx(b["exposed_s"][k] - a["exposed_s"][k])
    for k in a["breakdown_s"]:
        assert out["deltas_breakdown_s"][k] == pytest.approx(b["breakdown_s"][k] - a["breakdown_s"][k])
    # the exposed terms add up to the step, so their differences add up to the step's
    parts = sum(v for k, v in out["deltas_s"].items() if k != "step_time_s")
    assert parts == pytest.approx(out["deltas_s"]["step_time_s"], rel=1e-6, abs=1e-9)


def test_compare_verdict_names_the_faster_and_the_deciding_term():
    a, b = estimate(A), estimate(B)
    out = json.loads(run_cli("compare", *JOB, "-S", A, "-S", B, "--json").stdout)
    fast, slow = (b, a) if b["step_time_s"] < a["step_time_s"] else (a, b)
    d = {k: fast["exposed_s"][k] - slow["exposed_s"][k] for k in a["exposed_s"]}
    term = min(d, key=d.get)  # the largest drop from the slower to the faster
    gain = 1 - fast["step_time_s"] / slow["step_time_s"]
    assert out["verdict"].startswith(f"{'tp4 pp4' if fast is b else 'tp8 pp2'} is {gain:.1%} faster")  # compact names
    assert f"exposed {term} drops" in out["verdict"]


def test_compare_with_the_plan_best():
    out = json.loads(run_cli("compare", *JOB, "-S", A, "--plan-best", "--json").stdout)
    best = json.loads(run_cli("plan", *JOB, "--top", "1", "--json").stdout)["candidates"][0]
    assert out["estimates"][1]["strategy_string"] == best["strategy_string"]
    assert out["estimates"][1]["step_time_s"] == pytest.approx(best["step_time_s"])
    assert out["names"][1].startswith("best: ")


def test_compare_needs_two():
    assert_one_line_error(run_cli("compare", *JOB, "-S", A), "strategy", "at least two")
