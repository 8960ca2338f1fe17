"""The strategy knobs' vocabulary: the keys, the enums of recompute, schedule and ZeRO, the typed recompute value
(``RecomputePolicy``) and the batch codes of recompute values (``Recompute.MODULES`` + the bit mask of
``RecomputeModule``), and ``plain_value``, a typed knob in its printed spelling.

Read by ``asap.spec.strategy`` (the ``Strategy`` record, parsing and defaults) and ``asap.spec.legality`` (the
rules over batches of strategies), which imports no ``Strategy`` so that the two do not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any

import numpy as np

from asap.errors import AsapError
from asap.spec import remat
from asap.spec.remat import MAXTEXT_BASE


class Recompute(IntEnum):
    """Activation recomputation: none; selective (the stack's own selective policy, ``Framework.selective``);
    full (every layer); a set of modules (``RecomputeModule``), coded ``MODULES + mask``; or a MaxText remat
    policy (``asap.spec.remat``), coded from ``MAXTEXT`` up."""

    NONE = 0
    SELECTIVE = 1
    FULL = 2
    MODULES = 8  # codes >= 8: MODULES + the bit mask of the recomputed modules
    MAXTEXT = MAXTEXT_BASE  # codes >= 1024: a MaxText remat policy (``asap.spec.remat``)

    @property
    def label(self) -> str:
        return self.name.lower()


class RecomputeModule(IntEnum):
    """Megatron-Core's ``--recompute-granularity selective --recompute-modules`` (``transformer_config.py``):
    each checkpoints one submodule of every layer, dropping what it stores and re-running its forward in
    backward. The value is the module's bit in the mask."""

    CORE_ATTN = 0  # the attention kernel (with flash attention it stores little: its inputs are kept anyway)
    LAYERNORM = 1  # input and pre-MLP norms: their outputs (the QKV and MLP inputs) are not stored
    MLP = 2  # a dense layer's MLP: only its input is stored
    MOE_ACT = 3  # the routed experts' activation function: the fc2 inputs are not stored
    MOE = 4  # the whole MoE block (router, dispatch, experts, combine), dispatch repeated
    SHARED_EXPERTS = 5  # the shared experts' MLP
    MLA_UP_PROJ = 6  # MLA's q/kv up-projections: only the compressed latents are stored

    @property
    def label(self) -> str:
        return self.name.lower()


RECOMPUTE_MODULES = tuple(m.label for m in RecomputeModule)


def recompute_code(label: str, field: str = "strategy.recompute") -> int:
    """The batch code of a recompute value: none | selective | full, modules joined by ``+``, or a MaxText
    remat policy (``asap.spec.remat``: a policy name, or ``custom:tensor=where+...``)."""
    text = str(label).strip().lower()
    if text in RECOMPUTE:
        return RECOMPUTE.index(text)
    if remat.is_policy_text(text):
        return remat.policy_code(text, field)
    names = [n.strip() for n in text.split("+")]
    unknown = [n for n in names if n not in RECOMPUTE_MODULES]
    if unknown or not names:
        raise AsapError(field, f"must be none, selective, full, modules joined by '+' "
                               f"({', '.join(RECOMPUTE_MODULES)}) or a MaxText remat policy "
                               f"({', '.join(remat.NAMES)}), got {label!r}")
    mask = 0
    for n in names:
        mask |= 1 << RECOMPUTE_MODULES.index(n)
    return int(Recompute.MODULES) + mask


def recompute_label(code: int) -> str:
    """The canonical spelling of a batch code (modules in ``RecomputeModule`` order)."""
    if code < Recompute.MODULES:
        return RECOMPUTE[code]
    if code >= Recompute.MAXTEXT:
        return remat.policy_label(code)
    mask = code - Recompute.MODULES
    return "+".join(m.label for m in RecomputeModule if mask >> m.value & 1)


@dataclass(frozen=True)
class RecomputePolicy:
    """A ``recompute`` value: its kind and, for ``Recompute.MODULES``, the set of recomputed modules. Prints as
    its canonical text (``none``, ``selective``, ``full``, ``layernorm+moe_act``, ``save_qkv_proj``); ``code`` is
    its batch code (``maxtext``: a MaxText policy's, ``asap.spec.remat``)."""

    kind: Recompute = Recompute.NONE
    modules: frozenset[RecomputeModule] = frozenset()
    maxtext: int = 0

    @classmethod
    def parse(cls, text: Any, field: str = "strategy.recompute") -> RecomputePolicy:
        """Read ``none | selective | full`` or modules joined by ``+`` (the one place recompute text is parsed)."""
        if isinstance(text, RecomputePolicy):
            return text
        return cls.from_code(recompute_code(text, field))

    @classmethod
    def from_code(cls, code: int) -> RecomputePolicy:
        code = int(code)
        if code < Recompute.MODULES:
            return cls(Recompute(code))
        if code >= Recompute.MAXTEXT:
            return cls(Recompute.MAXTEXT, maxtext=code)
        mask = code - Recompute.MODULES
        return cls(Recompute.MODULES, frozenset(m for m in RecomputeModule if mask >> m.value & 1))

    @property
    def code(self) -> int:
        """The batch code: the kind, or ``MODULES`` + the modules' bit mask."""
        if self.kind == Recompute.MAXTEXT:
            return self.maxtext
        if self.kind != Recompute.MODULES:
            return int(self.kind)
        return int(Recompute.MODULES) + sum(1 << m.value for m in self.modules)

    @property
    def label(self) -> str:
        return recompute_label(self.code)

    @property
    def module_labels(self) -> list[str]:
        """The recomputed modules' names in ``RecomputeModule`` order ([] for none/selective/full)."""
        return [m.label for m in RecomputeModule if m in self.modules]

    def __str__(self) -> str:
        return self.label


def module_recomputed(codes, module: RecomputeModule):
    """Per row: whether ``module`` is in the row's recompute module set (False for none/selective/full)."""
    codes = np.asarray(codes)
    return (codes >= Recompute.MODULES) & (codes < Recompute.MAXTEXT) & (((codes - Recompute.MODULES) >> module.value) & 1 == 1)


class Schedule(IntEnum):
    """Pipeline schedules: 1F1B, interleaved 1F1B (vpp > 1), zero-bubble ZB-H1, GPipe."""

    ONE_F_ONE_B = 0
    INTERLEAVED = 1
    ZB = 2
    GPIPE = 3

    @property
    def label(self) -> str:
        return SCHEDULES[self.value]

    @classmethod
    def parse(cls, text: Any, field: str = "strategy.schedule") -> Schedule:
        if isinstance(text, Schedule):
            return text
        if str(text) not in SCHEDULES:
            raise AsapError(field, f"must be one of {', '.join(SCHEDULES)}, got {text!r}")
        return cls(SCHEDULES.index(str(text)))

    def __str__(self) -> str:
        return self.label

    def __format__(self, spec: str) -> str:
        return format(self.label, spec)


class CpComm(str, Enum):
    """How context parallelism exchanges attention's inputs (Megatron-Core ``--cp-comm-type``,
    ``TransformerConfig.cp_comm_type``, TE ``DotProductAttention`` ``cp_comm_type``)."""

    P2P = "p2p"  # ring: cp-1 steps each pass a K,V chunk, overlapped with the attention of the held chunk
    A2A = "a2a"  # DeepSpeed-Ulysses: all-to-all of Q, K, V to heads/cp over the full sequence, and of O back
    ALLGATHER = "allgather"  # all-gather of K, V over the cp group; each rank attends its own queries

    @classmethod
    def parse(cls, text: Any, field: str = "strategy.cp_comm") -> CpComm:
        if isinstance(text, CpComm):
            return text
        if str(text) not in CP_COMMS:
            raise AsapError(field, f"must be one of {', '.join(CP_COMMS)}, got {text!r}")
        return cls(str(text))

    @property
    def code(self) -> int:
        """The batch code (the index in ``CP_COMMS``)."""
        return CP_COMMS.index(self.value)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


CP_COMMS = tuple(c.value for c in CpComm)


class Zero(IntEnum):
    """ZeRO stage: what the data-parallel group shards (Rajbhandari et al. 2020)."""

    NONE = 0
    OPTIMIZER = 1  # optimizer states (Megatron's distributed optimizer)
    GRADIENTS = 2  # + gradients
    PARAMETERS = 3  # + parameters (FSDP, ZeRO-3)


RECOMPUTE = ("none", "selective", "full")  # the named policies; module sets are spelled out
SCHEDULES = ("1f1b", "interleaved", "zb", "gpipe")
INT_KEYS = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "zero", "sp", "a2a_overlap", "offload_act",
            "offload_opt", "fp8_param", "offload_layers", "grad_bf16", "dp_replicate")
