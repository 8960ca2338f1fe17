"""The emitted job is exactly the named model: for Llama 3.1 8B/70B/405B, Mixtral 8x7B, Qwen3 8B and 30B-A3B,
DeepSeek-V3 and GPT-OSS 120B (their Hugging Face config.json files, tests/data/hf), each format's config is read
back by the stack's own code and every architecture field is compared with the config.json's own fields (read
here, not through asap's importer). What a stack cannot express is refused in one line naming the field.

Megatron-LM: its own parse_args / validate_args / core_transformer_config_from_args (core_v0.14.0, vendored);
Megatron-Bridge 0.3.1: ConfigContainer.from_yaml + validate + its provider's provide() (on .venv-bridge);
torchtitan 0.2.2: ConfigManager and the train spec's model args; MaxText 0.2.5: pyconfig (on .venv-maxtext);
MindFormers r1.5.0: its documented schema (not installable here).
"""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from asap.search.advice import emit_strategy
from asap.errors import AsapError
from asap.spec.hf import model_from_hf
from asap.spec.job import Job

HERE = Path(__file__).parents[1]  # tests/
STACKS = HERE / "stacks"
HF_FILES = {"llama3.1-8b": "meta-llama--Llama-3.1-8B", "llama3.1-70b": "meta-llama--Llama-3.1-70B",
            "llama3.1-405b": "meta-llama--Llama-3.1-405B", "mixtral-8x7b": "mistralai--Mixtral-8x7B-v0.1",
            "qwen3-8b": "Qwen--Qwen3-8B", "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B",
            "deepseek-v3": "deepseek-ai--DeepSeek-V3", "gpt-oss-120b": "openai--gpt-oss-120b"}
