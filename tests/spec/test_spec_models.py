"""Model specs: presets match published totals, HF configs import, bad fields are named."""

import json
from pathlib import Path

import pytest

from asap.errors import AsapError
from asap.spec.hf import model_from_hf
from asap.spec.loader import load_model
from asap.spec.model import model_from_dict
from asap.spec.presets import MODEL_PRESETS
from conftest import DEEPSEEK_V3_CONFIG


@pytest.mark.parametrize("name", [n for n, v in MODEL_PRESETS.items() if v[1]])
def test_preset_parameter_counts_match_published_totals(name):
    _, published, with_mtp, _ = MODEL_PRESETS[name]
    m = load_model(name)
    assert abs(m.num_params(include_mtp=with_mtp) / published - 1) < 0.02


def test_deepseek_v3_active_parameters():
    m = load_model("deepseek-v3")
    assert abs(m.num_active_params() / 37e9 - 1) < 0.03  # "37B activated" (arXiv:2412.19437)
    assert abs(m.num_params(include_mtp=True) / 685e9 - 1) < 0.02  # HF checkpoint incl. MTP


def test_telechat3_structure():
    m = load_model("telechat3-105b")
    assert (m.num_layers, m.moe.first_dense_layers, m.num_dense_layers, m.num_moe_layers) == (45, 1, 1, 44)
    assert m.mla.kv_lora_rank == 512 and m.moe.num_experts == 192 and m.moe.top_k == 4 and m.mtp_layers == 1