# shown in a strategy string only when on (offload_layers: only when not 0, every layer)
OFF_BY_DEFAULT = ("offload_act", "offload_opt", "fp8_param", "offload_layers", "grad_bf16")
ZERO_ALLOWED = ("zero", "offload_layers")  # integer keys (not switches) whose 0 is a value
SWITCH_KEYS = ("sp", "a2a_overlap", "offload_act", "offload_opt", "fp8_param", "grad_bf16")  # 0 or 1
KEYS = INT_KEYS[:10] + ("recompute", "schedule", "dispatcher", "a2a_overlap", "layer_split", "offload_act",
                        "offload_opt", "fp8_param", "offload_layers", "grad_bf16", "dp_replicate", "cp_comm")
# keys printed (``Strategy.to_dict``, ``str``) only where they differ from this default
PRINTED_UNLESS = {"offload_layers": 0, "grad_bf16": 0, "dp_replicate": 1, "cp_comm": "p2p"}


def plain_value(value: Any) -> Any:
    """A typed strategy value as it is printed and stored: an int for a switch or ZeRO stage, the text of a
    schedule, dispatcher or recompute policy; anything else as it is."""
    if isinstance(value, (bool, Zero)):
        return int(value)
    if isinstance(value, (Schedule, RecomputePolicy)):
        return value.label
    if isinstance(value, Enum):
        return value.value
    return value
