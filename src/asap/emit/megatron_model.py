"""asap's model (``asap.spec.arch``'s every field) as Megatron-LM core_r0.14.0 arguments, typed as its parser types them.

Megatron-LM's ``megatron/training/arguments.py`` (tag core_v0.14.0): ``--rotary-base`` is ``type=int``,
``--norm-epsilon`` and the router's coefficients ``float``, ``--make-vocab-size-divisible-by`` ``int``. What
megatron-core 0.14's model code cannot compute is refused (``model.<field>: megatron cannot express ...``):
sliding-window attention, attention sinks, GPT-OSS's clamped GLU and biased router (no such arguments at
core_v0.14.0), YaRN outside MLA, Llama 3.1 scaling with other than its 1/4/8192 frequency bounds
(``RotaryEmbedding._apply_scaling``'s fixed arguments), YaRN's beta and original length other than
MLATransformerConfig's defaults (no flags), sigmoid routing without top-k renormalization (megatron-core divides
the top-k sigmoid scores by their sum whenever top_k > 1), q/k/v biases with an output bias but no feed-forward
bias (``--add-bias-linear`` covers every linear layer), a vocabulary that tp cannot pad to exactly.
"""

from __future__ import annotations

from asap.emit.common import refuse_model

NAME = "megatron"
MLA_YARN_DEFAULTS = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}
LLAMA3_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def check_model(model, stack: str = NAME) -> None:
    """What megatron-core 0.14's GPT model cannot compute."""
    if model.sliding_window:
        raise refuse_model(stack, "sliding_window", f"sliding_window={model.sliding_window} (core_v0.14.0 has no "
                                                    "window-attention argument)")
    if model.attention_sinks:
        raise refuse_model(stack, "attention_sinks", "attention sinks (no learnable softmax offset at core_v0.14.0)")
    if model.swiglu_limit:
        raise refuse_model(stack, "swiglu_limit", f"swiglu_limit={model.swiglu_limit:g} (GPT-OSS's clamped GLU)")
    if model.moe is not None and model.moe.router_bias:
        raise refuse_model(stack, "moe.router_bias", "a biased router (its TopKRouter has no bias)")
    if model.attention_bias == "all" and not model.mlp_bias:
        raise refuse_model(stack, "attention_bias", "attention_bias=all without mlp_bias (add_bias_linear biases "
                                                    "every linear layer)")
    if model.mlp_bias and model.attention_bias != "all":
        raise refuse_model(stack, "mlp_bias", f"mlp_bias with attention_bias={model.attention_bias}")
    if model.qk_norm and model.mla is not None:
        raise refuse_model(stack, "qk_norm", "per-head q/k norms with MLA (its --qk-layernorm is the latent norms)")
    _check_rope(model, stack)
    if model.moe is not None and model.moe.score_func == "sigmoid" and not model.moe.norm_topk_prob \
            and model.moe.top_k > 1:
        raise refuse_model(stack, "moe.norm_topk_prob", "sigmoid routing without top-k renormalization")


def _check_rope(model, stack: str) -> None:
    if model.position_embedding != "rope":
        return
    if not float(model.rope_theta).is_integer():
        raise refuse_model(stack, "rope_theta", f"rope_theta={model.rope_theta:g} (--rotary-base is an integer)")
    r = model.rope_scaling
    if r is None:
        return
    if r.type == "llama3":
        for key, value in LLAMA3_FIXED.items():
            if getattr(r, key) != value:
                raise refuse_model(stack, f"rope_scaling.{key}", f"{key}={getattr(r, key):g} (megatron-core applies "
                                                                 f"Llama 3.1 scaling with {key}={value:g})")
    elif r.type == "yarn":
        if model.mla is None:
            raise refuse_model(stack, "rope_scaling.type", "YaRN without MLA (--rope-type yarn is MLA's)")
        for key, value in MLA_YARN_DEFAULTS.items():
            if getattr(r, key) != value:
                raise refuse_model(stack, f"rope_scaling.{key}", f"{key}={getattr(r, key):g} (no flag: "
                                                                 f"MLATransformerConfig's {value:g})")
        if not r.truncate:
            raise refuse_model(stack, "rope_scaling.truncate", "YaRN without truncation")
    elif not float(r.factor).is_integer():
        raise refuse_model(stack, "rope_scaling.factor", f"linear factor {r.factor:g} "
                                                         "(--rotary-seq-len-interpolation-factor is an integer)")


def vocab_divisor(model, tp: int, stack: str = NAME) -> int:
    """``--make-vocab-size-divisible-by`` X such that Megatron's padding (to a multiple of X * tp,
    ``_vocab_size_with_padding``) gives exactly the model's padded vocabulary: the largest X <= 128."""
    v = model.padded_vocab_size
    for x in range(128, 0, -1):
        if v % (x * tp) == 0:
            return x
    raise refuse_model(stack, "vocab_size", f"a vocabulary of {v} with tp={tp} (it pads the vocabulary to a "
                                            "multiple of tp)")


