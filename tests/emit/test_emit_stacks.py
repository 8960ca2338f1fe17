"""Round-trips through the stacks' own code: each emitted config is loaded by the stack's config classes and the
model it describes is built (meta device: no weights) by the stack's model code; its parameter count equals
asap's count of the same model (``ModelSpec.num_params``). A dense GQA model (llama3-8b), an MoE model
(mixtral-8x7b) and an MLA model (deepseek-v3: MLA, MoE with shared experts and dense layers, MTP)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from asap.search.advice import emit_strategy
from asap.spec.job import Job

STACKS = Path(__file__).parents[1] / "stacks"


def job(model="llama3-8b", cluster="dgx-h100-8", b=256, s=4096, precision="bf16"):
    return Job.from_names(model, cluster, b, s, precision)


def installed(*names):
    for name in names:
        if importlib.util.find_spec(name.split(".")[0]) is None or importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed (the quick start's test command installs it)")


def run_loader(script, *args, timeout=600):
    proc = subprocess.run([sys.executable, str(STACKS / script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


MEGATRON_CASES = [
    ("llama3-8b", "bf16", "tp=2,pp=2,zero=3,recompute=layernorm+moe_act,layer_split=15/17"),
    ("mixtral-8x7b", "bf16", "tp=2,pp=4,vpp=2,ep=4,mbs=2,recompute=selective,dispatcher=dedup,a2a_overlap=1"),
    ("deepseek-v3", "bf16", "tp=2,pp=8,ep=8,zero=1,recompute=selective"),
    # TransformerConfig checks fp8 with MoE or with layernorm / moe_act recomputation against the installed
    # Transformer Engine version (not installable here): fp8 on the dense model with full recomputation
    ("llama3-8b", "fp8", "tp=2,pp=2,recompute=full"),
]


def test_megatron_lm_parser_takes_the_emitted_strategy(tmp_path):
    """Megatron-LM core_v0.14.0's own parse_args, validate_args and core_transformer_config_from_args
    (tests/stacks/megatron_lm, vendored unmodified) take the emitted arguments for 32 ranks: the parallel sizes,
    the layout, the recomputation, the dispatcher, Megatron-FSDP, fp8; GPTModel built from that config has asap's
    parameter count, MTP included (the architecture fields: tests/emit/test_emit_arch.py)."""
    installed("megatron.core")
    specs = []
    for i, (name, precision, strategy) in enumerate(MEGATRON_CASES):
        j = job(name, precision=precision)
        path = tmp_path / f"args{i}.sh"
        path.write_text(emit_strategy("megatron", j, strategy))
        specs.append(f"{j.cluster.num_devices}:{path}")
    dense, moe, mla, fp8 = run_loader("megatron_load.py", *specs)
    for (name, _, _), got in zip(MEGATRON_CASES, (dense, moe, mla, fp8), strict=True):
        assert got["params"] == job(name).model.num_params(include_mtp=True), name
    assert dense["class"] == "TransformerConfig" and dense["num_query_groups"] == 8
    assert dense["layout"] == [16, 18] and dense["recompute_modules"] == ["layernorm"]  # E+15t | 17t+L
    assert dense["args.use_megatron_fsdp"] and dense["args.data_parallel_sharding_strategy"] == "optim_grads_params"
    assert dense["args.use_distributed_optimizer"] and dense["args.ckpt_format"] == "fsdp_dtensor"
    assert (moe["tensor_model_parallel_size"], moe["pipeline_model_parallel_size"],
            moe["virtual_pipeline_model_parallel_size"], moe["expert_model_parallel_size"]) == (2, 4, 2, 4)
    assert (moe["moe_token_dispatcher_type"], moe["moe_enable_deepep"], moe["overlap_moe_expert_parallel_comm"]) \
        == ("flex", True, True)
    assert moe["sequence_parallel"] and moe["args.use_distributed_optimizer"] and moe["recompute_granularity"] == \
        "selective"
    assert mla["class"] == "MLATransformerConfig" and mla["mtp_num_layers"] == 1
    assert mla["recompute_modules"] == ["core_attn", "layernorm", "moe_act"]
    assert mla["layout"] == [8, 7, 8, 8, 8, 8, 8, 9]  # E+7t, 7t, ..., 7t+m+L
    assert (fp8["fp8"], fp8["fp8_recipe"], fp8["bf16"], fp8["recompute_granularity"]) == ("hybrid", "tensorwise",
                                                                                          True, "full")


def titan_case(tmp_path, model, strategy, cluster="dgx-h100-8", b=256, s=4096, precision="bf16", fused=None):
    from dataclasses import replace

    from asap.emit.torchtitan_model import model_args_json

    j = job(cluster=cluster, b=b, s=s, precision=precision)
    j = replace(j, train=replace(j.train, fused_elementwise=fused))
    toml, args = tmp_path / f"{model.name}.toml", tmp_path / f"{model.name}.json"
    toml.write_text(emit_strategy("torchtitan", replace(j, model=model), strategy))
    args.write_text(model_args_json(model, s))
    return toml, args


def test_torchtitan_builds_the_emitted_model(tmp_path):
    """torchtitan 0.2.2's ConfigManager loads the emitted TOML; the model its train spec builds from [model]
    name and flavor (a custom flavor registered from the emitted arguments first) has asap's parameter count:
    llama3-8b a custom llama3 flavor (torchtitan's 8B is Llama 3.1's, with RoPE scaling), tiny-dense a custom llama3 flavor, mixtral-8x7b a qwen3 MoE flavor
    (no q/k norms), deepseek-v3 (without MTP, which torchtitan 0.2.2 lacks) a deepseek_v3 flavor; tiny-dense
    emitted with fused kernels loads with torch.compile on for the model and the loss, the others with it off."""
    installed("torchtitan")
    from dataclasses import replace

    cases = [("llama3-8b", "tp=2,pp=2,vpp=2,mbs=2,recompute=selective,zero=3", ("llama3", "asap-llama3-8b")),
             ("tiny-dense", "tp=2,zero=0,recompute=full", ("llama3", "asap-tiny-dense")),
             ("mixtral-8x7b", "ep=8,zero=3,mbs=2", ("qwen3", "asap-mixtral-8x7b")),
             ("deepseek-v3", "pp=4,ep=8,zero=3", ("deepseek_v3", "asap-deepseek-v3"))]
    models = []
    for name, _, _ in cases:
        m = replace(job(name).model, mtp_layers=0)
        if m.moe is not None:  # torchtitan 0.2.2 balances experts by the expert bias only (no balancing loss)
            m = replace(m, moe=replace(m.moe, expert_bias=True, aux_loss_coef=0.0))
        models.append(m)
    files = [f for (name, strategy, _), m in zip(cases, models, strict=True)  # tiny-dense with --fused-kernels
             for f in titan_case(tmp_path, m, strategy, fused=True if name == "tiny-dense" else None)]
    loaded = run_loader("torchtitan_load.py", *files, timeout=600)
    for (name, _, (family, flavor)), m, got in zip(cases, models, loaded, strict=True):
        assert (got["name"], got["flavor"]) == (family, flavor)
        assert got["params"] == m.num_params(), name
        assert got["layer_names"] == [str(i) for i in range(m.num_layers)]
        assert got["global_batch"] == 256 and got["seq_len"] == 4096 and got["mixed_precision_param"] == "bfloat16"
        if name == "llama3-8b":
            assert (got["tp"], got["pp"], got["dp_shard"], got["schedule"], got["ac"]) == (2, 2, 16,
                                                                                        "Interleaved1F1B", "selective")
            assert [len(part) for part in got["fqns"]] == [9, 8, 8, 10]  # embedding + 8 layers, ..., 8 + norm, output
        if name == "tiny-dense":
            assert (got["dp_replicate"], got["dp_shard"], got["tp"], got["local_batch"]) == (32, 1, 2, 1)
            assert got["compile"] == [True, ["loss", "model"]]  # torch.compile of the model and the loss
        else:
            assert got["compile"][0] is False
        if name == "deepseek-v3":
            assert got["ep"] == 8 and got["pp"] == 4


def test_torchtitan_stock_flavors_build_asap_counts(tmp_path):
    """Every llama3 and qwen3 flavor of torchtitan's own table that a preset matches builds asap's count."""
    installed("torchtitan")
    from asap.spec.loader import load_model

    cases = (("llama3.1-70b", "70B"), ("qwen3-8b", "8B"))
    models = [load_model(name) for name, _ in cases]
    files = [f for m in models for f in titan_case(tmp_path, m, "zero=3")]
    loaded = run_loader("torchtitan_load.py", *files, timeout=600)
    for (name, flavor), m, got in zip(cases, models, loaded, strict=True):
        assert (got["flavor"], got["params"]) == (flavor, m.num_params()), name


def maxtext_python():
    """MaxText 0.2.5 needs Python >= 3.12: its own venv (ASAP_MAXTEXT_PYTHON, else ../main/.venv-maxtext)."""
    import os

    for candidate in (os.environ.get("ASAP_MAXTEXT_PYTHON"), Path(__file__).parents[3] / "main/.venv-maxtext/bin/python"):
        if candidate and Path(candidate).exists():
            return str(candidate)
    pytest.skip("no MaxText venv (Python >= 3.12 with maxtext 0.2.5: see docs/emit.md; ASAP_MAXTEXT_PYTHON names it)")


def test_maxtext_pyconfig_builds_the_emitted_model(tmp_path):
    """MaxText 0.2.5's pyconfig takes the emitted YAML over its base.yml on 8 virtual CPU devices; the model it
    creates on that mesh (abstract: jax.eval_shape of its init) has asap's parameter count, MTP included."""
    python = maxtext_python()
    cases = [("tiny-dense", "dp=4,tp=2,zero=3", "fp32"), ("mixtral-8x7b", "dp=8,ep=8,zero=3", "bf16"),
             ("deepseek-v3", "dp=8,ep=4,zero=3,recompute=full", "bf16")]
    paths = []
    for name, strategy, precision in cases:
        j = Job.from_names(name, "local-cpu", 8, 64, precision, devices=8)
        paths.append(tmp_path / f"{name}.yml")
        paths[-1].write_text(emit_strategy("maxtext", j, strategy))
    proc = subprocess.run([python, str(STACKS / "maxtext_load.py"), "8", *map(str, paths)], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for (name, _, _), g in zip(cases, got, strict=True):
        m = job(name).model
        assert g["params"] == m.num_params(include_mtp=True), name
        assert (g["layers"], g["emb"], g["rope"], g["batch"], g["seq"]) == (m.num_layers, m.hidden_size,
                                                                            m.rope_theta, 8, 64)
    dense, moe, mla = got
    assert dense["decoder_block"].endswith("LLAMA2") and dense["mesh"]["fsdp"] == 4 and dense["mesh"]["tensor"] == 2
    assert moe["decoder_block"].endswith("MIXTRAL") and moe["experts"] == 8 and moe["mesh"]["expert"] == 8
    assert mla["decoder_block"].endswith("DEEPSEEK") and mla["attention_type"] == "mla" and mla["mtp"] == 1
    assert (mla["mesh"]["expert"], mla["mesh"]["fsdp"], mla["dtype"]) == (4, 2, "bfloat16")


# MindFormers r1.5.0's documented schema (mindformers cannot be installed here: it needs mindspore ~2.11): the
# keyword arguments of LlamaConfig.__init__ (mindformers/models/llama/llama_config.py), the model_config keys of
# research/deepseek3/deepseek3_671b/pretrain_deepseek3_671b.yaml (DeepseekV3Config), TransformerOpParallelConfig's
# fields (mindformers/modules/transformer/transformer.py) and MoEConfig's (mindformers/modules/transformer/moe.py).
MF_COMMON = {"qkv_has_bias": bool, "type": str, "seq_length": int, "num_layers": int, "hidden_size": int, "intermediate_size": int,
             "num_heads": int, "n_kv_heads": int, "vocab_size": int, "rms_norm_eps": float, "theta": float,
             "compute_dtype": str, "param_init_type": str, "pp_interleave_num": int, "offset": (int, list)}
MF_MODEL = {"LlamaConfig": {**MF_COMMON, "max_position_embedding": int},
            "DeepseekV3Config": {**MF_COMMON, "auto_register": str, "max_position_embeddings": int, "q_lora_rank": int,
                                 "kv_lora_rank": int, "qk_nope_head_dim": int, "qk_rope_head_dim": int,
                                 "v_head_dim": int, "mtp_depth": int, "extend_method": str, "scaling_factor": dict}}
MF_PARALLEL = {"data_parallel": int, "model_parallel": int, "pipeline_stage": int, "context_parallel": int,
               "expert_parallel": int, "micro_batch_num": int, "vocab_emb_dp": bool, "use_seq_parallel": bool,
               "gradient_aggregation_group": int, "optimizer_shard": bool}
MF_MOE = {"expert_num": int, "num_experts_chosen": int, "moe_intermediate_size": int, "shared_expert_num": int,
          "first_k_dense_replace": int, "enable_deredundency": bool, "npu_nums_per_device": int,
          "routing_policy": str, "use_gating_sigmoid": bool, "norm_topk_prob": bool, "routed_scaling_factor": float,
          "n_group": int, "topk_group": int, "balance_via_topk_bias": bool, "topk_bias_update_rate": float,
          "z_loss_factor": float, "aux_loss_factor": float, "aux_loss_types": list, "aux_loss_factors": list,
          "use_gmm": bool, "capacity_factor": float, "enable_sdrop": bool}
MF_TOP = {"parallel", "parallel_config", "runner_config", "recompute_config", "model", "moe_config", "lr_schedule",
          "callbacks"}


def conforms(section: dict, schema: dict, where: str):
    for key, value in section.items():
        assert key in schema, f"{where}.{key} is not in MindFormers' schema"
        assert isinstance(value, schema[key]) and not (schema[key] is int and isinstance(value, bool)), \
            f"{where}.{key}={value!r} is not {schema[key]}"


def mindformers_params(mc: dict, moe: dict | None) -> int:
    """The parameters MindFormers' LlamaForCausalLM / DeepseekV3ForCausalLM hold for the emitted keys (their
    modules: embedding, per layer attention (wq, wk, wv, wo or MLA's q/kv down, norms and up projections), the
    SwiGLU w1/w2/w3 or the router and routed + shared experts, two RMSNorms; the final norm, the lm_head and
    per MTP depth a layer, enorm, hnorm, eh_proj and its head norm)."""
    h, nh, ffn, vocab = mc["hidden_size"], mc["num_heads"], mc["intermediate_size"], mc["vocab_size"]
    if "kv_lora_rank" in mc:
        q, kv = mc["q_lora_rank"], mc["kv_lora_rank"]
        qk = mc["qk_nope_head_dim"] + mc["qk_rope_head_dim"]
        attn = (h * q + q + q * nh * qk if q else h * nh * qk) + h * (kv + mc["qk_rope_head_dim"]) + kv
        attn += kv * nh * (mc["qk_nope_head_dim"] + mc["v_head_dim"]) + nh * mc["v_head_dim"] * h
    else:
        hd = h // nh
        attn = 2 * h * nh * hd + 2 * h * mc["n_kv_heads"] * hd
    dense = attn + 3 * h * ffn + 2 * h
    n_moe = 0 if moe is None else mc["num_layers"] - moe["first_k_dense_replace"]
    moe_layer = 0 if moe is None else (attn + h * moe["expert_num"] + 2 * h + (moe["expert_num"] + moe[
        "shared_expert_num"]) * 3 * h * moe["moe_intermediate_size"])
    mtp = mc.get("mtp_depth", 0) * ((moe_layer if moe else dense) + 2 * h * h + 3 * h)
    return 2 * vocab * h + h + (mc["num_layers"] - n_moe) * dense + n_moe * moe_layer + mtp


def test_mindformers_yaml_keeps_the_model_in_its_schema():
    """The emitted YAML's sections use only MindFormers' documented keys and types, DeepSeek-V3 keeps MLA
    (DeepseekV3Config with the latent ranks, n_kv_heads = num_heads, no head_dim) and MTP, and the model those
    keys describe has asap's parameter count."""
    import yaml

    cases = [("llama3-8b", "tp=8,pp=2,recompute=selective"), ("mixtral-8x7b", "tp=4,pp=4,vpp=2,ep=2,recompute=full"),
             ("deepseek-v3", "tp=4,pp=4,ep=4,zero=1")]
    for name, strategy in cases:
        j = job(name, cluster="ascend-910b-64")
        m = j.model
        cfg = yaml.safe_load(emit_strategy("mindformers", j, strategy))
        assert set(cfg) <= MF_TOP
        mc = cfg["model"]["model_config"]
        conforms(mc, MF_MODEL[mc["type"]], "model.model_config")
        conforms(cfg["parallel_config"], MF_PARALLEL, "parallel_config")
        if "moe_config" in cfg:
            conforms(cfg["moe_config"], MF_MOE, "moe_config")
        assert mindformers_params(mc, cfg.get("moe_config")) == m.num_params(include_mtp=True), name
        assert mc["theta"] == m.rope_theta and mc["n_kv_heads"] == m.num_kv_heads
    assert mc["type"] == "DeepseekV3Config" and cfg["model"]["arch"]["type"] == "DeepseekV3ForCausalLM"
    assert (mc["kv_lora_rank"], mc["q_lora_rank"], mc["n_kv_heads"], mc["mtp_depth"]) == (512, 1536, 128, 1)
    assert "head_dim" not in mc


def test_deepspeed_config_class_takes_every_model():
    """DeepSpeed 0.19.8's DeepSpeedConfig accepts the JSON for a dense, an MoE and an MLA model (the JSON carries
    no model: DeepSpeed trains the user's nn.Module, so there is no count to compare); fp8 and expert
    parallelism are refused in one line."""
    installed("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    from asap.errors import AsapError

    for name in ("llama3-8b", "mixtral-8x7b", "deepseek-v3"):
        j = job(name, cluster="dgx-h100-1", b=16)
        cfg = DeepSpeedConfig(json.loads(emit_strategy("deepspeed", j, "tp=2,pp=4,mbs=2,zero=1,recompute=full")))
        assert (cfg.train_batch_size, cfg.gradient_accumulation_steps, cfg.zero_optimization_stage) == (16, 8, 1)
        assert cfg.bfloat16_config.enabled and cfg.pipeline["stages"] == 4
    j = job("mixtral-8x7b", cluster="dgx-h100-1", b=16)
    with pytest.raises(AsapError, match="strategy.ep: deepspeed cannot express ep=2"):
        emit_strategy("deepspeed", j, "tp=2,ep=2,zero=1")
    j = job(cluster="dgx-h100-1", b=16, precision="fp8")
    with pytest.raises(AsapError, match="precision: deepspeed cannot express fp8"):
        emit_strategy("deepspeed", j, "tp=2,zero=1")
