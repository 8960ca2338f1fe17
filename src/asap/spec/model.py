"""The model spec (docs/design.md native schema) and its parameter counts.

Parameter counts follow the module shapes of Megatron-Core / Hugging Face implementations:
attention Q, K, V, O projections (or MLA's low-rank projections), MLPs (gated: 3 matrices, else 2), MoE
routers, routed and shared experts, RMS/LayerNorm weights, embeddings and an untied LM head, and
DeepSeek-style MTP modules (one transformer layer plus a 2h -> h projection and three norms, sharing the
embedding and head). Biases are ignored (they are < 0.1% of any model here).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from asap.errors import AsapError
from asap.spec.arch import (ARCH_DEFAULTS, ROUTER_DEFAULTS, RopeScaling,
                            arch_from_dict, router_from_dict)

ACTIVATIONS = ("gelu", "swiglu", "relu2")
# the fields the architecture adds beyond the shapes: asap.spec.arch (ARCH_DEFAULTS, ROUTER_DEFAULTS); emitted
# configs carry them; the shape counts do not depend on them, except a learned position table, biases and
# attention sinks, which are left out of the counts (< 0.1% of any model here), and the vocabulary padding


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, sec. 2.1)."""

    q_lora_rank: int | None  # None: queries are projected directly (DeepSeek-V2-Lite)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class MoESpec:
    num_experts: int
    top_k: int
    expert_ffn_hidden_size: int
    shared_experts: int = 0
    first_dense_layers: int = 0
    # the router (asap.spec.arch.ROUTER_DEFAULTS): score function, top-k renormalization, DeepSeek's expert
    # bias (auxiliary-loss-free balancing) and its update rate, a bias on the router's logits (GPT-OSS),
    # group-limited routing (n_group groups, the best topk_group of them), the routed experts' output scale,
    # the load-balancing loss (global or per sequence, its coefficient), the z-loss, capacity (None: dropless)
    score_func: str = "softmax"
    norm_topk_prob: bool = True
    expert_bias: bool = False
    expert_bias_update_rate: float = 1e-3
    router_bias: bool = False
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    aux_loss: str = "global"
    aux_loss_coef: float = 0.01
    z_loss_coef: float = 0.0
    capacity_factor: float | None = None
    drop_policy: str = "probs"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    vocab_size: int
    num_kv_heads: int = 0  # 0 -> num_attention_heads (filled in __post_init__)
    head_dim: int = 0  # 0 -> hidden / heads
    activation: str = "swiglu"
    tie_embeddings: bool = False
    mla: MLASpec | None = None
    moe: MoESpec | None = None
    mtp_layers: int = 0
    norm: str = "rmsnorm"
    position_embedding: str = "rope"
    rope_theta: float = 10000.0  # the rotary base (Su et al. 2021, RoFormer); unused with learned positions
    norm_eps: float = 1e-5  # the epsilon of every RMSNorm/LayerNorm
    qk_norm: bool = False  # RMSNorm on each head's query and key (Qwen3; OLMo 2)
    rope_scaling: RopeScaling | None = None  # Llama 3.1's, YaRN or linear frequency scaling
    attention_bias: str = "none"  # none | qkv (Qwen2) | all (q, k, v and o: GPT-OSS)
    mlp_bias: bool = False  # biases in the feed-forward (and expert) projections (GPT-OSS)
    sliding_window: int = 0  # tokens a sliding-window layer attends to (0: full attention everywhere)
    sliding_window_cycle: int = 0  # with a window: the last layer of each cycle of this many is full (0: none)
    attention_sinks: bool = False  # a learned per-head sink logit in the softmax (GPT-OSS)
    swiglu_limit: float = 0.0  # GPT-OSS's clamped GLU (gate * sigmoid(1.702 gate) * (up + 1), clamped): 0 off
    vocab_pad_multiple: int = 1  # the embedding and head hold ceil(vocab / m) * m rows

    @property
    def padded_vocab_size(self) -> int:
        m = self.vocab_pad_multiple
        return -(-self.vocab_size // m) * m

    def __post_init__(self):
        if not self.num_kv_heads:
            object.__setattr__(self, "num_kv_heads", self.num_attention_heads)
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden_size // max(self.num_attention_heads, 1))

    # ---- structure -------------------------------------------------------------------------------------
    @property
    def gated(self) -> bool:
        return self.activation == "swiglu"

    @property
    def num_moe_layers(self) -> int:
        return 0 if self.moe is None else self.num_layers - self.moe.first_dense_layers

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def num_window_layers(self) -> int:
        """Layers that attend over a sliding window: all with no cycle, else all but the last of each cycle."""
        if not self.sliding_window:
            return 0
        c = self.sliding_window_cycle
        return self.num_layers - (self.num_layers // c if c else 0)

    # ---- parameters per module -------------------------------------------------------------------------
    def attention_params(self) -> int:
        h = self.hidden_size
        if self.mla is not None:
            m = self.mla
            nh = self.num_attention_heads
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * nh * qk  # down, norm, up
            else:
                q = h * nh * qk
            kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank  # down (+ shared rope key), norm
            kv += m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)  # up to K_nope and V
            o = nh * m.v_head_dim * h
            return q + kv + o
        q = h * self.num_attention_heads * self.head_dim
        kv = 2 * h * self.num_kv_heads * self.head_dim
        o = self.num_attention_heads * self.head_dim * h
        qk_norm = 2 * self.head_dim if self.qk_norm else 0  # one RMSNorm weight per head width, on q and on k
        return q + kv + o + qk_norm

    def mlp_params(self, ffn: int) -> int:
        return (3 if self.gated else 2) * self.hidden_size * ffn

    def dense_layer_params(self) -> int:
        return self.attention_params() + self.mlp_params(self.ffn_hidden_size) + 2 * self.hidden_size

    def expert_params(self) -> int:
        """One routed (or shared) expert."""
        assert self.moe is not None
        return self.mlp_params(self.moe.expert_ffn_hidden_size)

    def moe_layer_params(self) -> int:
        assert self.moe is not None
        m = self.moe
        router = self.hidden_size * m.num_experts
        experts = (m.num_experts + m.shared_experts) * self.expert_params()
        return self.attention_params() + router + experts + 2 * self.hidden_size

    def moe_layer_active_params(self) -> int:
        assert self.moe is not None
        m = self.moe
        return (self.attention_params() + self.hidden_size * m.num_experts
                + (m.top_k + m.shared_experts) * self.expert_params() + 2 * self.hidden_size)

    def embedding_params(self) -> int:
        return self.padded_vocab_size * self.hidden_size

    def head_params(self) -> int:
        return 0 if self.tie_embeddings else self.padded_vocab_size * self.hidden_size

    def mtp_module_params(self) -> int:
        """DeepSeek-V3 sec. 2.2: per MTP depth a transformer block, a 2h->h projection, two RMSNorms on its inputs
        and one before the shared output head (the checkpoint's ``shared_head.norm``; Megatron-Core's MTP layer
        ``final_layernorm``)."""
        block = self.moe_layer_params() if self.moe is not None else self.dense_layer_params()
        return block + 2 * self.hidden_size * self.hidden_size + 3 * self.hidden_size

    # ---- totals ----------------------------------------------------------------------------------------
    def num_params(self, include_mtp: bool = False) -> int:
        """Total parameters (all experts), the figure model cards publish; MTP modules only when asked."""
        n = self.embedding_params() + self.head_params() + self.hidden_size  # + final norm
        n += self.num_dense_layers * self.dense_layer_params()
        if self.moe is not None:
            n += self.num_moe_layers * self.moe_layer_params()
        if include_mtp:
            n += self.mtp_layers * self.mtp_module_params()
        return n

    def num_active_params(self, include_mtp: bool = False) -> int:
        """Parameters that touch each token (top-k plus shared experts)."""
        n = self.embedding_params() + self.head_params() + self.hidden_size
        n += self.num_dense_layers * self.dense_layer_params()
        if self.moe is not None:
            n += self.num_moe_layers * self.moe_layer_active_params()
        if include_mtp and self.mtp_layers:
            block = self.moe_layer_active_params() if self.moe is not None else self.dense_layer_params()
            n += self.mtp_layers * (block + 2 * self.hidden_size * self.hidden_size + 3 * self.hidden_size)
        return n

    def to_dict(self) -> dict[str, Any]:
        """The native schema (model_from_dict reads it back): architecture keys at their defaults left out."""
        d = asdict(self)
        if d.get("moe"):
            assert self.moe is not None  # asdict wrote a non-empty "moe" from it
            auto = ROUTER_DEFAULTS | {"aux_loss_coef": 0.0 if self.moe.expert_bias else 0.01}
            d["moe"] = {k: v for k, v in d["moe"].items() if not (k in auto and v == auto[k])}
        if d.get("rope_scaling"):
            d["rope_scaling"] = {k: v for k, v in d["rope_scaling"].items()
                                 if k in ("type", "factor") or v != RopeScaling.__dataclass_fields__[k].default}
        return {k: v for k, v in d.items() if v is not None and not (k in ARCH_DEFAULTS and v == ARCH_DEFAULTS[k])}


# ----------------------------------------------------------------------------------------------------------
# Validation from a mapping (native YAML/JSON schema)
# ----------------------------------------------------------------------------------------------------------

_REQUIRED = ("name", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size")
_OPTIONAL = ("num_kv_heads", "head_dim", "activation", "tie_embeddings", "mla", "moe", "mtp_layers",
             *ARCH_DEFAULTS)
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_MOE_KEYS = ("num_experts", "top_k", "expert_ffn_hidden_size", "shared_experts", "first_dense_layers",
             *ROUTER_DEFAULTS)


# No model dimension (layers, widths, heads, experts, vocabulary) comes near this; the bound keeps a typo such
# as 1e30 from overflowing the cost model's 64-bit arithmetic.
MAX_DIMENSION = 1 << 24


def _int(d: dict, key: str, where: str, *, minimum: int = 1, default: Any = ..., allow_none: bool = False) -> Any:
    if key not in d or d[key] is None:
        if allow_none and key in d:
            return None
        if default is ...:
            raise AsapError(f"{where}.{key}", "missing")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise AsapError(f"{where}.{key}", f"must be an integer, got {v!r}")
    if v < minimum:
        raise AsapError(f"{where}.{key}", f"must be >= {minimum}, got {v}")
    if v > MAX_DIMENSION:
        raise AsapError(f"{where}.{key}", f"must be at most {MAX_DIMENSION:,}, got {v}")
    return v


def _check_keys(d: Any, allowed: tuple[str, ...], where: str) -> None:
    if not isinstance(d, dict):
        raise AsapError(where, f"must be a mapping, got {type(d).__name__}")
    for k in d:
        if k not in allowed:
            raise AsapError(f"{where}.{k}", f"unknown field (allowed: {', '.join(allowed)})")


def model_from_dict(d: Any, where: str = "model") -> ModelSpec:
    _check_keys(d, _REQUIRED + _OPTIONAL, where)
    name = d.get("name")
    if not isinstance(name, str) or not name.strip():
        raise AsapError(f"{where}.name", "missing or not a string")
    num_layers = _int(d, "num_layers", where)
    hidden = _int(d, "hidden_size", where)
    ffn = _int(d, "ffn_hidden_size", where)
    heads = _int(d, "num_attention_heads", where)
    vocab = _int(d, "vocab_size", where)
    kv_heads = _int(d, "num_kv_heads", where, default=heads)
    if heads % kv_heads:
        raise AsapError(f"{where}.num_kv_heads", f"{kv_heads} does not divide num_attention_heads={heads}")
    head_dim = _int(d, "head_dim", where, default=0 if hidden % heads == 0 else ...)
    if head_dim == 0:
        head_dim = hidden // heads
    activation = d.get("activation", "swiglu")
    if activation not in ACTIVATIONS:
        raise AsapError(f"{where}.activation", f"must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")
    tie = d.get("tie_embeddings", False)
    if not isinstance(tie, bool):
        raise AsapError(f"{where}.tie_embeddings", f"must be true or false, got {tie!r}")
    mla = None
    if d.get("mla") is not None:
        m = d["mla"]
        _check_keys(m, _MLA_KEYS, f"{where}.mla")
        mla = MLASpec(
            q_lora_rank=_int(m, "q_lora_rank", f"{where}.mla", default=None, allow_none=True),
            kv_lora_rank=_int(m, "kv_lora_rank", f"{where}.mla"),
            qk_nope_head_dim=_int(m, "qk_nope_head_dim", f"{where}.mla"),
            qk_rope_head_dim=_int(m, "qk_rope_head_dim", f"{where}.mla"),
            v_head_dim=_int(m, "v_head_dim", f"{where}.mla"),
        )
    moe = None
    if d.get("moe") is not None:
        m = d["moe"]
        _check_keys(m, _MOE_KEYS, f"{where}.moe")
        moe = MoESpec(
            num_experts=_int(m, "num_experts", f"{where}.moe"),
            top_k=_int(m, "top_k", f"{where}.moe"),
            expert_ffn_hidden_size=_int(m, "expert_ffn_hidden_size", f"{where}.moe"),
            shared_experts=_int(m, "shared_experts", f"{where}.moe", minimum=0, default=0),
            first_dense_layers=_int(m, "first_dense_layers", f"{where}.moe", minimum=0, default=0),
            **router_from_dict(m, f"{where}.moe", _int(m, "num_experts", f"{where}.moe")),
        )
        if moe.top_k > moe.num_experts:
            raise AsapError(f"{where}.moe.top_k", f"{moe.top_k} exceeds num_experts={moe.num_experts}")
        if moe.first_dense_layers >= num_layers:
            raise AsapError(f"{where}.moe.first_dense_layers", f"{moe.first_dense_layers} leaves no MoE layer of {num_layers}")
    mtp = _int(d, "mtp_layers", where, minimum=0, default=0)
    return ModelSpec(name=name.strip(), num_layers=num_layers, hidden_size=hidden, ffn_hidden_size=ffn,
                     num_attention_heads=heads, vocab_size=vocab, num_kv_heads=kv_heads, head_dim=head_dim,
                     activation=activation, tie_embeddings=tie, mla=mla, moe=moe, mtp_layers=mtp, **_arch(d, where))


def _arch(d: dict, where: str) -> dict[str, Any]:
    return arch_from_dict(d, where)
