"""MaxText's remat policies as ``recompute`` values: the policy names of ``configs/base.yml`` and ``custom`` with
each named tensor on the device, offloaded to host memory or recomputed.

Source (AI-Hypercomputer/maxtext, main, 2026): ``layers/decoders.py`` ``Decoder.get_remat_policy`` and
``minimal_policy`` (``jax.checkpoint_policies.save_only_these_names``), ``utils/maxtext_utils.py``
``get_save_and_offload_names`` (``save_and_offload_only_these_names``, offload to ``pinned_host``) and
``configs/types.py`` (``RematPolicy``, ``RematLocation`` and the tensors ``custom`` reads). The names are the
``checkpoint_name`` tags of ``layers/attentions.py`` (query/key/value_proj after RoPE, attention_out, out_proj),
``layers/attention_op.py`` (context: the cuDNN flash kernel's output and log-sum-exp), ``layers/linears.py``
(mlpwi, mlpwi_0, mlpwi_1, mlpwo), ``layers/moe.py`` (moe_mlpwi_0/1, moe_mlpwo, also tagged mlpwi_0/1, mlpwo),
``layers/attention_mla.py`` and ``models/llama2.py`` / ``layers/decoders.py`` (decoder_layer_input).

Spelling: ``recompute=save_qkv_proj`` (a policy name), or ``recompute=custom:query_proj=device+out_proj=offload``
(``custom``, then ``tensor=where`` pairs joined by ``+``; a tensor not named keeps base.yml's default: remat,
decoder_layer_input device). ``full`` and ``none`` are asap's own ``full`` and ``none``.

Batch codes: ``Recompute.MAXTEXT + index`` for a named policy; ``custom`` adds its assignment, two bits per
tensor in ``TENSORS`` order, above the policy index (``POLICY_SLOTS``).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from asap.errors import AsapError

MAXTEXT_BASE = 1024  # Recompute.MAXTEXT: above every module-set code (8 + 2**7)
POLICY_SLOTS = 16


class Where(IntEnum):
    """``RematLocation``: where a named tensor lives between its forward and its backward."""

    REMAT = 0  # recomputed in backward
    DEVICE = 1  # saved in device memory
    OFFLOAD = 2  # saved in pinned host memory (copied down after the forward, up before the backward)

    @property
    def label(self) -> str:
        return self.name.lower()


# configs/types.py: the tensors ``custom`` reads, in its order
TENSORS = ("decoder_layer_input", "indexer_cutoff_threshold", "context", "mlpwi", "moe_mlpwi_0", "moe_mlpwi_1",
           "moe_mlpwo", "mlpwi_0", "mlpwi_1", "mlpwo", "query_proj", "key_proj", "value_proj", "kv_proj",
           "query_wa_proj", "kv_wa_proj", "mla_kv", "mla_q", "qkv_proj", "attention_out", "out_proj")
PROJ = ("query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj")
MINIMAL = PROJ + ("out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo")

# name -> (saved on device, offloaded): decoders.py get_remat_policy, maxtext_utils.get_save_and_offload_names
POLICIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "minimal": (MINIMAL, ()),
    "minimal_with_context": (MINIMAL + ("context",), ()),
    "minimal_flash": (MINIMAL + ("context",), ()),  # deprecated spelling of minimal_with_context
    "save_dot_with_context_except_mlp": (PROJ + ("context", "out_proj"), ()),
    "save_dot_except_mlpwi": (PROJ + ("out_proj", "mlpwo"), ()),
    "save_dot_except_mlp": (PROJ + ("out_proj",), ()),
    "save_qkv_proj": (PROJ, ()),
    "save_out_proj": (("out_proj",), ()),
    "qkv_proj_offloaded": ((), ("query_proj", "value_proj", "key_proj", "kv_proj")),
    "minimal_offloaded": ((), MINIMAL),
    "custom": ((), ()),
}
NAMES = tuple(POLICIES)
DEFAULT = {t: (Where.DEVICE if t == "decoder_layer_input" else Where.REMAT) for t in TENSORS}  # base.yml


def is_policy_text(text: str) -> bool:
    """Whether a recompute value names a MaxText policy (``custom`` with or without its pairs)."""
    return text in POLICIES or text.startswith("custom:")


def _custom_pairs(text: str, field: str) -> dict[str, Where]:
    out = dict(DEFAULT)
    for pair in (text.split(":", 1)[1].split("+") if ":" in text else ()):
        name, eq, where = pair.partition("=")
        if name not in TENSORS:
            raise AsapError(field, f"unknown MaxText remat tensor {name!r} (known: {', '.join(TENSORS)})")
        if not eq or where not in [w.label for w in Where]:
            raise AsapError(field, f"{name} must be =remat, =device or =offload, got {pair!r}")
        out[name] = Where[where.upper()]
    return out


def policy_code(text: str, field: str = "strategy.recompute") -> int:
    """The batch code of a MaxText policy name or ``custom:tensor=where+...``."""
    if text in POLICIES and text != "custom":
        return MAXTEXT_BASE + NAMES.index(text)
    if not is_policy_text(text):
        raise AsapError(field, f"unknown MaxText remat policy {text!r} (known: {', '.join(NAMES)})")
    where = _custom_pairs(text, field)
    bits = sum(int(where[t]) << (2 * i) for i, t in enumerate(TENSORS))
    return MAXTEXT_BASE + NAMES.index("custom") + POLICY_SLOTS * bits


def is_maxtext(codes):
    """Per row: whether the recompute code is a MaxText policy."""
    return np.asarray(codes) >= MAXTEXT_BASE


def assignment(code: int) -> dict[str, Where]:
    """Every named tensor's place under a MaxText policy code (a named policy's lists, or custom's pairs)."""
    index, bits = (int(code) - MAXTEXT_BASE) % POLICY_SLOTS, (int(code) - MAXTEXT_BASE) // POLICY_SLOTS
    name = NAMES[index]
    if name == "custom":
        return {t: Where(bits >> (2 * i) & 3) for i, t in enumerate(TENSORS)}
    saved, offloaded = POLICIES[name]
    out = {t: Where.REMAT for t in TENSORS}
    out["decoder_layer_input"] = Where.DEVICE  # the scan carry: every remat policy keeps the layer input
    out.update({t: Where.DEVICE for t in saved})
    out.update({t: Where.OFFLOAD for t in offloaded})
    return out


def policy_name(code: int) -> str:
    return NAMES[(int(code) - MAXTEXT_BASE) % POLICY_SLOTS]


def policy_label(code: int) -> str:
    """The canonical spelling: the name, or ``custom`` and the tensors that differ from base.yml's defaults."""
    name = policy_name(code)
    if name != "custom":
        return name
    where = assignment(code)
    pairs = [f"{t}={where[t].label}" for t in TENSORS if where[t] != DEFAULT[t]]
    return "custom:" + "+".join(pairs) if pairs else "custom"
