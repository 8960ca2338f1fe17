"""The architecture fields beyond the shapes: every field that changes what a layer computes, not its size.

One description (``ModelSpec``'s ``norm_eps``, ``qk_norm``, ``rope_scaling``, the attention variants and
``MoESpec``'s router fields) that every emitter reads and either writes in its stack's own terms or refuses in one
line naming the field. The native schema's keys are optional; their defaults (``ARCH_DEFAULTS``,
``ROUTER_DEFAULTS``) are the plain Llama-style model: RMSNorm eps 1e-5, no q/k norm, plain RoPE, no biases, full
attention, a softmax top-k router with its top-k weights renormalized and a GShard/Switch load-balancing loss of
0.01 (0 with an expert bias: DeepSeek's auxiliary-loss-free balancing, arXiv:2408.15664), dropless experts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asap.errors import AsapError

NORMS = ("rmsnorm", "layernorm")  # the block's normalization (LayerNorm's bias is ignored like every bias)
POSITION_EMBEDDINGS = ("rope", "learned")  # rotary (base ``rope_theta``) or a learned absolute table (GPT-2/3)
ROPE_SCALING_TYPES = ("llama3", "yarn", "linear")
ATTENTION_BIAS = ("none", "qkv", "all")  # none; Qwen2's q/k/v biases; GPT-OSS's q/k/v/o biases
SCORE_FUNCS = ("softmax", "sigmoid")
AUX_LOSS = ("none", "global", "sequence")  # GShard/Switch per batch; DeepSeek-V2/V3's per sequence
DROP_POLICIES = ("probs", "position")

# top-level architecture keys of the native schema and their defaults (to_dict leaves defaults out)
ARCH_DEFAULTS: dict[str, Any] = {"norm": "rmsnorm", "position_embedding": "rope", "rope_theta": 10000.0,
                                 "norm_eps": 1e-5, "qk_norm": False, "rope_scaling": None, "attention_bias": "none",
                                 "mlp_bias": False, "sliding_window": 0, "sliding_window_cycle": 0,
                                 "attention_sinks": False, "swiglu_limit": 0.0, "vocab_pad_multiple": 1}
# the router's keys of ``moe`` and their defaults (aux_loss_coef: 0.01, or 0 with an expert bias)
ROUTER_DEFAULTS: dict[str, Any] = {"score_func": "softmax", "norm_topk_prob": True, "expert_bias": False,
                                   "expert_bias_update_rate": 1e-3, "router_bias": False, "n_group": 1,
                                   "topk_group": 1, "routed_scaling_factor": 1.0, "aux_loss": "global",
                                   "aux_loss_coef": None, "z_loss_coef": 0.0, "capacity_factor": None,
                                   "drop_policy": "probs"}


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling. llama3: Llama 3.1's (arXiv:2407.21783 sec. 3.2; HF ``rope_type: llama3``),
    yarn: YaRN (arXiv:2309.00071; DeepSeek-V3, GPT-OSS), linear: position interpolation (arXiv:2306.15595)."""

    type: str
    factor: float
    original_max_position_embeddings: int = 0  # 0: not given (linear)
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    mscale: float = 1.0  # yarn (DeepSeek's attention-temperature terms)
    mscale_all_dim: float = 0.0  # yarn
    truncate: bool = True  # yarn: round the correction range to whole dimensions (GPT-OSS: false)


ROPE_KEYS = tuple(RopeScaling.__dataclass_fields__)


