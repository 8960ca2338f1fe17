"""Parallel strategies: parse ``key=value`` lists, fill defaults, check legality.

Keys (design.md): dp, tp, pp, vpp, cp, ep, etp, mbs, recompute (none|selective|full), zero (0|1|2|3),
sp (0|1), schedule (1f1b|interleaved|zb|gpipe).

Defaults that ``estimate`` fills (documented in docs/cost_model.md):
  tp=pp=vpp=cp=ep=1, dp = devices / (tp*pp*cp), mbs=1, recompute=none, zero=1 (distributed optimizer, the
  Megatron-Core and torchtitan default for large runs), sp=1 when tp>1, etp=tp when that placement is
  legal else 1, schedule = interleaved when vpp>1 else 1f1b.

Layer split: Megatron-Core places uneven layer counts on the first and last stages
(--decoder-first/last-pipeline-num-layers, --account-for-embedding/loss-in-pipeline-split), so layers need not
divide pp*vpp; every (virtual) stage needs at least one layer, the embedding and the loss counting as one each.

Placement rules (Megatron-Core "MoE parallel folding", arXiv:2504.14960): attention layers use the grid
tp x cp x dp x pp; expert layers regroup the same tp*cp*dp devices of a stage as etp x ep x edp, so
(tp*cp*dp) must be divisible by etp*ep, and the expert-data-parallel size is edp = tp*cp*dp / (etp*ep).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from asap.errors import AsapError

INT_KEYS = ("dp", "tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "zero", "sp")
RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("1f1b", "interleaved", "zb", "gpipe")
KEYS = INT_KEYS + ("recompute", "schedule")


@dataclass(frozen=True)
class Strategy:
    dp: int
    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    mbs: int = 1
    recompute: str = "none"
    zero: int = 1
    sp: int = 0
    schedule: str = "1f1b"

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
        return asdict(self)

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.to_dict().items())


def parse_strategy(text: str | dict | None, field: str = "strategy") -> dict[str, Any]:
    """Parse ``"tp=8,pp=2,recompute=full"`` into a partial mapping of typed values."""
    if text is None or text == "":
        return {}
    if isinstance(text, dict):
        items = list(text.items())
    else:
        items = []
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise AsapError(field, f"'{part}' is not key=value (keys: {', '.join(KEYS)})")
            k, v = part.split("=", 1)
            items.append((k.strip(), v.strip()))
    out: dict[str, Any] = {}
    for k, v in items:
        if k not in KEYS:
            raise AsapError(f"{field}.{k}", f"unknown key (known: {', '.join(KEYS)})")
        if k in out:
            raise AsapError(f"{field}.{k}", "given twice")
        if k in INT_KEYS:
            try:
                iv = int(v)
                if isinstance(v, float) and v != iv:
                    raise ValueError
            except (TypeError, ValueError):
                raise AsapError(f"{field}.{k}", f"must be an integer, got {v!r}") from None
            if k == "zero" and iv not in (0, 1, 2, 3):
                raise AsapError(f"{field}.zero", f"must be 0, 1, 2 or 3, got {iv}")
            elif k == "sp" and iv not in (0, 1):
                raise AsapError(f"{field}.sp", f"must be 0 or 1, got {iv}")
            elif k not in ("zero", "sp") and iv < 1:
                raise AsapError(f"{field}.{k}", f"must be >= 1, got {iv}")
            out[k] = iv
        elif k == "recompute":
            if str(v) not in RECOMPUTE:
                raise AsapError(f"{field}.recompute", f"must be one of {', '.join(RECOMPUTE)}, got {v!r}")
            out[k] = str(v)
        elif k == "schedule":
            if str(v) not in SCHEDULES:
                raise AsapError(f"{field}.schedule", f"must be one of {', '.join(SCHEDULES)}, got {v!r}")
            out[k] = str(v)
    return out


def default_etp(tp: int, cp: int, dp: int, ep: int) -> int:
    """Megatron-Core's default expert TP is tp; fall back to 1 where ep*tp does not fit the stage's devices."""
    return tp if (tp * cp * dp) % (tp * ep) == 0 else 1


def complete_strategy(partial: dict[str, Any], devices: int, field: str = "strategy") -> Strategy:
    """Fill omitted keys with the documented defaults (no model-dependent checks here)."""
    p = dict(partial)
    tp, pp, cp = p.get("tp", 1), p.get("pp", 1), p.get("cp", 1)
    if "dp" not in p:
        if devices % (tp * pp * cp):
            raise AsapError(f"{field}.dp", f"devices={devices} is not divisible by tp*pp*cp={tp * pp * cp}")
        p["dp"] = devices // (tp * pp * cp)
    ep = p.get("ep", 1)
    p.setdefault("etp", default_etp(tp, cp, p["dp"], ep))
    p.setdefault("sp", 1 if tp > 1 else 0)
    p.setdefault("schedule", "interleaved" if p.get("vpp", 1) > 1 else "1f1b")
    return Strategy(**p)


def check_strategy(s: Strategy, model, train, devices: int, field: str = "strategy") -> None:
    """Raise AsapError naming the first rule ``s`` breaks for this model, batch and device count."""
    if s.devices != devices:
        raise AsapError(f"{field}.dp", f"dp*tp*pp*cp = {s.dp}*{s.tp}*{s.pp}*{s.cp} = {s.devices} but the cluster has {devices} devices")
    if model.num_attention_heads % s.tp:
        raise AsapError(f"{field}.tp", f"tp={s.tp} does not divide num_attention_heads={model.num_attention_heads}")
    if model.mla is None and model.num_kv_heads % s.tp:
        raise AsapError(f"{field}.tp", f"tp={s.tp} does not divide num_kv_heads={model.num_kv_heads} (query groups)")
    if model.ffn_hidden_size % s.tp:
        raise AsapError(f"{field}.tp", f"tp={s.tp} does not divide ffn_hidden_size={model.ffn_hidden_size}")
    if s.sp and s.tp == 1:
        raise AsapError(f"{field}.sp", "sequence parallelism requires tp > 1")
    if s.pp > model.num_layers:
        raise AsapError(f"{field}.pp", f"pp={s.pp} exceeds num_layers={model.num_layers}")
    if s.vpp > 1:
        if s.pp == 1:
            raise AsapError(f"{field}.vpp", "virtual pipeline stages require pp > 1")
        if s.schedule not in ("interleaved", "zb"):
            raise AsapError(f"{field}.schedule", f"vpp={s.vpp} needs schedule=interleaved, got {s.schedule}")
        if s.pp * s.vpp > model.num_layers + 2:
            raise AsapError(f"{field}.vpp", f"pp*vpp={s.pp * s.vpp} virtual stages exceed num_layers+2={model.num_layers + 2} "
                                           "(each needs a layer; the embedding and the loss may count as one each)")
    elif s.schedule == "interleaved":
        raise AsapError(f"{field}.schedule", "interleaved needs vpp > 1")
    if train.global_batch % (s.dp * s.mbs):
        raise AsapError(f"{field}.mbs", f"global batch {train.global_batch} is not divisible by dp*mbs = {s.dp}*{s.mbs}")
    m = s.micro_batches(train.global_batch)
    if s.pp > 1 and s.vpp > 1 and m % s.pp:
        raise AsapError(f"{field}.vpp", f"the interleaved schedule needs micro-batches ({m}) divisible by pp={s.pp}")
    if s.cp > 1 and train.seq_len % (2 * s.cp):
        raise AsapError(f"{field}.cp", f"seq_len={train.seq_len} is not divisible by 2*cp={2 * s.cp} (load-balanced causal split)")
    if model.moe is None:
        if s.ep > 1:
            raise AsapError(f"{field}.ep", f"ep={s.ep} but {model.name} has no experts")
    else:
        e = model.moe.num_experts
        if e % s.ep:
            raise AsapError(f"{field}.ep", f"ep={s.ep} does not divide num_experts={e}")
        if (s.tp * s.cp * s.dp) % (s.etp * s.ep):
            raise AsapError(f"{field}.ep", f"etp*ep = {s.etp}*{s.ep} does not divide tp*cp*dp = {s.tp * s.cp * s.dp} (the devices of a pipeline stage)")
        if model.moe.expert_ffn_hidden_size % s.etp:
            raise AsapError(f"{field}.etp", f"etp={s.etp} does not divide expert_ffn_hidden_size={model.moe.expert_ffn_hidden_size}")
    if s.etp > 1 and model.moe is None:
        raise AsapError(f"{field}.etp", f"etp={s.etp} but {model.name} has no experts")


def resolve_strategy(text: str | dict | None, model, train, devices: int, field: str = "strategy") -> Strategy:
    """Parse, fill defaults and check: the one call ``estimate`` and ``run`` make."""
    s = complete_strategy(parse_strategy(text, field), devices, field)
    if model.moe is None and s.etp != 1:
        s = replace(s, etp=1)
    check_strategy(s, model, train, devices, field)
    return s
