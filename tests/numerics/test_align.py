"""Precision alignment (``asap align``): real gloo runs of tiny-dense compared operator by operator.

Layouts that only reorder fp32 sums align (dp vs tp, dp vs pp); fp32 vs bf16 does not, and the first
divergence is the first module autocast runs in bf16. The expected operator count and the first diverging
operator are derived from the model itself, not written down.
"""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
import torch.nn as nn

from asap.numerics.align import Captured, compare, rel_error, report, run_pair, tolerance
from asap.numerics.capture import module_names
from asap.spec.loader import load_model
from asap.runners.torch.model import build_model
from asap.spec.job import Job
from tests.conftest import assert_one_line_error, run_cli

RUN = dict(global_batch=8, seq_len=32, steps=2, device="cpu", timeout_s=240)
FP32_TOL = math.sqrt(2.0 ** -23)


@pytest.fixture(scope="module")
def spec():
    return load_model("tiny-dense")


def expected_ops(spec) -> int:
    """Every module's output and output gradient, and every parameter's gradient, of the full model."""
    model = build_model(spec, 32, 0)
    return 2 * len(module_names(model)) + len(list(model.parameters()))


def first_autocast_linear(spec) -> str:
    """The first module in forward order that CPU autocast runs in bf16: a Linear (embedding and RMSNorm
    stay fp32)."""
    return next(n for n, m in module_names(build_model(spec, 32, 0)) if isinstance(m, nn.Linear))


@pytest.fixture(scope="module")
def dp_vs_tp(spec):
    return run_pair(spec, "dp=4", "dp=2,tp=2", **RUN)


def test_dp_vs_tp_aligned(spec, dp_vs_tp):
    res_a, res_b, cap_a, cap_b = dp_vs_tp
    out = report(res_a.losses, res_b.losses, cap_a, cap_b, FP32_TOL)
    assert out["aligned"], out["first_divergence"]
    assert out["first_divergence"] is None
    assert out["ops_compared"] == expected_ops(spec)
    assert out["max_loss_rel_diff"] <= FP32_TOL and len(out["loss_a"]) == 2
    # the tp run was stitched back to full shapes: the column-parallel wq output is whole again
    assert cap_b.forward["layers.0.attention.wq"].shape == (8, 32, spec.num_attention_heads * spec.head_dim)


def test_misstitched_rows_are_caught(dp_vs_tp):
    """The comparison can fail: the same tp run with its dp halves swapped diverges at the first op."""
    _, _, cap_a, cap_b = dp_vs_tp
    swapped = Captured(forward={n: torch.cat([t[4:], t[:4]]) for n, t in cap_b.forward.items()},
                       grad_output=cap_b.grad_output, param_grad=cap_b.param_grad)
    ops, first = compare(cap_a, swapped, FP32_TOL)
    assert first is not None and first["op"] == next(iter(cap_a.forward))
    assert first["rel_error"] > 100 * FP32_TOL


# zero-bubble splits each micro-batch's backward into input (B) and weight (W) gradients over the same graph,
# which fires an output's gradient hook twice: the capture keeps the first (it once compared W's partial sums)
@pytest.mark.parametrize("pipelined", ["pp=2,dp=2", "pp=2,dp=2,schedule=zb"])
def test_dp_vs_pp_aligned(spec, pipelined):
    res_a, res_b, cap_a, cap_b = run_pair(spec, "dp=4", pipelined, **RUN)
    out = report(res_a.losses, res_b.losses, cap_a, cap_b, FP32_TOL)
    assert out["aligned"], out["first_divergence"]
    assert out["ops_compared"] == expected_ops(spec)
    # pipeline stages stitched in global order: both runs list the forward ops in the same order
    assert list(cap_a.forward) == list(cap_b.forward)
    assert list(cap_a.grad_output) == list(cap_b.grad_output)
    assert next(iter(cap_b.grad_output)) == "output"  # backward starts at the head


def test_moe_tp_ep_aligned():
    """tiny-moe: under tp the router and shared experts see each rank's slice of the sequence (re-stitched
    to token order); under ep each rank holds half the experts (their gradients gathered); the routed experts'
    own tensors, in dispatch order, are not compared."""
    moe = load_model("tiny-moe")
    res_a, res_b, cap_a, cap_b = run_pair(moe, "dp=4", "dp=2,tp=2,ep=2", **RUN)
    out = report(res_a.losses, res_b.losses, cap_a, cap_b, FP32_TOL)
    assert out["aligned"], out["first_divergence"]
    assert out["ops_compared"] == expected_ops(moe)
    assert cap_b.param_grad["layers.1.moe.experts.w1"].shape == build_model(moe, 32, 0).layers["1"].moe.experts.w1.shape


