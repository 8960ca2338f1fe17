"""--fused-kernels / --eager-kernels: the gain of torch.compile or fused kernels, predicted as the difference
of the elementwise term priced both ways (the stack's default otherwise)."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli

JOB = ["-m", "llama3-8b", "-c", "dgx-h100-1node", "-b", "64", "-s", "8192", "-S", "tp=2", "--json"]


def est(framework: str, *flag) -> dict:
    proc = run_cli("estimate", *JOB, "--framework", framework, *flag)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("framework, default", [("torchtitan", "--eager-kernels"), ("megatron", "--fused-kernels")])
def test_the_default_is_the_stacks(framework, default):
    assert est(framework)["step_time_s"] == est(framework, default)["step_time_s"]


@pytest.mark.parametrize("framework", ["torchtitan", "megatron"])
def test_fusing_saves_compute_time_and_one_saved_tensor(framework):
    fused, eager = est(framework, "--fused-kernels"), est(framework, "--eager-kernels")
    assert fused["step_time_s"] < eager["step_time_s"]
    # the saving is in the kernels' time; the collectives are the same
    assert fused["breakdown_s"]["compute"] < eager["breakdown_s"]["compute"]
    for term in ("tp_comm", "dp_comm"):
        assert fused["breakdown_s"][term] == pytest.approx(eager["breakdown_s"][term])
    # eager kernels run SwiGLU as silu(w1 x) * (w3 x), whose product saves silu's output too: one more ffn-wide
    # tensor per layer (32 layers x 8192 tokens x 14336 / tp 2 x 2 B), nothing else (no recompute, tp=2: the
    # vocabulary-parallel loss is not compiled)
    assert fused["strategy"]["recompute"] == eager["strategy"]["recompute"] == "none"
    extra_gib = 32 * 8192 * 14336 / 2 * 2 / 2 ** 30
    assert eager["peak_memory_gb"] - fused["peak_memory_gb"] == pytest.approx(extra_gib, rel=1e-6)
