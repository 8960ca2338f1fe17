"""The strategy knobs' vocabulary: the keys, the enums of recompute, schedule and ZeRO, the typed recompute value
(``RecomputePolicy``) and the batch codes of recompute values (``Recompute.MODULES`` + the bit mask of
``RecomputeModule``), and ``plain_value``, a typed knob in its printed spelling.

Read by ``asap.spec.strategy`` (the ``Strategy`` record, parsing and defaults) and ``asap.spec.legality`` (the
rules over batches of strategies), which imports no ``Strategy`` so that the two do not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any, Callable, Mapping

import numpy as np

from asap.errors import AsapError
from asap.spec import remat
from asap.spec.framework import Dispatcher
from asap.spec.layout import parse_layer_split
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
    # hierarchical (Megatron-Core cp_comm_type a2a+p2p, --hierarchical-context-parallel-sizes A R; TE
    # AttnFuncWithCPAndKVP2P with cp_group [a2a group, p2p group]): Ulysses over the inner cp_a2a ranks (scale-up),
    # a ring over the cp / cp_a2a outer ones
    A2A_P2P = "a2a+p2p"

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


class KnobKind(Enum):
    """What a strategy key's values are, which decides how it is parsed, held, printed and coded in a batch."""

    DEGREE = "degree"  # an integer >= 1 (a parallel degree, the micro-batch size)
    COUNT = "count"  # an integer >= 0
    LEVEL = "level"  # an integer enum, held as its type (zero: ``Zero``)
    SWITCH = "switch"  # 0 | 1, held as a bool
    ENUM = "enum"  # one of named choices, held as its str/int enum; batch code: the index in ``choices``
    POLICY = "policy"  # the recompute value (``RecomputePolicy``); batch code: ``RecomputePolicy.code``
    SPLIT = "split"  # the layer split, a tuple of layers per chunk; batch column ``split`` indexes a table


INTEGER_KINDS = (KnobKind.DEGREE, KnobKind.COUNT, KnobKind.LEVEL, KnobKind.SWITCH)
_SHOWN = object()  # ``Knob.hidden``: no value hides the knob