DENSE = ("llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "qwen3-8b")


def hf(name):
    return json.loads((HERE / "data" / "hf" / f"{HF_FILES[name]}.json").read_text())


def expected(d):
    """The architecture a config.json describes, in one vocabulary (transformers' field meanings)."""
    mt = d["model_type"]
    rs = d.get("rope_scaling") or {}
    e = {"layers": d["num_hidden_layers"], "hidden": d["hidden_size"], "ffn": d["intermediate_size"],
         "heads": d["num_attention_heads"], "vocab": d["vocab_size"], "eps": d["rms_norm_eps"],
         "rope_theta": float(d["rope_theta"]), "tied": d.get("tie_word_embeddings", False),
         "qk_norm": mt in ("qwen3", "qwen3_moe"), "rope": rs.get("rope_type", rs.get("type", "default")),
         "rope_factor": rs.get("factor"), "mtp": d.get("num_nextn_predict_layers", 0)}
    if mt.startswith("deepseek"):
        e.update(q_lora=d["q_lora_rank"], kv_lora=d["kv_lora_rank"], qk_nope=d["qk_nope_head_dim"],
                 qk_rope=d["qk_rope_head_dim"], v_head=d["v_head_dim"])
    else:
        e.update(kv_heads=d["num_key_value_heads"], head_dim=d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"])
    experts = d.get("num_local_experts") or d.get("num_experts") or d.get("n_routed_experts")
    if experts:
        grouped = d.get("topk_method", "greedy") != "greedy"
        e.update(experts=experts, top_k=d["num_experts_per_tok"],
                 expert_ffn=d.get("moe_intermediate_size") or d["intermediate_size"],
                 shared=d.get("n_shared_experts") or 0, dense_layers=d.get("first_k_dense_replace") or 0,
                 score=d.get("scoring_func", "softmax"), groups=d["n_group"] if grouped else 1,
                 topk_group=d["topk_group"] if grouped else 1, scale=float(d.get("routed_scaling_factor", 1.0)),
                 aux=d.get("router_aux_loss_coef", d.get("aux_loss_alpha")), expert_bias=d.get("topk_method") == "noaux_tc")
    if mt == "gpt_oss":
        e.update(window=d["sliding_window"], sinks=True, swiglu_limit=d["swiglu_limit"])
    return e


def job(name, cluster="dgx-h100-8node", b=256, s=4096, model=None):
    j = Job.from_names(name, cluster, b, s, "bf16")
    return replace(j, model=model if model is not None else model_from_hf(hf(name)))


def first(v):
    return v[0] if isinstance(v, list) else v


def _moe_view(c, experts, topk, ffn, shared_width, freq, score, groups, topk_group, scale, aux, lb, bias):
    if not c.get(experts):
        return {}
    f = c[freq]
    return {"experts": c[experts], "top_k": c[topk], "expert_ffn": c[ffn],
            "shared": (c[shared_width] or 0) // c[ffn], "dense_layers": f.count(0) if isinstance(f, list) else 0,
            "score": c[score], "groups": c[groups] or 1, "topk_group": c[topk_group] or 1,
            "scale": float(c[scale] or 1.0), "aux": first(c[aux]) if c[lb] != "none" else 0.0, "expert_bias": c[bias]}


def megatron_view(c):
    """Megatron-LM's parsed TransformerConfig (and its model-provider arguments) in ``expected``'s words."""
    mla = c["multi_latent_attention"]
    rope = "llama3" if c["args.use_rope_scaling"] else "yarn" if mla and c["rope_type"] == "yarn" else "default"
    v = {"layers": c["num_layers"], "hidden": c["hidden_size"], "ffn": c["ffn_hidden_size"],
         "heads": c["num_attention_heads"], "vocab": c["args.vocab_size"], "eps": c["layernorm_epsilon"],
         "rope_theta": float(c["args.rotary_base"]), "tied": not c["args.untie_embeddings_and_output_weights"],
         "qk_norm": bool(c["qk_layernorm"]) and not mla, "rope": rope,
         "rope_factor": c["args.rope_scaling_factor"] if rope == "llama3" else c["rotary_scaling_factor"]
         if rope == "yarn" else None, "mtp": c["mtp_num_layers"] or 0}
    if mla:
        v.update(q_lora=c["q_lora_rank"], kv_lora=c["kv_lora_rank"], qk_nope=c["qk_head_dim"],
                 qk_rope=c["qk_pos_emb_head_dim"], v_head=c["v_head_dim"])
    else:
        v.update(kv_heads=c["num_query_groups"], head_dim=c["kv_channels"])
    v.update(_moe_view(c, "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size",
                       "moe_shared_expert_intermediate_size", "moe_layer_freq", "moe_router_score_function",
                       "moe_router_num_groups", "moe_router_group_topk", "moe_router_topk_scaling_factor",
                       "moe_aux_loss_coeff", "moe_router_load_balancing_type", "moe_router_enable_expert_bias"))
    return v


def run_json(cmd, timeout=900, env=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


MEGATRON_PLANS = {"llama3.1-8b": "tp=2,pp=2", "llama3.1-70b": "tp=8,pp=2,recompute=selective",
                  "llama3.1-405b": "tp=8,pp=8,vpp=2,zero=1", "qwen3-8b": "tp=4,pp=2",
                  "mixtral-8x7b": "tp=2,pp=4,ep=8", "qwen3-30b-a3b": "tp=2,pp=2,ep=8,zero=1",
                  "deepseek-v3": "tp=2,pp=8,ep=8,zero=1"}


def test_megatron_lm_parses_validates_and_configures_every_model(tmp_path):
    """Each model's emitted arguments through Megatron-LM core_v0.14.0's parse_args, validate_args and
    core_transformer_config_from_args (vendored unmodified: tests/stacks/megatron_lm), and GPTModel built from
    that config: every architecture field equals config.json's, the parameters asap's count."""
    pytest.importorskip("megatron.core")
    specs = []
    for name, plan in MEGATRON_PLANS.items():
        path = tmp_path / f"{name}.sh"
        j = job(name)
        path.write_text(emit_strategy("megatron", j, plan))
        specs.append(f"{64}:{path}")
    got = run_json([sys.executable, str(STACKS / "megatron_load.py"), *specs])
    for (name, _), c in zip(MEGATRON_PLANS.items(), got, strict=True):
        assert megatron_view(c) == expected(hf(name)), name
        assert c["params"] == model_from_hf(hf(name)).num_params(include_mtp=True), name
        assert c["padded_vocab"] == hf(name)["vocab_size"], name  # no padding beyond the checkpoint's
        assert isinstance(c["args.rotary_base"], int)


def test_megatron_refuses_gpt_oss_in_one_line():
    with pytest.raises(AsapError, match=r"^model\.sliding_window: megatron cannot express sliding_window=128"):
        emit_strategy("megatron", job("gpt-oss-120b"), "tp=2,ep=8")


def bridge_site():
    for candidate in (os.environ.get("ASAP_BRIDGE_SITE"), HERE.parent / ".venv-bridge",
                      HERE.parents[1] / "main" / ".venv-bridge"):
        if candidate and (Path(candidate) / "megatron" / "bridge").is_dir():
            return str(candidate)
    pytest.skip("no .venv-bridge (megatron-bridge 0.3.1 and megatron-core 0.16.0: the README's test command)")


BRIDGE_PLANS = {**MEGATRON_PLANS, "gpt-oss-120b": "tp=2,pp=2,ep=8,etp=1", "llama3.1-405b": "tp=8,pp=8,vpp=2,zero=3"}
BRIDGE_STOCK = {"llama3.1-8b": "Llama31ModelProvider8B", "llama3.1-70b": "Llama31ModelProvider70B",
                "llama3.1-405b": "Llama31ModelProvider405B", "qwen3-8b": "Qwen3ModelProvider8B",
                "qwen3-30b-a3b": "Qwen3MoEModelProvider30B_A3B", "mixtral-8x7b": "GPTModelProvider",
                "deepseek-v3": "MLAModelProvider", "gpt-oss-120b": "GPTOSSProvider"}


def bridge_view(c):
    a = dict(c["arch"])
    rope = "llama3" if a["rope_scaling"] else "yarn" if a["position_embedding_type"] == "yarn" or (
        a["multi_latent_attention"] and a.get("rope_type") == "yarn") else "default"
    a.update({"args.vocab_size": a["vocab_size"], "args.rotary_base": a["rotary_base"],
              "args.untie_embeddings_and_output_weights": not a["share_embeddings_and_output_weights"],
              "args.use_rope_scaling": a["rope_scaling"], "args.rope_scaling_factor": a["rope_scaling_factor"],
              "rotary_scaling_factor": a.get("rotary_scaling_factor") if a["multi_latent_attention"] else
              a.get("yarn_rotary_scaling_factor")})
    v = megatron_view(a)
    v["rope"] = rope
    if rope == "yarn" and not a["multi_latent_attention"]:
        v["rope_factor"] = a["yarn_rotary_scaling_factor"]
    if a.get("softmax_type") == "learnable":
        v.update(window=a["window_size"][0], sinks=True, swiglu_limit=a["activation_func_clamp_value"])
    return v


def test_megatron_bridge_validates_and_builds_every_model(tmp_path):
    """Each model as a Megatron-Bridge 0.3.1 ConfigContainer YAML: from_yaml (strict), validate() for 64 ranks,
    the provider's provide() on the meta device; a stock provider where Megatron-Bridge has the model, every
    architecture field equal to config.json's, the parameters asap's count (GPT-OSS's provider asks Transformer
    Engine's version in provide(), not installable here: its config is validated, not built)."""
    site = bridge_site()
    specs = []
    for name, plan in BRIDGE_PLANS.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(emit_strategy("megatron-bridge", job(name), plan))
        specs.append(f"64:{path}")
    got = run_json([sys.executable, str(STACKS / "bridge_load.py"), *specs], timeout=1200,
                   env={**os.environ, "ASAP_BRIDGE_SITE": site})
    for (name, _), c in zip(BRIDGE_PLANS.items(), got, strict=True):
        assert c["provider"] == BRIDGE_STOCK[name], name
        assert bridge_view(c) == expected(hf(name)), name
        assert c["padded_vocab"] == hf(name)["vocab_size"] and c["mixed_precision"] == "bf16_mixed"
        if name == "gpt-oss-120b":
            assert c["params"] is None and "Version" in c["build_error"]
        else:
            assert c["params"] == model_from_hf(hf(name)).num_params(include_mtp=True), name
    assert (got[2]["pp"], got[2]["vpp"], got[2]["fsdp"], got[2]["dp"]) == (8, 2, True, 1)


def titan_view(name, a):
    """torchtitan's model args (as its train spec holds them) in ``expected``'s words."""
    moe = a.get("moe_args") if a.get("moe_enabled", "moe_args" in a and name != "qwen3") else None
    ffn = a.get("hidden_dim", a.get("inter_dim", a.get("moe_inter_dim")))
    if name == "llama3":
        h = int(a["ffn_dim_multiplier"] * int(8 * a["dim"] / 3)) if a["ffn_dim_multiplier"] else int(8 * a["dim"] / 3)
        ffn = a["multiple_of"] * -(-h // a["multiple_of"])
    r = a.get("rope_scaling_args") or {}
    v = {"layers": a["n_layers"], "hidden": a["dim"], "ffn": ffn, "heads": a["n_heads"], "vocab": a["vocab_size"],
         "eps": a["norm_eps"], "rope_theta": float(a["rope_theta"]), "tied": a.get("enable_weight_tying", False),
         "qk_norm": a.get("qk_norm", False), "mtp": 0,
         "rope": "llama3" if r.get("scaling_factor", 1.0) != 1.0 else "yarn" if a.get("rope_factor", 1) != 1 else
         "default", "rope_factor": r.get("scaling_factor") if name == "llama3" and r["scaling_factor"] != 1.0 else
         a.get("rope_factor") if a.get("rope_factor", 1) != 1 else None}
    if name == "deepseek_v3":
        v.update(q_lora=a["q_lora_rank"], kv_lora=a["kv_lora_rank"], qk_nope=a["qk_nope_head_dim"],
                 qk_rope=a["qk_rope_head_dim"], v_head=a["v_head_dim"])
    else:
        v.update(kv_heads=a["n_kv_heads"], head_dim=a.get("head_dim") or a["dim"] // a["n_heads"])
    if moe:
        v.update(experts=moe["num_experts"], top_k=moe["top_k"], expert_ffn=a["moe_inter_dim"],
                 shared=moe["num_shared_experts"], dense_layers=a.get("n_dense_layers", 0), score=moe["score_func"],
                 groups=moe["num_expert_groups"] or 1, topk_group=moe["num_limited_groups"] or 1,
                 scale=float(moe["route_scale"]), aux=0.0, expert_bias=moe["load_balance_coeff"] is not None)
    if name == "gpt_oss":
        v.update(window=a["sliding_window_size"], sinks=True, swiglu_limit=a["swiglu_limit"], ffn=a["moe_inter_dim"])
    return v


def titan_balanced(name):
    """A model torchtitan 0.2.2 can train: its MoE balanced by the expert bias (no balancing loss)."""
    m = model_from_hf(hf(name))
    return replace(m, moe=replace(m.moe, expert_bias=True, aux_loss_coef=0.0), mtp_layers=0)


def test_torchtitan_stock_flavors_and_refusals(tmp_path):
    """torchtitan 0.2.2's ConfigManager loads the TOML and its train spec holds the model args: the dense models
    are its own flavors (llama3 8B/70B/405B with Llama 3.1 RoPE scaling, qwen3 8B with q/k norms), every field
    equal to config.json's; a loss-balanced MoE is refused under strict (v0.2.2 has no balancing loss), and the same model
    balanced by the expert bias is torchtitan's 30B-A3B / 120b flavor or a custom one (DeepSeek-V3: torchtitan's
    671B has eps 1e-5), every field compared."""
    pytest.importorskip("torchtitan")
    from asap.emit.torchtitan_model import model_args_json

    cases = [(n, None) for n in DENSE] + [(n, titan_balanced(n)) for n in ("qwen3-30b-a3b", "gpt-oss-120b",
                                                                           "deepseek-v3")]
    flavors = {"llama3.1-8b": "8B", "llama3.1-70b": "70B", "llama3.1-405b": "405B", "qwen3-8b": "8B",
               "qwen3-30b-a3b": "30B-A3B", "gpt-oss-120b": "120b", "deepseek-v3": "asap-DeepseekV3ForCausalLM"}
    jobs, files = [], []
    for name, model in cases:
        j = job(name, b=64, model=model)
        toml, args = tmp_path / f"{name}.toml", tmp_path / f"{name}.json"
        toml.write_text(emit_strategy("torchtitan", j, "zero=3"))
        args.write_text(model_args_json(j.model, 4096))
        jobs.append(j)
        files += [str(toml), str(args)]
    loaded = run_json([sys.executable, str(STACKS / "torchtitan_load.py"), *files], timeout=900)  # one process
    for (name, model), j, got in zip(cases, jobs, loaded, strict=True):
        assert got["flavor"] == flavors[name], name
        want = expected(hf(name))
        if model is not None:
            want.update(aux=0.0, expert_bias=True, mtp=0)
        assert titan_view(got["name"], got["model_args"]) == want, name
        if name != "gpt-oss-120b":  # biases and sinks: asap's count leaves them out
            assert got["params"] == j.model.num_params(), name
    for name, field in (("mixtral-8x7b", "moe.aux_loss_coef"), ("qwen3-30b-a3b", "moe.aux_loss_coef"),
                        ("gpt-oss-120b", "moe.aux_loss_coef"), ("deepseek-v3", "mtp_layers")):
        with pytest.raises(AsapError, match=rf"^model\.{field}: torchtitan cannot express"):
            emit_strategy("torchtitan", job(name), "ep=8,zero=3", strict=True)  # else: emitted, said (test_emit_launch)


def test_torchtitan_flavor_table_is_torchtitans():
    """data/torchtitan_flavors.json is what torchtitan 0.2.2's own tables hold (tests/stacks/torchtitan_flavors.py)."""
    pytest.importorskip("torchtitan")
    from importlib import resources

    proc = subprocess.run([sys.executable, str(STACKS / "torchtitan_flavors.py")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = json.loads(resources.files("asap").joinpath("data/torchtitan_flavors.json").read_text())
    assert json.loads(proc.stdout) == ours


def maxtext_view(c, model_name):
    """MaxText's pyconfig values in ``expected``'s words (LLaMARotaryEmbedding's scaling is factor 8)."""
    mla = c["attention_type"] == "mla"
    llama31 = c["rope_type"] == "llama3.1" or model_name.startswith("llama3.1")
    rope = "llama3" if llama31 else c["rope_type"] if c["rope_type"] == "yarn" else "default"
    v = {"layers": c["base_num_decoder_layers"], "hidden": c["base_emb_dim"], "ffn": c["base_mlp_dim"],
         "heads": c["base_num_query_heads"], "vocab": c["vocab_size"], "eps": c["normalization_layer_epsilon"],
         "rope_theta": float(c["rope_max_timescale"]), "tied": c["logits_via_embedding"], "qk_norm": c["use_qk_norm"],
         "rope": rope, "rope_factor": 8.0 if llama31 else c["rope_factor"] if rope == "yarn" else None,
         "mtp": c["mtp_num_layers"]}
    if mla:
        v.update(q_lora=c["q_lora_rank"], kv_lora=c["kv_lora_rank"], qk_nope=c["qk_nope_head_dim"],
                 qk_rope=c["qk_rope_head_dim"], v_head=c["v_head_dim"])
    else:
        v.update(kv_heads=c["base_num_kv_heads"], head_dim=c["head_dim"])
    if c["num_experts"] > 1:
        v.update(experts=c["num_experts"], top_k=c["num_experts_per_tok"], expert_ffn=c["base_moe_mlp_dim"],
                 shared=c["shared_experts"], dense_layers=c["first_num_dense_layers"],
                 score="sigmoid" if c["routed_score_func"] == "sigmoid" else "softmax",
                 groups=max(c["n_routing_groups"], 1), topk_group=max(c["topk_routing_group"], 1),
                 scale=float(c["routed_scaling_factor"]), aux=c["load_balance_loss_weight"],
                 expert_bias=c["routed_bias"] and c["routed_bias_update_rate"] > 0)
    if c["attention_sink"]:
        v.update(window=c["sliding_window_size"], sinks=True, swiglu_limit=c["mlp_activations_limit"])
    return v


MAXTEXT_STOCK = {"llama3.1-8b": "llama3.1-8b", "llama3.1-70b": "llama3.1-70b", "llama3.1-405b": "llama3.1-405b",
                 "qwen3-8b": "qwen3-8b", "mixtral-8x7b": "mixtral-8x7b", "qwen3-30b-a3b": "default",
                 "deepseek-v3": "deepseek3-671b", "gpt-oss-120b": "gpt-oss-120b"}


def test_maxtext_pyconfig_reads_every_model():
    """MaxText 0.2.5's pyconfig reads each emitted YAML over its base.yml (and the named model file): every
    architecture key equals config.json's; the stock model files where they match (Qwen3-30B-A3B's has RoPE base
    1e7, the checkpoint 1e6: custom)."""
    from test_emit_stacks import maxtext_python

    from asap.emit.maxtext_model import ARCH_KEYS

    python = maxtext_python()
    paths = []
    for name in MAXTEXT_STOCK:
        j = Job.from_names(name, "local-cpu", 8, 64, "bf16", devices=8)
        j = replace(j, model=model_from_hf(hf(name)))
        path = Path(os.environ.get("TMPDIR", "/tmp")) / f"asap-maxtext-{os.getpid()}-{name}.yml"
        path.write_text(emit_strategy("maxtext", j, "dp=8,zero=3"))
        paths.append(path)
    keys = [*ARCH_KEYS, "model_name"]
    got = run_json([python, str(STACKS / "maxtext_load.py"), "8", *map(str, paths)], timeout=1800,
                   env={**os.environ, "ASAP_MAXTEXT_KEYS": json.dumps(keys)})
    for name, g in zip(MAXTEXT_STOCK, got, strict=True):
        assert g["keys"]["model_name"] == MAXTEXT_STOCK[name], name
        view, want = maxtext_view(g["keys"], g["keys"]["model_name"]), expected(hf(name))
        if want.get("experts") and not want["dense_layers"] and want["expert_ffn"] != want["ffn"]:
            view.pop("ffn"), want.pop("ffn")  # every layer is MoE: the dense width computes nothing (qwen3_moe)
        assert view == want, name


def mindformers_view(cfg):
    mc, moe = cfg["model"]["model_config"], cfg.get("moe_config")
    sf = mc.get("scaling_factor") or {}
    v = {"layers": mc["num_layers"], "hidden": mc["hidden_size"], "ffn": mc["intermediate_size"],
         "heads": mc["num_heads"], "vocab": mc["vocab_size"], "eps": mc["rms_norm_eps"], "rope_theta": mc["theta"],
         "tied": False, "qk_norm": False, "rope": "yarn" if mc.get("extend_method") == "YARN" else "default",
         "rope_factor": sf.get("factor"), "mtp": mc.get("mtp_depth", 0)}
    if "kv_lora_rank" in mc:
        v.update(q_lora=mc["q_lora_rank"], kv_lora=mc["kv_lora_rank"], qk_nope=mc["qk_nope_head_dim"],
                 qk_rope=mc["qk_rope_head_dim"], v_head=mc["v_head_dim"])
    else:
        v.update(kv_heads=mc["n_kv_heads"], head_dim=mc["hidden_size"] // mc["num_heads"])
    if moe:
        v.update(experts=moe["expert_num"], top_k=moe["num_experts_chosen"], expert_ffn=moe["moe_intermediate_size"],
                 shared=moe["shared_expert_num"], dense_layers=moe["first_k_dense_replace"],
                 score="sigmoid" if moe["use_gating_sigmoid"] else "softmax", groups=moe["n_group"],
                 topk_group=moe["topk_group"], scale=moe["routed_scaling_factor"],
                 aux=moe.get("aux_loss_factors", [moe.get("aux_loss_factor")])[0],
                 expert_bias=moe["balance_via_topk_bias"])
    return v


def test_mindformers_keys_are_every_field_or_a_refusal():
    """MindFormers r1.5.0 (its documented keys: tests/emit/test_emit_stacks.py's schema): Mixtral and DeepSeek-V3 in
    every field; Llama 3.1's RoPE scaling, Qwen3's q/k norms and GPT-OSS's windows refused in one line."""
    import yaml

    from test_emit_stacks import MF_MODEL, MF_MOE, conforms

    for name in ("mixtral-8x7b", "deepseek-v3"):
        cfg = yaml.safe_load(emit_strategy("mindformers", job(name, cluster="ascend-910b-64"), "tp=4,pp=4,ep=4"))
        mc = cfg["model"]["model_config"]
        conforms(mc, MF_MODEL[mc["type"]], "model.model_config")
        conforms(cfg["moe_config"], MF_MOE, "moe_config")
        assert mindformers_view(cfg) == expected(hf(name)), name
    for name, field in (("llama3.1-70b", "rope_scaling"), ("qwen3-8b", "qk_norm"), ("qwen3-30b-a3b", "qk_norm"),
                        ("gpt-oss-120b", "sliding_window")):
        with pytest.raises(AsapError, match=rf"^model\.{field}: mindformers cannot express"):
            emit_strategy("mindformers", job(name, cluster="ascend-910b-64"), "tp=4,pp=2")


def _table(name):
    from importlib import resources

    return json.loads(resources.files("asap").joinpath(f"data/{name}").read_text())


def test_maxtext_model_table_is_maxtexts():
    """data/maxtext_models.json is what MaxText 0.2.5's model files and base.yml hold (tests/stacks/maxtext_models.py)."""
    from test_emit_stacks import maxtext_python

    python = Path(maxtext_python())
    configs = next((python.parents[1] / "lib").glob("python3*/site-packages/maxtext/configs"))
    got = run_json([sys.executable, "-c", "import json, sys; sys.argv = ['x', sys.argv[1]]; "
                    f"sys.path.insert(0, {str(STACKS)!r}); import maxtext_models as m; "
                    "print(json.dumps(m.dump(__import__('pathlib').Path(sys.argv[1]))))", str(configs)], timeout=300)
    assert got == _table("maxtext_models.json")


def test_bridge_provider_table_is_megatron_bridges():
    """data/bridge_providers.json is what Megatron-Bridge 0.3.1's provider classes hold (tests/stacks/bridge_providers.py)."""
    site = bridge_site()
    proc = subprocess.run([sys.executable, str(STACKS / "bridge_providers.py")], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "ASAP_BRIDGE_SITE": site})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout[proc.stdout.index("{"):]) == _table("bridge_providers.json")