def _number(d: dict, key: str, where: str, default: Any, *, lo: float = 0.0, hi: float = 1e12,
            allow_none: bool = False) -> Any:
    v = d.get(key, default)
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= float(v) <= hi:
        raise AsapError(f"{where}.{key}", f"must be a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


def _choice(d: dict, key: str, where: str, default: str, allowed: tuple[str, ...]) -> str:
    v = d.get(key, default)
    if v not in allowed:
        raise AsapError(f"{where}.{key}", f"must be one of {', '.join(allowed)}, got {v!r}")
    return v


def _flag(d: dict, key: str, where: str, default: bool) -> bool:
    v = d.get(key, default)
    if not isinstance(v, bool):
        raise AsapError(f"{where}.{key}", f"must be true or false, got {v!r}")
    return v


def _count(d: dict, key: str, where: str, default: int, lo: int = 0) -> int:
    v = d.get(key, default)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= 1 << 24:
        raise AsapError(f"{where}.{key}", f"must be an integer >= {lo}, got {v!r}")
    return v


def rope_scaling_from_dict(d: Any, where: str) -> RopeScaling | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise AsapError(where, f"must be a mapping, got {type(d).__name__}")
    for k in d:
        if k not in ROPE_KEYS:
            raise AsapError(f"{where}.{k}", f"unknown field (allowed: {', '.join(ROPE_KEYS)})")
    kind = _choice(d, "type", where, "", ROPE_SCALING_TYPES)
    if kind != "linear" and "original_max_position_embeddings" not in d:
        raise AsapError(f"{where}.original_max_position_embeddings", f"missing (needed by {kind} scaling)")
    defaults = RopeScaling(kind, 1.0)
    return RopeScaling(
        type=kind, factor=_number(d, "factor", where, None, lo=1.0),
        original_max_position_embeddings=_count(d, "original_max_position_embeddings", where, 0),
        low_freq_factor=_number(d, "low_freq_factor", where, defaults.low_freq_factor),
        high_freq_factor=_number(d, "high_freq_factor", where, defaults.high_freq_factor),
        beta_fast=_number(d, "beta_fast", where, defaults.beta_fast),
        beta_slow=_number(d, "beta_slow", where, defaults.beta_slow),
        mscale=_number(d, "mscale", where, defaults.mscale),
        mscale_all_dim=_number(d, "mscale_all_dim", where, defaults.mscale_all_dim),
        truncate=_flag(d, "truncate", where, defaults.truncate))


def arch_from_dict(d: dict, where: str) -> dict[str, Any]:
    """The top-level architecture keys (``ARCH_DEFAULTS``), checked."""
    theta = d.get("rope_theta", ARCH_DEFAULTS["rope_theta"])
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 1.0 < float(theta) < 1e12:
        raise AsapError(f"{where}.rope_theta", f"must be a number between 1 and 1e12, got {theta!r}")
    window, cycle = _count(d, "sliding_window", where, 0), _count(d, "sliding_window_cycle", where, 0)
    if cycle and not window:
        raise AsapError(f"{where}.sliding_window_cycle", f"{cycle} needs a sliding_window (tokens > 0)")
    if cycle == 1:
        raise AsapError(f"{where}.sliding_window_cycle", "1 leaves no sliding-window layer (0: every layer slides, "
                                                         "n >= 2: the last of every n attends fully)")
    return {"norm": _choice(d, "norm", where, "rmsnorm", NORMS),
            "position_embedding": _choice(d, "position_embedding", where, "rope", POSITION_EMBEDDINGS),
            "rope_theta": float(theta),
            "norm_eps": _number(d, "norm_eps", where, ARCH_DEFAULTS["norm_eps"], lo=1e-12, hi=1.0),
            "qk_norm": _flag(d, "qk_norm", where, False),
            "rope_scaling": rope_scaling_from_dict(d.get("rope_scaling"), f"{where}.rope_scaling"),
            "attention_bias": _choice(d, "attention_bias", where, "none", ATTENTION_BIAS),
            "mlp_bias": _flag(d, "mlp_bias", where, False),
            "sliding_window": window,
            "sliding_window_cycle": cycle,
            "attention_sinks": _flag(d, "attention_sinks", where, False),
            "swiglu_limit": _number(d, "swiglu_limit", where, 0.0),
            "vocab_pad_multiple": _count(d, "vocab_pad_multiple", where, 1, lo=1)}


def router_from_dict(m: dict, where: str, num_experts: int) -> dict[str, Any]:
    """``moe``'s router keys (``ROUTER_DEFAULTS``), checked."""
    expert_bias = _flag(m, "expert_bias", where, False)
    n_group = _count(m, "n_group", where, 1, lo=1)
    topk_group = _count(m, "topk_group", where, 1 if n_group == 1 else n_group, lo=1)
    if num_experts % n_group:
        raise AsapError(f"{where}.n_group", f"{n_group} does not divide num_experts={num_experts}")
    if topk_group > n_group:
        raise AsapError(f"{where}.topk_group", f"{topk_group} exceeds n_group={n_group}")
    aux_coef = _number(m, "aux_loss_coef", where, 0.0 if expert_bias else 0.01, hi=10.0, allow_none=True)
    return {"score_func": _choice(m, "score_func", where, "softmax", SCORE_FUNCS),
            "norm_topk_prob": _flag(m, "norm_topk_prob", where, True), "expert_bias": expert_bias,
            "expert_bias_update_rate": _number(m, "expert_bias_update_rate", where, 1e-3, hi=1.0),
            "router_bias": _flag(m, "router_bias", where, False), "n_group": n_group, "topk_group": topk_group,
            "routed_scaling_factor": _number(m, "routed_scaling_factor", where, 1.0, lo=1e-6, hi=1e3),
            "aux_loss": _choice(m, "aux_loss", where, "global", AUX_LOSS),
            "aux_loss_coef": 0.0 if aux_coef is None else aux_coef,
            "z_loss_coef": _number(m, "z_loss_coef", where, 0.0, hi=10.0),
            "capacity_factor": _number(m, "capacity_factor", where, None, lo=1e-3, hi=1e3, allow_none=True),
            "drop_policy": _choice(m, "drop_policy", where, "probs", DROP_POLICIES)}
