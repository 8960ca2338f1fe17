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


def test_the_tight_plan_priced_beside_the_plan_is_the_tight_plan_itself():
    """``plan(..., tight=True)`` prices the tight row's plan (no headroom, top 1, no split search) in the same
    pass as the plan, each chunk's memory once: its candidates are those of that plan run on its own."""
    from asap.search.planner import plan, plan_headroom
    from asap.spec.job import Job

    cases = [("llama3.1-8b", "dgx-h100-1node", 128, 8192, {"dp": 4, "cp": 2, "mbs": 1, "zero": 1, "recompute": "none"}),
             ("llama3-8b", "dgx-h100-1node", 256, 4096, {}), ("mixtral-8x7b", "dgx-h100-8node", 256, 4096, {}),
             ("llama3-70b", "dgx-h100-8node", 64, 8192, {"pp": 4})]
    for model, cluster, batch, seq, fixed in cases:
        job = plan_headroom(Job.from_names(model, cluster, batch, seq))
        shadowed = plan(job, fixed=fixed, top=3, tight=True)
        alone = plan(plan_headroom(job, 0.0), fixed=fixed, top=1, split_candidates=0)
        assert shadowed.tight_candidates is not None
        assert [(str(e.strategy), e.step_time_s, e.peak_memory_gb) for e in shadowed.tight_candidates] == \
            [(str(e.strategy), e.step_time_s, e.peak_memory_gb) for e in alone.candidates], model
        without = plan(job, fixed=fixed, top=3)
        assert without.tight_candidates is None
        assert [str(e.strategy) for e in shadowed.candidates] == [str(e.strategy) for e in without.candidates]