# Public config.json excerpts (Hugging Face model repositories), with the published total parameter counts.
HF_CONFIGS = {
    "gpt2": ({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": None,
              "vocab_size": 50257, "n_positions": 1024}, 124.4e6, 0.02),
    "pythia-160m": ({"model_type": "gpt_neox", "num_hidden_layers": 12, "hidden_size": 768,
                     "intermediate_size": 3072, "num_attention_heads": 12, "vocab_size": 50304,
                     "hidden_act": "gelu", "tie_word_embeddings": False}, 162.3e6, 0.02),
    "llama3-8b": ({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "hidden_act": "silu",
                   "tie_word_embeddings": False}, 8.03e9, 0.01),
    "mistral-7b": ({"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
                    "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                    "vocab_size": 32000, "hidden_act": "silu"}, 7.24e9, 0.01),
    "mixtral-8x7b": ({"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096,
                      "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                      "vocab_size": 32000, "hidden_act": "silu", "num_local_experts": 8,
                      "num_experts_per_tok": 2}, 46.7e9, 0.01),
    "qwen2-7b": ({"model_type": "qwen2", "num_hidden_layers": 28, "hidden_size": 3584, "intermediate_size": 18944,
                  "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "hidden_act": "silu",
                  "tie_word_embeddings": False}, 7.62e9, 0.01),
    "qwen1.5-moe-a2.7b": ({"model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 2048,
                           "intermediate_size": 5632, "num_attention_heads": 16, "num_key_value_heads": 16,
                           "vocab_size": 151936, "hidden_act": "silu", "num_experts": 60,
                           "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                           "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1,
                           "mlp_only_layers": []}, 14.3e9, 0.02),
    "qwen3-8b": ({"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "intermediate_size": 12288,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                  "hidden_act": "silu", "tie_word_embeddings": False}, 8.19e9, 0.01),
    "qwen3-30b-a3b": ({"model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048,
                       "intermediate_size": 6144, "num_attention_heads": 32, "num_key_value_heads": 4,
                       "head_dim": 128, "vocab_size": 151936, "hidden_act": "silu", "num_experts": 128,
                       "num_experts_per_tok": 8, "moe_intermediate_size": 768, "tie_word_embeddings": False},
                      30.5e9, 0.01),
    "deepseek-v2-lite": ({"model_type": "deepseek_v2", "num_hidden_layers": 27, "hidden_size": 2048,
                          "intermediate_size": 10944, "num_attention_heads": 16, "num_key_value_heads": 16,
                          "vocab_size": 102400, "hidden_act": "silu", "q_lora_rank": None, "kv_lora_rank": 512,
                          "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
                          "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
                          "moe_intermediate_size": 1408, "first_k_dense_replace": 1, "moe_layer_freq": 1},
                         15.7e9, 0.02),
}



@pytest.mark.parametrize("name", HF_CONFIGS)
def test_hf_configs_import_with_published_totals(name, tmp_path):
    cfg, total, tol = HF_CONFIGS[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    assert abs(m.num_params() / total - 1) < tol, m.num_params()


PRESET_OF_HF = {"deepseek-ai--DeepSeek-V3": "deepseek-v3", "meta-llama--Llama-3.1-8B": "llama3.1-8b",
                "meta-llama--Llama-3.1-70B": "llama3.1-70b", "meta-llama--Llama-3.1-405B": "llama3.1-405b",
                "mistralai--Mixtral-8x7B-v0.1": "mixtral-8x7b", "Qwen--Qwen3-8B": "qwen3-8b",
                "Qwen--Qwen3-30B-A3B": "qwen3-30b-a3b", "openai--gpt-oss-120b": "gpt-oss-120b"}


@pytest.mark.parametrize("hf_file", PRESET_OF_HF)
def test_hf_config_equals_preset_in_every_field(hf_file):
    """Each preset is its model's own config.json (tests/data/hf), every field but the name."""
    from dataclasses import replace

    from_hf = model_from_hf(json.loads((Path(__file__).parents[1] / "data" / "hf" / f"{hf_file}.json").read_text()))
    preset = load_model(PRESET_OF_HF[hf_file])
    assert replace(from_hf, name=preset.name) == preset


def test_deepseek_v3_partial_hf_config_keeps_the_shapes():
    from_hf = model_from_hf(DEEPSEEK_V3_CONFIG)
    preset = load_model("deepseek-v3")
    for field in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size", "mla",
                  "mtp_layers", "activation", "tie_embeddings"):
        assert getattr(from_hf, field) == getattr(preset, field), field
    assert from_hf.num_params(include_mtp=True) == preset.num_params(include_mtp=True)


@pytest.mark.parametrize("patch, field", [
    ({"num_layers": 0}, "model.num_layers"),
    ({"hidden_size": "big"}, "model.hidden_size"),
    ({"activation": "tanh"}, "model.activation"),
    ({"num_kv_heads": 5}, "model.num_kv_heads"),
    ({"moe": {"num_experts": 4, "top_k": 8, "expert_ffn_hidden_size": 64}}, "model.moe.top_k"),
    ({"moe": {"num_experts": 4, "top_k": 2}}, "model.moe.expert_ffn_hidden_size"),
    ({"mla": {"kv_lora_rank": 8}}, "model.mla.qk_nope_head_dim"),
    ({"colour": "red"}, "model.colour"),
])
def test_bad_model_fields_are_named(patch, field):
    base = dict(name="t", num_layers=2, hidden_size=64, ffn_hidden_size=128, num_attention_heads=4, vocab_size=100)
    base.update(patch)
    with pytest.raises(AsapError) as e:
        model_from_dict(base)
    assert e.value.field == field


def test_missing_required_field():
    with pytest.raises(AsapError) as e:
        model_from_dict(dict(name="t", num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=100))
    assert e.value.field == "model.ffn_hidden_size" and "missing" in str(e.value)


def test_unsupported_hf_model_type():
    with pytest.raises(AsapError) as e:
        model_from_hf({"model_type": "bert"})
    assert e.value.field == "config.json.model_type"


_GPT_OSS_STYLE = {"model_type": "gpt_oss", "num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 512,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000,
                  "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 128,
                  "layer_types": ["sliding_attention", "full_attention"] * 2}


def test_hf_layer_types_give_the_window_cycle():
    m = model_from_hf(_GPT_OSS_STYLE)
    assert (m.sliding_window, m.sliding_window_cycle, m.num_window_layers, m.attention_sinks) == (128, 2, 2, True)
    gemma3_like = dict(_GPT_OSS_STYLE, num_hidden_layers=8, layer_types=["sliding_attention"] * 5
                       + ["full_attention"] + ["sliding_attention"] * 2)
    assert (model_from_hf(gemma3_like).sliding_window_cycle, model_from_hf(gemma3_like).num_window_layers) == (6, 7)
    all_full = dict(_GPT_OSS_STYLE, layer_types=["full_attention"] * 4)
    assert model_from_hf(all_full).sliding_window == 0


def test_hf_qwen2_max_window_layers():
    """Qwen2Config: layer i slides when use_sliding_window and i >= max_window_layers."""
    base = {"model_type": "qwen2", "num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 512,
            "num_attention_heads": 4, "vocab_size": 1000, "sliding_window": 4096, "max_window_layers": 4}
    assert model_from_hf(base).sliding_window == 0  # use_sliding_window false (the shipped Qwen2 configs)
    assert model_from_hf(dict(base, use_sliding_window=True)).sliding_window == 0  # all 4 layers full
    every = model_from_hf(dict(base, use_sliding_window=True, max_window_layers=0))
    assert (every.sliding_window, every.num_window_layers) == (4096, 4)
    with pytest.raises(AsapError, match=r"^config\.json\.layer_types: only a repeating pattern"):
        model_from_hf(dict(base, use_sliding_window=True, max_window_layers=2))


def test_mistral_window_on_every_layer():
    m = model_from_hf({"model_type": "mistral", "num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 512,
                       "num_attention_heads": 4, "vocab_size": 1000, "sliding_window": 4096})
    assert (m.sliding_window, m.sliding_window_cycle, m.num_window_layers) == (4096, 0, 4)


@pytest.mark.parametrize("patch, field", [({"sliding_window": -1}, "sliding_window"),
                                          ({"sliding_window": "x"}, "sliding_window"),
                                          ({"sliding_window_cycle": 2}, "sliding_window_cycle"),
                                          ({"sliding_window": 128, "sliding_window_cycle": 1}, "sliding_window_cycle"),
                                          ({"attention_sinks": "yes"}, "attention_sinks")])
def test_bad_window_fields_are_named(patch, field):
    d = dict(name="m", num_layers=4, hidden_size=256, ffn_hidden_size=512, num_attention_heads=4, vocab_size=1000)
    with pytest.raises(AsapError, match=rf"^model\.{field}: "):
        model_from_dict(dict(d, **patch))
    with pytest.raises(AsapError, match=r"^config\.json\.layer_types: must list"):
        model_from_hf(dict(_GPT_OSS_STYLE, layer_types=["local"] * 4))
