"""The degrees a model cannot take under a stack (issue 45.2): the stack rules hold what each stack's own config
validation holds, checked against that validation where the stack is installed (Megatron-Core's
``TransformerConfig`` / ``ModelParallelConfig``, torchtitan's ``ParallelDims.seq_len_divisor``), and ``plan``,
``estimate`` and ``emit`` share them."""

import importlib.util
import json

import pytest
from conftest import assert_one_line_error, run_cli

from asap.spec.job import Job
from asap.errors import AsapError
from asap.spec.stack_rules import RuleJob, first_unrunnable
from asap.spec.strategy import resolve_strategy

JOB70 = ["-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "256", "-s", "8192"]


def job(model, framework, cluster="dgx-h100-8node", b=256, s=8192, precision="bf16", devices=None):
    return Job.from_names(model, cluster, b, s, precision, framework, devices=devices)


def refusal(j, text):
    """The stack rule a strategy breaks under the job's stack (None: it runs)."""
    s = resolve_strategy(text, j.model, j.train, j.devices, framework=j.framework)
    return first_unrunnable(s, j.framework.name, RuleJob.of(j))


def megatron_refuses(model, tp, ep=1, sp=False, seq_len=8192, cp=1) -> bool:
    """Whether Megatron-Core's own config classes refuse these sizes for the model."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    moe = model.moe
    try:
        TransformerConfig(num_layers=model.num_layers, hidden_size=model.hidden_size,
                          num_attention_heads=model.num_attention_heads, num_query_groups=model.num_kv_heads,
                          tensor_model_parallel_size=tp, expert_model_parallel_size=ep, sequence_parallel=sp,
                          context_parallel_size=cp, num_moe_experts=moe.num_experts if moe else None,
                          moe_router_topk=moe.top_k if moe else 2, ffn_hidden_size=model.ffn_hidden_size,
                          add_bias_linear=False, gated_linear_unit=True)
    except (ValueError, AssertionError):
        return True
    return False


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_megatron_query_groups_match_transformer_config(tp):
    if importlib.util.find_spec("megatron.core") is None:
        pytest.skip("megatron-core is not installed")
    j = job("llama3-70b", "megatron")
    err = refusal(j, f"tp{tp} sp1" if tp > 1 else "tp1")
    assert (err is not None) == megatron_refuses(j.model, tp, sp=tp > 1)
    if tp == 16:
        assert err.field == "strategy.tp" and "num_kv_heads=8" in err.problem and "num_query_groups" in err.problem


def test_megatron_expert_and_tensor_parallel_need_sequence_parallel():
    if importlib.util.find_spec("megatron.core") is None:
        pytest.skip("megatron-core is not installed")
    j = job("mixtral-8x7b", "megatron")
    for sp in (False, True):
        err = refusal(j, f"tp2 ep4 sp{int(sp)}")
        assert (err is not None) == megatron_refuses(j.model, 2, ep=4, sp=sp)
    assert refusal(j, "tp2 ep4 sp0").field == "strategy.sp"


def test_megatron_expert_parallel_refuses_fp16():
    j = job("mixtral-8x7b", "megatron", precision="fp16")
    assert refusal(j, "tp2 sp1 ep4").field == "strategy.ep"
    assert refusal(j, "tp2 sp1 ep1") is None


@pytest.mark.parametrize("tp,cp", [(8, 1), (8, 4), (4, 8), (2, 2)])
def test_torchtitan_sequence_divisor_is_its_own(tp, cp):
    if importlib.util.find_spec("torchtitan") is None:
        pytest.skip("torchtitan is not installed")
    from torchtitan.distributed.parallel_dims import ParallelDims

    seq = 4000  # divisible by 2*cp for every cp above, not by tp*2*cp for (8, 4) and (4, 8)
    dims = ParallelDims(dp_replicate=1, dp_shard=-1, cp=cp, tp=tp, pp=1, ep=1, etp=1, world_size=64)
    j = job("llama3-8b", "torchtitan", s=seq)
    err = refusal(j, f"tp{tp} cp{cp}")
    assert (err is not None) == (seq % dims.seq_len_divisor != 0)


def test_whole_kv_heads_in_every_stack_but_maxtext():
    for fw in ("megatron", "torchtitan", "deepspeed", "mindspore"):
        cluster = "ascend-910b" if fw == "mindspore" else "h100-sxm"
        err = refusal(job("llama3-70b", fw, cluster=cluster, devices=64), "tp16")
        assert err is not None and err.field == "strategy.tp" and "num_kv_heads=8" in err.problem, fw
    # MaxText: GSPMD replicates a KV head over the tensor ranks beyond the heads (no config check refuses it)
    assert refusal(job("llama3-70b", "maxtext", cluster="tpu-v5p", devices=64), "tp16") is None
    # MLA has no query groups
    err = refusal(job("deepseek-v3", "megatron", cluster="dgx-h100-64node", b=1024, s=4096), "tp16 sp1 ep8 pp4")
    assert err is None or "num_kv_heads" not in err.problem


def test_emit_and_estimate_refuse_in_one_line_and_any_stack_prices():
    assert_one_line_error(run_cli("emit", "-f", "megatron", *JOB70, "-S", "tp16"), "strategy.tp", "num_query_groups")
    assert_one_line_error(run_cli("estimate", *JOB70, "--framework", "megatron", "-S", "tp16"), "strategy.tp",
                          "num_kv_heads=8", "--any-stack")
    r = run_cli("estimate", *JOB70, "--framework", "megatron", "-S", "tp16", "--any-stack", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["step_time_s"] > 0


def test_plan_never_ranks_and_refuses_to_pin_a_degree_the_stack_refuses():
    from asap.search.planner import plan

    j = job("llama3-70b", "megatron")
    rows = plan(j, top=200, split_candidates=0).candidates
    assert rows and all(j.model.num_kv_heads % e.strategy.tp == 0 for e in rows)
    with pytest.raises(AsapError, match="num_kv_heads=8"):
        plan(j, fixed={"tp": 16}, top=1)
