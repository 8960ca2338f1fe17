"""Model presets, each with the published total it must match (tests check within 2%) and its source."""

from __future__ import annotations

from typing import Any

# Llama 3.1's RoPE scaling (HF meta-llama/Llama-3.1-* config.json rope_scaling, rope_type llama3)
LLAMA31_ROPE = dict(type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                    original_max_position_embeddings=8192)
QWEN3_ARCH = dict(rope_theta=1e6, norm_eps=1e-6, qk_norm=True)  # Qwen3Attention's q_norm/k_norm, rms_norm_eps
QWEN3_ROUTER = dict(norm_topk_prob=True, aux_loss_coef=0.001)  # Qwen3MoeConfig as the checkpoints set it


def _llama3(name: str, layers: int, hidden: int, ffn: int, heads: int, **extra: Any) -> dict[str, Any]:
    """The Llama 3 shape (GQA with 8 KV heads, 128256 vocabulary, SwiGLU, RoPE base 500000) at one size."""
    return dict(name=name, num_layers=layers, hidden_size=hidden, ffn_hidden_size=ffn, num_attention_heads=heads,
                num_kv_heads=8, vocab_size=128256, activation="swiglu", rope_theta=500000.0, **extra)


# name -> (native schema mapping, published total parameters, whether that total includes MTP, source)
MODEL_PRESETS: dict[str, tuple[dict[str, Any], float, bool, str]] = {
    "gpt3-175b": (dict(name="gpt3-175b", num_layers=96, hidden_size=12288, ffn_hidden_size=49152,
                       num_attention_heads=96, vocab_size=50257, activation="gelu", tie_embeddings=True,
                       norm="layernorm", position_embedding="learned"),
                  175e9, False, "Brown et al. 2020 (arXiv:2005.14165) Table 2.1"),
    "llama3-8b": (_llama3("llama3-8b", 32, 4096, 14336, 32),
                  8.03e9, False, "Meta Llama 3 model card; HF meta-llama/Meta-Llama-3-8B config.json"),
    "llama3-70b": (_llama3("llama3-70b", 80, 8192, 28672, 64),
                   70.6e9, False, "Meta Llama 3 model card; HF meta-llama/Meta-Llama-3-70B config.json"),
    "llama3.1-8b": (_llama3("llama3.1-8b", 32, 4096, 14336, 32, rope_scaling=LLAMA31_ROPE),
                    8.03e9, False, "HF meta-llama/Llama-3.1-8B config.json"),
    "llama3.1-70b": (_llama3("llama3.1-70b", 80, 8192, 28672, 64, rope_scaling=LLAMA31_ROPE),
                     70.6e9, False, "HF meta-llama/Llama-3.1-70B config.json"),
    "llama3.1-405b": (_llama3("llama3.1-405b", 126, 16384, 53248, 128, rope_scaling=LLAMA31_ROPE),
                      405.9e9, False, "Llama 3 Herd of Models (arXiv:2407.21783) Table 3"),
    "mixtral-8x7b": (dict(name="mixtral-8x7b", num_layers=32, hidden_size=4096, ffn_hidden_size=14336,
                          num_attention_heads=32, num_kv_heads=8, vocab_size=32000, activation="swiglu",
                          rope_theta=1e6, moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=14336,
                                                   aux_loss_coef=0.02)),
                     46.7e9, False, "Mixtral of Experts (arXiv:2401.04088)"),
    "mixtral-8x22b": (dict(name="mixtral-8x22b", num_layers=56, hidden_size=6144, ffn_hidden_size=16384,
                           num_attention_heads=48, num_kv_heads=8, vocab_size=32768, activation="swiglu",
                           rope_theta=1e6, moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=16384,
                                                   aux_loss_coef=0.001)),
                      141e9, False, "Mistral AI Mixtral 8x22B announcement; HF config.json"),
    "deepseek-v3": (dict(name="deepseek-v3", num_layers=61, hidden_size=7168, ffn_hidden_size=18432,
                         num_attention_heads=128, vocab_size=129280, activation="swiglu",
                         mla=dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                                  v_head_dim=128),
                         moe=dict(num_experts=256, top_k=8, expert_ffn_hidden_size=2048, shared_experts=1,
                                  first_dense_layers=3, score_func="sigmoid", expert_bias=True, n_group=8,
                                  topk_group=4, routed_scaling_factor=2.5, aux_loss="sequence", aux_loss_coef=0.001),
                         mtp_layers=1, norm_eps=1e-6,
                         rope_scaling=dict(type="yarn", factor=40.0, original_max_position_embeddings=4096,
                                           beta_fast=32.0, beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0)),
                    671e9, False, "DeepSeek-V3 technical report (arXiv:2412.19437): 671B total, 37B activated"),
    "qwen3-30b-a3b": (dict(name="qwen3-30b-a3b", num_layers=48, hidden_size=2048, ffn_hidden_size=6144,
                           num_attention_heads=32, num_kv_heads=4, head_dim=128, vocab_size=151936,
                           activation="swiglu", **QWEN3_ARCH,
                           moe=dict(num_experts=128, top_k=8, expert_ffn_hidden_size=768, **QWEN3_ROUTER)),
                      30.5e9, False, "Qwen3 technical report (arXiv:2505.09388) Table 2; HF Qwen/Qwen3-30B-A3B"),
    "qwen3-235b-a22b": (dict(name="qwen3-235b-a22b", num_layers=94, hidden_size=4096, ffn_hidden_size=12288,
                             num_attention_heads=64, num_kv_heads=4, head_dim=128, vocab_size=151936,
                             activation="swiglu", **QWEN3_ARCH,
                             moe=dict(num_experts=128, top_k=8, expert_ffn_hidden_size=1536, **QWEN3_ROUTER)),
                        235e9, False, "Qwen3 technical report (arXiv:2505.09388) Table 2; HF Qwen/Qwen3-235B-A22B"),
    "qwen3-8b": (dict(name="qwen3-8b", num_layers=36, hidden_size=4096, ffn_hidden_size=12288,
                      num_attention_heads=32, num_kv_heads=8, head_dim=128, vocab_size=151936, activation="swiglu",
                      **QWEN3_ARCH),
                 8.19e9, False, "Qwen3 technical report (arXiv:2505.09388) Table 1; HF Qwen/Qwen3-8B config.json"),
    "gpt-oss-120b": (dict(name="gpt-oss-120b", num_layers=36, hidden_size=2880, ffn_hidden_size=2880,
                          num_attention_heads=64, num_kv_heads=8, head_dim=64, vocab_size=201088, activation="swiglu",
                          rope_theta=150000.0, attention_bias="all", mlp_bias=True, sliding_window=128,
                          sliding_window_cycle=2, attention_sinks=True, swiglu_limit=7.0,
                          rope_scaling=dict(type="yarn", factor=32.0, original_max_position_embeddings=4096,
                                            beta_fast=32.0, beta_slow=1.0, truncate=False),
                          moe=dict(num_experts=128, top_k=4, expert_ffn_hidden_size=2880, router_bias=True,
                                   aux_loss_coef=0.9)),
                     116.8e9, False, "gpt-oss-120b model card (arXiv:2508.10925): 116.8B total; HF openai/gpt-oss-120b"),
    "telechat3-105b": (dict(name="telechat3-105b", num_layers=45, hidden_size=2560, ffn_hidden_size=7680,
                            num_attention_heads=32, vocab_size=131072, activation="swiglu",
                            mla=dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                                     v_head_dim=128),
                            moe=dict(num_experts=192, top_k=4, expert_ffn_hidden_size=1536, shared_experts=1,
                                     first_dense_layers=1),
                            mtp_layers=1),
                       105e9, True, "TeleChat3 MoE training report: 105B total with MTP"),
    # Small enough for 4 CPU processes in seconds (asap run); heads, kv heads, layers and experts divide by 4.
    "tiny-dense": (dict(name="tiny-dense", num_layers=4, hidden_size=128, ffn_hidden_size=256,
                        num_attention_heads=4, num_kv_heads=2, vocab_size=512, activation="swiglu"),
                   0, False, "asap test model"),
    "tiny-moe": (dict(name="tiny-moe", num_layers=4, hidden_size=128, ffn_hidden_size=256,
                      num_attention_heads=4, num_kv_heads=2, vocab_size=512, activation="swiglu",
                      moe=dict(num_experts=4, top_k=2, expert_ffn_hidden_size=128, shared_experts=1,
                               first_dense_layers=1)),
                 0, False, "asap test model"),
}