@dataclass(frozen=True)
class Knob:
    """One strategy key: its name, kind, the choices of an enum (in batch-code order), the default (as printed;
    ``REQUIRED`` for dp), the printed value that hides it (``hidden``: from ``Strategy.to_dict`` and ``str``;
    ``hidden_in_text``: from ``str`` and ``key`` only), its compact spelling (``compact`` name, ``compact_values``
    short values, ``bare``: the value alone names the key), ``inert``: the columns where it does nothing (its
    value there is the default's code), and a help line. The batch column is the name (``split`` for the
    layer split) holding the ``code`` of each value."""

    name: str
    kind: KnobKind
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    type: Any = None  # the held type of a LEVEL, ENUM or POLICY knob (with ``parse(text, field)`` for ENUM)
    hidden: Any = _SHOWN
    hidden_in_text: Any = _SHOWN
    compact: str = ""
    compact_values: Mapping[str, str] = field(default_factory=dict)
    bare: bool = False
    inert: Callable[[Mapping[str, Any]], Any] | None = None
    zero_means: str = ""  # a COUNT knob: what 0 means (in its error message)

    @property
    def column(self) -> str:
        """The ``StrategyBatch`` column: the name, ``split`` for the layer split (an index into its table)."""
        return "split" if self.kind is KnobKind.SPLIT else self.name

    @property
    def compact_name(self) -> str:
        return self.compact or self.name

    @property
    def is_integer(self) -> bool:
        return self.kind in INTEGER_KINDS

    def code(self, value: Any) -> int:
        """A held value's batch code (SPLIT: not coded here, ``StrategyBatch`` indexes its table)."""
        if self.kind is KnobKind.POLICY:
            return value.code
        if self.kind is KnobKind.ENUM:
            return self.choices.index(str(plain_value(value)))
        return int(value)

    def decode(self, code: int) -> Any:
        """The value of a batch code, as ``Strategy`` holds it (an ENUM code past the choices, a row the planner
        left free such as ``BEST_DISPATCHER``, reads as the first choice)."""
        if self.kind is KnobKind.POLICY:
            return RecomputePolicy.from_code(code)
        if self.kind is KnobKind.ENUM:
            return self.type.parse(self.choices[code if code < len(self.choices) else 0])
        return code

    def code_of_printed(self, value: Any) -> int:
        """The batch code of a value in its printed spelling (``parse_strategy``'s)."""
        if self.kind is KnobKind.POLICY:
            return recompute_code(value)
        if self.kind is KnobKind.ENUM:
            return self.choices.index(str(value))
        return int(value)

    def printed_of_code(self, code: int) -> Any:
        """The printed spelling of a batch code (the planner's labels, ``Framework.offers`` values)."""
        if self.kind is KnobKind.POLICY:
            return recompute_label(code)
        if self.kind is KnobKind.ENUM:
            return self.choices[code]
        return code

    @property
    def default_code(self) -> int:
        """The batch code of the default: what a batch built without this column holds."""
        return self.code_of_printed(self.default) if self.kind is not KnobKind.SPLIT else 0

    def parse(self, value: Any, field: str) -> Any:
        """A raw value (text, number) checked and in its printed spelling: an int, the canonical text of an enum
        or recompute policy, the layer split as a tuple."""
        if self.is_integer:
            return self.parse_int(value, field)
        if self.kind is KnobKind.SPLIT:
            return parse_layer_split(value, f"{field}.{self.name}")
        if self.kind is KnobKind.POLICY:
            return recompute_label(recompute_code(value, f"{field}.{self.name}"))
        if str(value) not in self.choices:
            raise AsapError(f"{field}.{self.name}", f"must be one of {', '.join(self.choices)}, got {value!r}")
        return str(value)

    def typed(self, value: Any, field: str = "strategy") -> Any:
        """A value in its printed spelling as the type ``Strategy`` holds (``Strategy.__post_init__``)."""
        if self.kind is KnobKind.SWITCH:
            return bool(self.parse_int(int(value) if isinstance(value, bool) else value, field))
        if self.kind is KnobKind.LEVEL:
            return self.type(self.parse_int(value, field))
        if self.kind is KnobKind.POLICY:
            return RecomputePolicy.parse(value, f"{field}.{self.name}")
        if self.kind is KnobKind.ENUM:
            return self.type.parse(value, f"{field}.{self.name}")
        return value

    def parse_int(self, v: Any, field: str) -> int:
        k = self.name
        try:
            iv = int(v)
            if isinstance(v, bool) or (isinstance(v, float) and v != iv):
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            raise AsapError(f"{field}.{k}", f"must be an integer, got {v!r}") from None
        if self.kind is KnobKind.COUNT and iv < 0:
            raise AsapError(f"{field}.{k}", f"must be >= 0 ({self.zero_means}), got {iv}")
        if self.kind is KnobKind.LEVEL and iv not in tuple(self.type):
            levels = [str(int(x)) for x in self.type]
            raise AsapError(f"{field}.{k}", f"must be {', '.join(levels[:-1])} or {levels[-1]}, got {iv}")
        if self.kind is KnobKind.SWITCH and iv not in (0, 1):
            raise AsapError(f"{field}.{k}", f"must be 0 or 1, got {iv}")
        if self.kind is KnobKind.DEGREE and iv < 1:
            raise AsapError(f"{field}.{k}", f"must be >= 1, got {iv}")
        if iv > 1 << 40:
            raise AsapError(f"{field}.{k}", f"is absurdly large ({iv})")
        return iv

    def values_text(self) -> str:
        """The values a user may give, for help and the README: ``(none|selective|full)``, ``(0|1)``."""
        if self.kind is KnobKind.SWITCH:
            return "0|1"
        if self.kind is KnobKind.LEVEL:
            return "|".join(str(int(x)) for x in self.type)
        if self.kind is KnobKind.ENUM:
            return "|".join(self.choices)
        if self.kind is KnobKind.POLICY:
            return "none|selective|full|module+module|a MaxText remat policy"
        if self.kind is KnobKind.SPLIT:
            return "5/4/4/3"
        return ">= 0" if self.kind is KnobKind.COUNT else ">= 1"


REQUIRED = object()  # ``Knob.default`` of dp: no default (``complete_strategy`` derives it from the devices)


def _no_exchange(cols: Mapping[str, Any]) -> Any:
    """cp=1: context parallelism exchanges nothing (cp_comm there is the ring's code, the default)."""
    return cols["cp"] == 1