def test_fp32_vs_bf16_not_aligned_names_first_operator(spec):
    p = run_cli("align", "-m", "tiny-dense", "--a", "dp=2", "--b", "dp=2", "--b-precision", "bf16", "-b", "8",
                "-s", "32", "--steps", "2", "--device", "cpu", "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) == {"aligned", "loss_a", "loss_b", "max_loss_rel_diff", "ops_compared", "first_divergence"}
    assert out["aligned"] is False
    d = out["first_divergence"]
    assert d["op"] == first_autocast_linear(spec)
    assert d["tolerance"] == pytest.approx(FP32_TOL)
    assert d["rel_error"] > d["tolerance"]
    assert out["ops_compared"] == expected_ops(spec)


def test_tolerance_is_the_stricter_precisions():
    assert tolerance("fp32", "bf16") == tolerance("bf16", "fp32") == pytest.approx(FP32_TOL)
    assert tolerance("bf16", "bf16") == pytest.approx(2.0 ** -3.5)
    x = torch.randn(10, 10, dtype=torch.float64)
    assert rel_error(x, x) == 0.0
    assert rel_error(x, x.to(torch.bfloat16).float()) == pytest.approx(2.0 ** -9, rel=0.6)
    assert rel_error(x, x[:5]) == math.inf


@pytest.mark.parametrize("args,needle", [
    (["--b-precision", "fp16"], "b-precision"),
    (["--steps", "0"], "steps"),
    (["--b", "cp=2"], "cp"),
])
def test_bad_input_is_one_line(args, needle):
    base = {"--a": "dp=2", "--b": "tp=2", "--steps": "2"}
    extra = dict(zip(args[::2], args[1::2], strict=True))
    flat = [x for k, v in {**base, **extra}.items() for x in (k, v)]
    p = run_cli("align", "-m", "tiny-dense", "-b", "8", "-s", "32", "--device", "cpu", *flat, "--json", timeout=120)
    assert_one_line_error(p, needle)
    assert p.stdout == ""


# ------------------------------------------------------------------------------------------------------------
# asap tune --verify-numerics
# ------------------------------------------------------------------------------------------------------------


def _tune(tmp_path, monkeypatch, check):
    from asap.agents.coordinator import Coordinator
    from asap.memory import Memory
    from asap.execute.torch_exec import TorchExecutor
    from asap.spec.hardware import load_cluster
    from asap.spec.train import TrainSpec

    monkeypatch.setenv("ASAP_DATA_DIR", str(tmp_path))  # no calibration of this machine: the catalog's figures
    m, t = load_model("tiny-dense"), TrainSpec(8, 32, "fp32")
    with Memory.open(tmp_path / "memory.sqlite") as mem:
        result = Coordinator(Job.resolve(m, load_cluster("local-cpu", devices=2), t), TorchExecutor(m, t, steps=2, device="cpu"),
                             mem, budget=2, start="dp=2", verify=check).run()
        stored = {x.id: x for x in mem.trials()}
    ran = [x for x in result["trials"] if x["measured_step_time_s"] is not None and x["status"] != "skipped"]
    assert len(ran) == 2, result["trials"]  # the start and one proposal both ran
    return result, ran, stored


def test_tune_adopts_only_aligned_strategies(tmp_path, monkeypatch, spec):
    """A candidate run in bf16 against an fp32 first trial does not align: recorded failed with the first
    diverging operator as its reason (in Memory too), and the best stays the first trial."""
    from asap.numerics.align import NumericsCheck

    check = NumericsCheck(spec, 8, 32, "fp32", device="cpu", candidate_precision="bf16")
    result, ran, stored = _tune(tmp_path, monkeypatch, check)
    first, second = ran
    assert first["status"] == "ok" and first["reason"] == ""
    assert second["status"] == "failed"
    assert second["reason"].startswith("numerics: not aligned")
    # a forward output diverges first, no later than the first autocast Linear (FSDP's bf16 parameters, zero>=2,
    # make the embedding itself bf16)
    names = [n for n, _ in module_names(build_model(spec, 32, 0))]
    op = re.search(r"\): (\S+) relative error", second["reason"]).group(1)
    assert op in names[:names.index(first_autocast_linear(spec)) + 1], second["reason"]
    assert stored[second["trial_id"]].status == "failed"
    assert stored[second["trial_id"]].reason == second["reason"]
    assert result["best"]["strategy_string"] == first["strategy_string"]


def test_tune_verified_strategy_can_be_best(tmp_path, monkeypatch, spec):
    from asap.numerics.align import NumericsCheck

    _, ran, _ = _tune(tmp_path, monkeypatch, NumericsCheck(spec, 8, 32, "fp32", device="cpu"))
    assert [x["status"] for x in ran] == ["ok", "ok"], [x["reason"] for x in ran]


def test_verify_numerics_needs_real_runs():
    p = run_cli("tune", "-m", "tiny-dense", "-c", "local-cpu", "-b", "8", "-s", "32", "--executor", "sim",
                "--budget", "1", "--verify-numerics", "--json", timeout=120)
    assert_one_line_error(p, "verify-numerics")
