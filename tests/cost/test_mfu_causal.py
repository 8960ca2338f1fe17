"""MFU at long context (issue 45.7): ``mfu`` counts the attention square (PaLM's convention), ``mfu_causal`` the
half a causal mask keeps; both are printed and documented with the formula. Hand figure: Llama 3 70B at 128K."""

import json

import pytest
from conftest import run_cli

from asap.spec.job import Job
from asap.cost.estimate import estimate_spelled as estimate, model_flops_per_token

JOB = ["-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "16", "-s", "131072"]


def test_causal_count_halves_the_attention_term_by_hand():
    m = Job.from_names("llama3-70b", "dgx-h100-8node", 16, 131072).model
    s = 131072
    attention = 6.0 * m.num_layers * s * m.num_attention_heads * 2 * m.head_dim  # 6 L s H (d_qk + d_v)
    full, causal = model_flops_per_token(m, s), model_flops_per_token(m, s, causal=True)
    assert full - causal == pytest.approx(attention / 2)
    assert attention / 2 / full > 0.3  # at 128K the attention term is a third of the non-causal count


def test_estimate_reports_both_and_says_which():
    job = Job.from_names("llama3-70b", "dgx-h100-8node", 16, 131072)
    est = estimate(job, "tp8 cp8 sp1")
    m, s = job.model, 131072
    assert est.mfu_causal == pytest.approx(est.mfu * model_flops_per_token(m, s, causal=True)
                                           / model_flops_per_token(m, s))
    assert est.mfu_causal < 0.7 * est.mfu
    r = run_cli("estimate", *JOB, "-S", "tp8 cp8 sp1", "--json")
    d = json.loads(r.stdout)
    assert d["mfu_causal"] == pytest.approx(est.mfu_causal) and "non-causal" in d["mfu_attention_flops"]
    text = run_cli("estimate", *JOB, "-S", "tp8 cp8 sp1").stdout
    assert "non-causal" in text and f"causal: {est.mfu_causal:.1%}" in text