K = KnobKind
# The one table of strategy keys, in their printed order (``Strategy``'s fields are these, in this order).
KNOBS: tuple[Knob, ...] = (
    Knob("dp", K.DEGREE, REQUIRED, "data-parallel degree (default: devices / (tp pp cp))"),
    Knob("tp", K.DEGREE, 1, "tensor-parallel degree"),
    Knob("pp", K.DEGREE, 1, "pipeline-parallel degree"),
    Knob("vpp", K.DEGREE, 1, "virtual pipeline stages (chunks) per device"),
    Knob("cp", K.DEGREE, 1, "context-parallel degree"),
    Knob("ep", K.DEGREE, 1, "expert-parallel degree"),
    Knob("etp", K.DEGREE, 1, "expert tensor-parallel degree (default: tp where legal, else 1)"),
    Knob("mbs", K.DEGREE, 1, "micro-batch size in sequences"),
    Knob("zero", K.LEVEL, 1, "ZeRO stage: what data parallelism shards (default: the stack's)", type=Zero),
    Knob("sp", K.SWITCH, 0, "sequence parallelism (default: 1 when tp > 1)"),
    Knob("recompute", K.POLICY, "none", "activation recomputation: the stack's selective policy, every layer, "
         "Megatron-Core recompute modules joined by +, or a MaxText remat policy", type=RecomputePolicy,
         compact="rc", compact_values={"selective": "sel"}),
    Knob("schedule", K.ENUM, "1f1b", "pipeline schedule (default: interleaved when vpp > 1)", choices=SCHEDULES,
         type=Schedule, bare=True),
    Knob("dispatcher", K.ENUM, "alltoall", "how MoE tokens reach their experts (default: the stack's)",
         choices=("alltoall", "allgather", "dedup"), type=Dispatcher, bare=True),
    Knob("a2a_overlap", K.SWITCH, 0, "expert all-to-alls hidden behind another micro-batch (default: the stack's)",
         compact="a2a"),
    Knob("layer_split", K.SPLIT, (), "transformer layers per pipeline chunk (default: L // (pp vpp), the "
         "remainder from the middle chunks outwards)", compact="split"),
    Knob("offload_act", K.SWITCH, 0, "stored activations to host memory", hidden_in_text=0, compact="offact"),
    Knob("offload_opt", K.SWITCH, 0, "optimizer states to host memory, the step on the CPU", hidden_in_text=0,
         compact="offopt"),
    Knob("fp8_param", K.SWITCH, 0, "fp8 runs keep the compute weights in fp8 only", hidden_in_text=0,
         compact="fp8p"),
    Knob("offload_layers", K.COUNT, 0, "under offload_act=1, how many of a device's layers offload (0: every "
         "layer)", hidden=0, hidden_in_text=0, compact="offl", zero_means="0: every layer"),
    Knob("grad_bf16", K.SWITCH, 0, "gradients accumulated and reduced in 16 bits", hidden=0, hidden_in_text=0,
         compact="gradbf"),
    Knob("dp_replicate", K.DEGREE, 1, "hybrid sharding: dp as dp_replicate replicas of a ZeRO shard group",
         hidden=1, compact="dprep"),
    Knob("cp_comm", K.ENUM, "p2p", "context parallelism's exchange: ring, Ulysses all-to-all, all-gather of K,V "
         "(default: the stack's)", choices=CP_COMMS, type=CpComm, hidden="p2p", inert=_no_exchange),
    Knob("cp_a2a", K.DEGREE, 1, "cp_comm=a2a+p2p: the inner Ulysses degree of the cp ranks (the ring runs over "
         "cp / cp_a2a; Megatron --hierarchical-context-parallel-sizes)", hidden=1, compact="ulysses"),
    Knob("vocab_tiles", K.DEGREE, 1, "the loss computed over this many chunks of a micro-batch's tokens, one "
         "chunk's logits live at a time (MaxText num_vocab_tiling)", hidden=1, compact="vtiles"),
)
del K
KNOB: Mapping[str, Knob] = {k.name: k for k in KNOBS}
assert KNOB["dispatcher"].choices == tuple(d.value for d in Dispatcher)

# the lists the rest of the code reads, all from the table
KEYS = tuple(k.name for k in KNOBS)  # every key, in the printed order
INT_KEYS = tuple(k.name for k in KNOBS if k.is_integer)
SWITCH_KEYS = tuple(k.name for k in KNOBS if k.kind is KnobKind.SWITCH)  # 0 or 1
ZERO_ALLOWED = tuple(k.name for k in KNOBS if k.kind in (KnobKind.COUNT, KnobKind.LEVEL))  # integers whose 0 is a value
# shown in a strategy string only when on (offload_layers: only when not 0, every layer)
OFF_BY_DEFAULT = tuple(k.name for k in KNOBS if k.hidden_in_text is not _SHOWN)
# keys printed (``Strategy.to_dict``, ``str``) only where they differ from this value
PRINTED_UNLESS = {k.name: k.hidden for k in KNOBS if k.hidden is not _SHOWN}
TYPED = {k.name: k for k in KNOBS if k.type is not None}  # the knobs ``Strategy`` holds as a type
COLUMNS = tuple(k.column for k in KNOBS)  # a ``StrategyBatch``'s columns
COMPACT_NAMES = {k.name: k.compact for k in KNOBS if k.compact}
COMPACT_VALUES = {k.name: dict(k.compact_values) for k in KNOBS if k.compact_values}
BARE_CHOICES = {k.name: k.choices for k in KNOBS if k.bare}  # value sets that share no value


def knob_of_column(column: str) -> Knob:
    return KNOB["layer_split"] if column == "split" else KNOB[column]


def strategy_columns(s) -> dict[str, np.ndarray]:
    """One strategy (read by its attributes, so that this module imports no ``Strategy``) as the batch columns
    the rules read (a batch of one; the layer split's column is its ``split`` index, 0 or 1)."""
    return {k.column: np.array([int(bool(s.layer_split)) if k.kind is KnobKind.SPLIT else k.code(getattr(s, k.name))],
                               dtype=np.int64) for k in KNOBS}


def keys_help() -> str:
    """The keys for ``--strategy``'s help: ``dp tp pp ... cp_comm``."""
    return " ".join(KEYS)


def keys_markdown() -> str:
    """The README's list of strategy keys: a line per knob with its values and help (``tests/spec/test_knobs.py``
    holds the README to it; ``python -m asap.spec.knobs`` prints it)."""
    return "\n".join(f"- `{k.name}` ({k.values_text()}): {k.help}" for k in KNOBS)


if __name__ == "__main__":
    print(keys_markdown())


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
