"""A slow #1 must not hide a fitting layout (issue 45.4): pinning Llama 3.1 8B's cp2 layout without recompute on
8 H100 ranks an activation-offloading #1; the pinned layout itself fits the device at 98% and is much faster, so
``plan`` shows it beside #1 and says why, in the text and in --json."""

import json

from conftest import run_cli

JOB = ["-m", "llama3.1-8b", "-c", "dgx-h100-1node", "-b", "128", "-s", "8192"]
FIX = ["--fix", "dp=4,cp=2,mbs=1,zero=1,recompute=none"]


def test_tight_row_beside_a_slow_first():
    r = run_cli("plan", *JOB, *FIX, "--top", "1", "--json")
    d = json.loads(r.stdout)
    first, tight = d["candidates"][0], d["tight"]
    assert tight["step_time_s"] < 0.9 * first["step_time_s"]
    assert d["memory_limit_gb"] < tight["peak_memory_gb"] <= d["device_memory_gb"]
    assert first["peak_memory_gb"] <= d["memory_limit_gb"] and "headroom" in tight["why"]
    est = json.loads(run_cli("estimate", *JOB, "-S", tight["strategy_compact"], "--json").stdout)
    assert est["fits"] and not est["fits_with_headroom"] and abs(est["step_time_s"] - tight["step_time_s"]) < 1e-9
    text = run_cli("plan", *JOB, *FIX, "--top", "1").stdout
    assert "tight: cp2" in " ".join(text.split()) and "faster than #1" in text


def test_no_tight_row_when_the_headroom_costs_little_or_a_margin_is_given():
    d = json.loads(run_cli("plan", "-m", "llama3-8b", "-c", "dgx-h100-1node", "-b", "256", "-s", "4096",
                           "--top", "1", "--json").stdout)
    assert "tight" not in d
    d = json.loads(run_cli("plan", *JOB, *FIX, "--top", "1", "--memory-margin", "0", "--json").stdout)
    assert "tight" not in d