def rope_args(model) -> list[tuple[str, ...]]:
    if model.position_embedding != "rope":
        return [("--position-embedding-type", "learned_absolute")]
    a: list[tuple[str, ...]] = [("--position-embedding-type", "rope"), ("--rotary-base", str(int(model.rope_theta)))]
    r = model.rope_scaling
    if model.mla is not None:
        if r is not None and r.type == "yarn":
            a += [("--rope-type", "yarn"), ("--rotary-scaling-factor", f"{r.factor:g}"), ("--mscale", f"{r.mscale:g}"),
                  ("--mscale-all-dim", f"{r.mscale_all_dim:g}")]
            return a
        a.append(("--rope-type", "rope"))  # MLA takes YaRN by default
    if r is not None and r.type == "llama3":
        a += [("--use-rope-scaling",), ("--rope-scaling-factor", f"{r.factor:g}")]
    elif r is not None and r.type == "linear":
        a.append(("--rotary-seq-len-interpolation-factor", str(int(r.factor))))
    return a


def router_args(model) -> list[tuple[str, ...]]:
    """The router: score function, where the softmax is taken, expert bias, groups, scale, balancing loss,
    z-loss and capacity."""
    e = model.moe
    a: list[tuple[str, ...]] = [("--moe-router-score-function", e.score_func)]
    if e.score_func == "softmax" and not e.norm_topk_prob and e.top_k > 1:
        a.append(("--moe-router-pre-softmax",))  # the softmax over all experts, top-k kept unnormalized
    if e.expert_bias:
        a += [("--moe-router-enable-expert-bias",), ("--moe-router-bias-update-rate", f"{e.expert_bias_update_rate:g}")]
    if e.n_group > 1:
        a += [("--moe-router-num-groups", str(e.n_group)), ("--moe-router-group-topk", str(e.topk_group))]
    if e.routed_scaling_factor != 1.0:
        a.append(("--moe-router-topk-scaling-factor", f"{e.routed_scaling_factor:g}"))
    kind = "none" if e.aux_loss == "none" or not e.aux_loss_coef else \
        {"global": "aux_loss", "sequence": "seq_aux_loss"}[e.aux_loss]
    a.append(("--moe-router-load-balancing-type", kind))
    if kind != "none":
        a.append(("--moe-aux-loss-coeff", f"{e.aux_loss_coef:g}"))
    if e.z_loss_coef:
        a.append(("--moe-z-loss-coeff", f"{e.z_loss_coef:g}"))
    if e.capacity_factor is not None:
        a += [("--moe-expert-capacity-factor", f"{e.capacity_factor:g}"), ("--moe-token-drop-policy", e.drop_policy)]
    return a


def model_args(model, tp: int) -> list[tuple[str, ...]]:
    """The architecture: Megatron's defaults are LayerNorm, learned absolute positions and GeLU, so each is said."""
    check_model(model)
    a: list[tuple[str, ...]]
    a = [("--num-layers", str(model.num_layers)), ("--hidden-size", str(model.hidden_size)),
         ("--ffn-hidden-size", str(model.ffn_hidden_size)), ("--num-attention-heads", str(model.num_attention_heads)),
         ("--vocab-size", str(model.vocab_size)), ("--make-vocab-size-divisible-by", str(vocab_divisor(model, tp))),
         ("--normalization", {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[model.norm]),
         ("--norm-epsilon", f"{model.norm_eps:g}")]
    if model.mla is None:  # MLA's head widths are its own flags below
        a.insert(4, ("--kv-channels", str(model.head_dim)))
    a += rope_args(model)
    if model.num_kv_heads != model.num_attention_heads and model.mla is None:
        a += [("--group-query-attention",), ("--num-query-groups", str(model.num_kv_heads))]
    if model.activation == "swiglu":
        a.append(("--swiglu",))
    elif model.activation == "relu2":
        a.append(("--squared-relu",))
    if model.attention_bias != "all":
        a.append(("--disable-bias-linear",))
    if model.attention_bias == "qkv":
        a.append(("--add-qkv-bias",))
    if model.qk_norm:
        a.append(("--qk-layernorm",))  # RMSNorm on each head's query and key (Qwen3)
    if not model.tie_embeddings:
        a.append(("--untie-embeddings-and-output-weights",))
    if model.mla is not None:
        m = model.mla
        # --qk-layernorm: the RMSNorms on the query and key-value latents (DeepSeek-V2 sec. 2.1.2; without it
        # megatron-core's MLA spec has none)
        a += [("--multi-latent-attention",), ("--qk-layernorm",)]
        if m.q_lora_rank:
            a.append(("--q-lora-rank", str(m.q_lora_rank)))
        a += [("--kv-lora-rank", str(m.kv_lora_rank)), ("--qk-head-dim", str(m.qk_nope_head_dim)),
              ("--qk-pos-emb-head-dim", str(m.qk_rope_head_dim)), ("--v-head-dim", str(m.v_head_dim))]
    if model.mtp_layers:
        a.append(("--mtp-num-layers", str(model.mtp_layers)))
    return a
