"""Parallel strategies: parse ``key=value`` lists, fill defaults, check legality.

Keys (docs/design.md): dp, tp, pp, vpp, cp, ep, etp, mbs, recompute (none|selective|full, Megatron-Core's
recompute modules joined by ``+``, e.g. ``layernorm+moe_act``, or a MaxText remat policy, ``save_qkv_proj`` or
``custom:query_proj=device+out_proj=offload``, ``asap.spec.remat``), zero (0|1|2|3),
sp (0|1), schedule (1f1b|interleaved|zb|gpipe), dispatcher (alltoall|allgather|dedup), a2a_overlap (0|1),
layer_split (layers per pipeline chunk, ``5/4/4/3``), offload_act (0|1: stored activations to host memory),
offload_layers (under offload_act=1, how many of a device's layers offload; 0, the default: every layer),
offload_opt (0|1: optimizer states to host memory, the step on the CPU), fp8_param (0|1: fp8 runs keep the
compute weights in fp8 only), grad_bf16 (0|1: the gradient buffer and its data-parallel reduction in 16 bits,
Megatron-Core DDP ``grad_reduce_in_fp32=False``), dp_replicate (hybrid sharded data parallelism: the dp ranks
as dp_replicate replicas of a dp/dp_replicate-way ZeRO shard group; 1, the default, shards over all of dp).

Defaults that ``estimate`` fills (documented in docs/cost_model.md):
  tp=pp=vpp=cp=ep=1, dp = devices / (tp*pp*cp), mbs=1, recompute=none, zero=1 (distributed optimizer, the
  Megatron-Core and torchtitan default for large runs), sp=1 when tp>1, etp=tp when that placement is
  legal else 1, schedule = interleaved when vpp>1 else 1f1b, dispatcher and a2a_overlap = the framework's
  defaults (``asap.spec.framework``), layer_split = the default split of ``asap.spec.layout`` (L // (pp vpp)
  per chunk, the remainder from the middle chunks outwards).

A ``Strategy`` holds its knobs typed (``zero`` a ``Zero``, the switches bools, ``schedule`` a ``Schedule``,
``dispatcher`` a ``Dispatcher``, ``recompute`` a ``RecomputePolicy``) and prints them in the text spelling above
(``to_dict``, ``str``, ``key`` for Memory). Text and mappings are read only at the edges, by ``parse_strategy``
and ``resolve_strategy`` (docs/design.md, "The typed strategy").

The rules a strategy must keep live in one table, ``asap.spec.legality``; the knobs' names and codes (the
enums, the batch codes of recompute values) in ``asap.spec.knobs``, which both read.

Placement rules (Megatron-Core "MoE parallel folding", arXiv:2504.14960): attention layers use the grid
tp x cp x dp x pp; expert layers regroup the same tp*cp*dp devices of a stage as etp x ep x edp, so
(tp*cp*dp) must be divisible by etp*ep, and the expert-data-parallel size is edp = tp*cp*dp / (etp*ep).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Any

from asap.errors import AsapError
from asap.spec.framework import Dispatcher
from asap.spec.knobs import (BARE_CHOICES, COMPACT_NAMES, COMPACT_VALUES, INT_KEYS, KEYS, KNOB, KNOBS, OFF_BY_DEFAULT,
                             PRINTED_UNLESS, REQUIRED, SCHEDULES, TYPED, CpComm, KnobKind, RecomputePolicy, Schedule,
                             Zero, plain_value, recompute_code, recompute_label)
from asap.spec.layout import format_layer_split


def _knob_fields(cls):
    """Give the class a field for every knob of the table it does not declare (``asap.spec.knobs.KNOBS``, in the
    table's order after the declared ones), with the knob's default: a new knob is one row of the table."""
    for k in KNOBS:
        if k.name not in cls.__annotations__:
            cls.__annotations__[k.name] = Any
            setattr(cls, k.name, k.typed(k.default) if k.default is not REQUIRED else None)
    return cls


@dataclass(frozen=True)
@_knob_fields
class Strategy:
    """A complete strategy: one field per knob of ``asap.spec.knobs.KNOBS`` (declared here with their types for
    the readers and mypy, held equal to the table at import), each held typed."""

    dp: int
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    mbs: int = 1
    zero: Zero = Zero.OPTIMIZER
    sp: bool = False
    recompute: RecomputePolicy = RecomputePolicy()
    schedule: Schedule = Schedule.ONE_F_ONE_B
    dispatcher: Dispatcher = Dispatcher.ALLTOALL  # how MoE tokens reach their experts
    a2a_overlap: bool = False  # expert all-to-alls of one micro-batch hide behind another's computation
    layer_split: tuple[int, ...] = ()  # layers per pipeline chunk; () = the default split
    # host offload (asap.cost.offload): stored activations copied to host memory after each layer's forward and
    # back before its backward (Megatron-Core --cpu-offloading, MaxText's offloading remat policies, DeepSpeed
    # cpu_checkpointing); optimizer states on the host, stepped by the CPU (Megatron-Core
    # --optimizer-cpu-offload, DeepSpeed offload_optimizer, torchtitan's FSDP CPU offload, MaxText
    # optimizer_memory_host_offload)
    offload_act: bool = False
    offload_opt: bool = False
    fp8_param: bool = False  # fp8 runs: the compute weights exist only in fp8 (Megatron-Core --fp8-param-gather)
    # under offload_act=1: how many of a device's layers offload their activations (Megatron-Core
    # cpu_offloading_num_layers, Megatron-Bridge's activation offload of some layers); 0: every layer
    offload_layers: int = 0
    # 16-bit runs: gradients accumulate and reduce in the compute dtype, 2 B, instead of fp32 main grads, 4 B
    # (Megatron-Core DistributedDataParallelConfig.grad_reduce_in_fp32=False, Megatron-LM --grad-reduce-in-bf16;
    # Megatron-Bridge's performance configs set it, e.g. scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py)
    grad_bf16: bool = False
    # hybrid sharded data parallelism (HSDP): the dp ranks form dp_replicate replicas, each a ZeRO shard group of
    # dp/dp_replicate ranks (x cp), contiguous in rank order (``asap.spec.placement``); the sharded gradients are
    # all-reduced across the replicas. torchtitan ``data_parallel_replicate_degree`` with
    # ``data_parallel_shard_degree`` (FSDP2 HSDP), MaxText ``dcn_data_parallelism`` x ``ici_fsdp_parallelism``,
    # Megatron-Core ``--num-distributed-optimizer-instances``, DeepSpeed MiCS ``mics_shard_size``, MindSpore
    # ``optimizer_weight_shard_size``. Needs sharded states (zero >= 1).
    dp_replicate: int = 1
    # context parallelism's exchange (``CpComm``): p2p ring, a2a (Ulysses), allgather of K,V; Megatron-Core
    # --cp-comm-type, MindSpeed --context-parallel-algo, MaxText's all-gather context parallelism
    cp_comm: CpComm = CpComm.P2P
    # cp_comm=a2a+p2p: the inner Ulysses degree (the first of Megatron's --hierarchical-context-parallel-sizes)
    cp_a2a: int = 1
    # the loss over this many chunks of a micro-batch's tokens (MaxText ``num_vocab_tiling``,
    # maxtext/utils/vocabulary_tiling.py: a custom_vjp over jax.lax.scan keeps one chunk's logits at a time and
    # re-runs the head's forward per chunk in the backward); 1: the whole micro-batch's logits at once
    vocab_tiles: int = 1

    def __post_init__(self) -> None:
        """Hold every knob as its type: values given in their printed spelling (``zero=1``, ``sp=0``,
        ``schedule="zb"``, ``recompute="full"``, as ``parse_strategy`` returns them) become the enum, bool or
        ``RecomputePolicy``; a value of neither form is an AsapError."""
        for k, knob in TYPED.items():
            v = getattr(self, k)
            if type(v) is not knob.type:
                object.__setattr__(self, k, knob.typed(v))

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def micro_batches(self, global_batch: int) -> int:
        return global_batch // (self.dp * self.mbs)

    @property
    def edp(self) -> int:
        """Expert-data-parallel size: the replicas of each expert (Megatron-Core parallel folding)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    def to_dict(self) -> dict[str, Any]:
        """Every key in its printed spelling (``sp`` 0/1, ``zero`` 0..3, the schedule, dispatcher and recompute
        as text); ``layer_split`` is ``None`` for the default split."""
        d = {k: plain_value(getattr(self, k)) for k in KEYS
             if not (k in PRINTED_UNLESS and plain_value(getattr(self, k)) == PRINTED_UNLESS[k])}
        d["layer_split"] = format_layer_split(self.layer_split) if self.layer_split else None
        return d

    def key(self) -> str:
        """The canonical text Memory stores: the keys ``str`` prints, sorted by name (what ``canonical_text`` makes
        of ``str`` parsed again, written without that text round trip: every printed value is already in its
        canonical spelling)."""
        return ",".join(f"{k}={v}" for k, v in sorted(self._printed().items()))

    def __str__(self) -> str:
        """``key=value,...`` with every key (the layer split only when it is not the default, the offload and
        fp8_param switches only when on): copy-pasteable."""
        return ",".join(f"{k}={v}" for k, v in self._printed().items())

    def _printed(self) -> dict[str, Any]:
        """The keys ``str`` prints, in its order, in their printed spelling."""
        return {k: v for k, v in self.to_dict().items() if v is not None and not (k in OFF_BY_DEFAULT and v == 0)}


def _held_default(k) -> Any:
    return k.typed(k.default) if k.kind is not KnobKind.SPLIT else k.default


# the fields are the table's knobs, in its order, with its defaults
assert [f.name for f in fields(Strategy)] == list(KEYS), "Strategy's fields must be asap.spec.knobs.KNOBS"
assert all(f.default == _held_default(KNOB[f.name]) for f in fields(Strategy) if f.name != "dp")


def parse_strategy(text: str | dict | None, field: str = "strategy") -> dict[str, Any]:
    """Parse ``"tp=8,pp=2,recompute=full,layer_split=5/4/4/3"``, or the compact form ``"tp8 pp2 rc:full"``
    (``format_compact``; the two may be mixed), into a partial mapping of typed values."""
    if text is None or text == "":
        return {}
    if isinstance(text, dict):
        items = [(k, v) for k, v in text.items() if not (k == "layer_split" and v in (None, ""))]
    else:
        items = []
        for part in re.split(r"[,\s]+", str(text).strip()):
            if not part or part == COMPACT_DEFAULTS:
                continue
            if "=" in part and ":" not in part.split("=", 1)[0]:  # rc:custom:query_proj=device is compact
                k, v = part.split("=", 1)
                items.append((k.strip(), v.strip()))
            else:
                items.append(compact_item(part, field))
    out: dict[str, Any] = {}
    for k, v in items:
        if k not in KEYS:
            raise AsapError(f"{field}.{k}", f"unknown key (known: {', '.join(KEYS)})")
        if k in out:
            raise AsapError(f"{field}.{k}", "given twice")
        out[k] = KNOB[k].parse(v, field)
    return out


def canonical_text(partial: dict[str, Any]) -> str:
    """A partial strategy (``parse_strategy``'s mapping) as Memory's text: ``key=value`` sorted by key, the
    layer split as ``5/4/4/3``; ``"tp=2,dp=4"`` and ``"dp=4,tp=2"`` are the same text."""
    return ",".join(f"{k}={format_layer_split(v) if k == 'layer_split' else v}" for k, v in sorted(partial.items()))


def default_etp(tp: int, cp: int, dp: int, ep: int) -> int:
    """Megatron-Core's default expert TP is tp; fall back to 1 where ep*tp does not fit the stage's devices."""
    return tp if (tp * cp * dp) % (tp * ep) == 0 else 1


def complete_strategy(partial: dict[str, Any], devices: int, field: str = "strategy", framework=None) -> Strategy:
    """Fill omitted keys with the documented defaults (no model-dependent checks here); ``framework`` (an
    ``asap.spec.framework.Framework``) gives the MoE switches' defaults (Megatron's without one)."""
    p = dict(partial)
    tp, pp, cp = p.get("tp", 1), p.get("pp", 1), p.get("cp", 1)
    if "dp" not in p:
        if devices % (tp * pp * cp):
            raise AsapError(f"{field}.dp", f"devices={devices} is not divisible by tp*pp*cp={tp * pp * cp}")
        p["dp"] = devices // (tp * pp * cp)
    ep = p.get("ep", 1)
    p.setdefault("etp", default_etp(tp, cp, p["dp"], ep))
    p.setdefault("sp", 1 if tp > 1 else 0)
    pipe = getattr(framework, "pipeline_defaults", None)
    if pipe is not None and pp > 1 and "schedule" in p:  # the stack's stages per rank for the named schedule
        p.setdefault("vpp", pipe.stages_per_rank(p["schedule"]))
    p.setdefault("schedule", "interleaved" if p.get("vpp", 1) > 1 else "1f1b")
    if framework is not None:
        p.setdefault("dispatcher", framework.dispatcher.value)
        p.setdefault("a2a_overlap", int(framework.a2a_overlap))
        p.setdefault("zero", int(framework.zero_default))
        inert = KNOB["cp_comm"].inert
        assert inert is not None
        p.setdefault("cp_comm", KNOB["cp_comm"].default if inert({"cp": cp}) else framework.cp_comm)
        for key in ("sp", "schedule"):  # a default the stack does not offer: its first option
            allowed = framework.offers.get(key)
            if key not in partial and allowed is not None and p[key] not in allowed:
                p[key] = allowed[0]
    return Strategy(**p)


def non_default_keys(s: Strategy, devices: int, moe: bool = True, framework=None) -> str:
    """``key=value,...`` with only the keys whose value differs from what ``estimate`` would fill in for it
    (given the others, and the framework's defaults): the short, equally copy-pasteable spelling the human
    tables show."""
    full = {k: v for k, v in s.to_dict().items() if v is not None}
    short = {}
    for k, v in full.items():
        rest = parse_strategy({key: val for key, val in full.items() if key != k})
        try:
            filled = complete_strategy(rest, devices, framework=framework)
            if not moe:
                filled = replace(filled, etp=1)
            if getattr(filled, k) != getattr(s, k):
                short[k] = v
        except AsapError:
            short[k] = v
    return ",".join(f"{k}={v}" for k, v in short.items()) or "defaults"


def check_strategy(s: Strategy, model, train, devices: int, field: str = "strategy", framework=None) -> None:
    """Raise AsapError naming the first rule ``s`` breaks for this model, batch and device count (and, with a
    ``framework``, the first option that stack does not offer)."""
    from asap.spec.legality import first_broken_rule

    broken = first_broken_rule(s, model, train, devices, field, framework)
    if broken is not None:
        raise broken


def fit_strategy(s: Strategy, model, train, devices: int, field: str = "strategy", framework=None) -> Strategy:
    """A completed strategy made this model's (expert TP 1 for a dense model) and checked (``check_strategy``)."""
    if model.moe is None and s.etp != 1:
        s = replace(s, etp=1)
    check_strategy(s, model, train, devices, field, framework)
    return s


def resolve_strategy(text: str | dict | None, model, train, devices: int, field: str = "strategy",
                     framework=None) -> Strategy:
    """Parse, fill defaults and check: the one call ``estimate`` and ``run`` make."""
    s = complete_strategy(parse_strategy(text, field), devices, field, framework)
    return fit_strategy(s, model, train, devices, field, framework)


# The compact notation humans read (``tp8 pp16 vpp8 cp2 ep64 zero1 rc:sel dedup``): only the keys that differ
# from estimate's defaults, integer keys first then the named choices, each group in Strategy's field order.
# An integer key is its name and value run together (``tp8``, ``zero1``, ``a2a1``); any other key is
# ``name:value`` (``rc:sel``, ``split:5/4x30/3``: a run of three or more equal chunks as ``count x times``), or its bare value where that value names one key alone
# (``dedup``, ``zb``). The names, short values and bare choices are the knob table's (``asap.spec.knobs.KNOBS``).
COMPACT_DEFAULTS = "defaults"  # what a strategy with every key at its default prints as


def _int_fields() -> list[str]:
    return [f.name for f in fields(Strategy) if f.name in INT_KEYS]


def compact_order() -> list[str]:
    """The fixed order of the compact notation: integer keys, then the others, each in field order."""
    ints = _int_fields()
    return ints + [f.name for f in fields(Strategy) if f.name not in ints]


def _compact_token(k: str, v: Any) -> str:
    name = COMPACT_NAMES.get(k, k)
    if k in _int_fields():
        return f"{name}{int(v)}"
    text = runs_text(v) if isinstance(v, tuple) else str(v)
    if k in BARE_CHOICES and sum(text in vals for vals in BARE_CHOICES.values()) == 1:
        return text
    return f"{name}:{COMPACT_VALUES.get(k, {}).get(text, text)}"


def format_compact_keys(keys: dict[str, Any]) -> str:
    """The given keys (a partial strategy) in the compact notation, nothing added or dropped."""
    tokens = [_compact_token(k, keys[k]) for k in compact_order() if keys.get(k) not in (None, ())]
    return " ".join(tokens) or COMPACT_DEFAULTS


def compact_item(token: str, field: str = "strategy") -> tuple[str, Any]:
    """One compact token as ``(key, raw value)`` for ``parse_strategy`` to type and check."""
    longs = {v: k for k, v in COMPACT_NAMES.items()}
    if ":" in token:
        name, value = token.split(":", 1)
        key = longs.get(name, name)
        value = {short: full for full, short in COMPACT_VALUES.get(key, {}).items()}.get(value, value)
        return key, expand_runs(value, f"{field}.{key}") if key == "layer_split" else value
    for key, values in BARE_CHOICES.items():
        if token in values:
            return key, token
    names = sorted([(COMPACT_NAMES.get(k, k), k) for k in _int_fields()] + [(k, k) for k in _int_fields()],
                   key=lambda nk: -len(nk[0]))
    for name, key in names:
        if token.startswith(name) and token[len(name):].isdigit():
            return key, token[len(name):]
    raise AsapError(field, f"'{token}' is neither key=value nor a compact token such as tp8, zero1, rc:sel, "
                           f"split:5/4/4/3 or dedup (keys: {', '.join(compact_order())})")


def format_compact(s: Strategy, devices: int, moe: bool = True, framework=None) -> str:
    """The compact notation of ``s``: the fewest keys (in the fixed order) from which ``complete_strategy``
    with these devices and framework gives ``s`` back; ``parse_strategy`` reads it."""
    full = {f.name: getattr(s, f.name) for f in fields(Strategy)}

    def completes(keys: dict[str, Any]) -> bool:
        try:
            filled = complete_strategy(parse_strategy(_spelled(keys)), devices, framework=framework)
        except AsapError:
            return False
        return (replace(filled, etp=1) if not moe else filled) == (replace(s, etp=1) if not moe else s)

    keep = {k: v for k, v in full.items() if not completes({kk: vv for kk, vv in full.items() if kk != k})}
    for k in compact_order():  # one key left out can be implied while two together are not: add back in order
        if completes(keep):
            break
        keep[k] = full[k]
    return format_compact_keys(keep)


def _spelled(keys: dict[str, Any]) -> dict[str, Any]:
    return {k: (format_layer_split(v) if v else None) if k == "layer_split" else plain_value(v) for k, v in keys.items()}


def runs_text(split: tuple[int, ...]) -> str:
    """A layer split with its runs of three or more equal chunks as ``NxK``: ``5/4x30/3``."""
    parts, i = [], 0
    while i < len(split):
        j = i
        while j < len(split) and split[j] == split[i]:
            j += 1
        parts += [f"{split[i]}x{j - i}"] if j - i >= 3 else [str(split[i])] * (j - i)
        i = j
    return "/".join(parts)


def expand_runs(text: str, field: str) -> str:
    """``5/4x3/3`` as ``5/4/4/4/3`` (``parse_layer_split`` checks the numbers)."""
    out = []
    for part in text.split("/"):
        count, sep, times = part.partition("x")
        if sep and not times.isdigit():
            raise AsapError(field, f"'{part}' is not N or NxK (K chunks of N layers)")
        out += [count] * (int(times) if times else 1)
    return "/".join(out)


# the knobs' vocabulary, read from here by older callers (defined in ``asap.spec.knobs``)
__all__ = ["Strategy", "parse_strategy", "canonical_text", "default_etp", "complete_strategy", "non_default_keys",
           "check_strategy", "fit_strategy", "resolve_strategy", "compact_order", "format_compact_keys",
           "compact_item", "format_compact", "runs_text", "expand_runs", "COMPACT_DEFAULTS", "KEYS", "INT_KEYS",
           "SCHEDULES", "CpComm", "Dispatcher", "RecomputePolicy", "Schedule", "Zero", "plain_value",
           "recompute_code", "recompute_label"]
