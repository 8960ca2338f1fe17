"""The rules a parallel strategy must keep, in one table.

Each rule names the strategy key it blames, the keys it reads, a vectorized test over columns of integer
arrays (a single strategy is a batch of one; ``recompute`` and ``schedule`` are ``Recompute`` / ``Schedule``
codes) and the one-line problem it reports. ``check_strategy`` raises the first broken rule's message, the
planner's ``legal_mask`` ANDs them all, and ``enumerate_space`` applies each rule as soon as the columns it
reads exist, so the three can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from asap.errors import AsapError
from asap.spec.layout import check_layer_split
from asap.spec.knobs import KEYS, CpComm, RecomputePolicy, Schedule, plain_value

Cols = Mapping[str, np.ndarray]
PIPELINE_SCHEDULES_WITH_CHUNKS = (Schedule.INTERLEAVED, Schedule.ZB)


def _micro_batches(c: Cols, train) -> np.ndarray:
    return train.global_batch // np.maximum(c["dp"] * c["mbs"], 1)


def _kv_ok(model, tp):
    """tp divides the KV heads, or is a multiple of them (each KV head is replicated over tp / kv ranks)."""
    if model.mla is not None:
        return np.ones(np.shape(tp), dtype=bool)
    kv = model.num_kv_heads
    return (kv % tp == 0) | (tp % kv == 0)


@dataclass(frozen=True)
class Rule:
    key: str  # the strategy key the message blames
    reads: tuple[str, ...]  # the columns the test needs
    # (cols, model, train, devices) -> bool per row, or one bool for the whole batch
    ok: Callable[[Cols, Any, Any, int], np.ndarray | bool]
    problem: Callable[[Any, Any, Any, int], str]  # the one-line problem for a scalar strategy (a Strategy)


def _a2a_heads_ok(model, tp, cp):
    """Ulysses (cp_comm=a2a) hands each cp rank heads/(tp cp) query heads and as many KV heads: TE's
    ``AttnFuncWithCPAndQKVOA2A`` asserts that cp divides both head counts of its tp rank (no KV replication)."""
    kv = model.num_attention_heads if model.mla is not None else model.num_kv_heads
    return (model.num_attention_heads % (tp * cp) == 0) & (kv % (tp * cp) == 0)


def _moe(model) -> bool:
    return model.moe is not None


RULES: tuple[Rule, ...] = (
    Rule("cp_comm", ("cp_comm", "tp", "cp"),
         lambda c, m, t, n: (c["cp_comm"] != CpComm.A2A.code) | (c["cp"] == 1) | _a2a_heads_ok(m, c["tp"], c["cp"]),
         lambda s, m, t, n: f"cp_comm=a2a with tp*cp={s.tp * s.cp} not dividing num_attention_heads="
                            f"{m.num_attention_heads} and the KV heads ({m.num_kv_heads}): Ulysses splits heads"),
    Rule("dp", ("dp", "tp", "pp", "cp"), lambda c, m, t, n: c["dp"] * c["tp"] * c["pp"] * c["cp"] == n,
         lambda s, m, t, n: f"dp*tp*pp*cp = {s.dp}*{s.tp}*{s.pp}*{s.cp} = {s.devices} but the cluster has {n} devices"),
    Rule("tp", ("tp",), lambda c, m, t, n: m.num_attention_heads % c["tp"] == 0,
         lambda s, m, t, n: f"tp={s.tp} does not divide num_attention_heads={m.num_attention_heads}"),
    Rule("tp", ("tp",), lambda c, m, t, n: _kv_ok(m, c["tp"]),
         lambda s, m, t, n: f"tp={s.tp} neither divides nor is a multiple of num_kv_heads={m.num_kv_heads} "
                            "(query groups)"),
    Rule("tp", ("tp",), lambda c, m, t, n: m.ffn_hidden_size % c["tp"] == 0,
         lambda s, m, t, n: f"tp={s.tp} does not divide ffn_hidden_size={m.ffn_hidden_size}"),
    Rule("sp", ("sp", "tp"), lambda c, m, t, n: ~((c["sp"] == 1) & (c["tp"] == 1)),
         lambda s, m, t, n: "sequence parallelism requires tp > 1"),
    Rule("pp", ("pp",), lambda c, m, t, n: c["pp"] <= m.num_layers,
         lambda s, m, t, n: f"pp={s.pp} exceeds num_layers={m.num_layers}"),
    Rule("vpp", ("vpp", "pp"), lambda c, m, t, n: (c["vpp"] == 1) | (c["pp"] > 1),
         lambda s, m, t, n: "virtual pipeline stages require pp > 1"),
    Rule("schedule", ("vpp", "schedule"),
         lambda c, m, t, n: (c["vpp"] == 1) | np.isin(c["schedule"], PIPELINE_SCHEDULES_WITH_CHUNKS),
         lambda s, m, t, n: f"vpp={s.vpp} needs schedule=interleaved (or zb), got {s.schedule}"),
    Rule("vpp", ("vpp", "pp"), lambda c, m, t, n: c["pp"] * c["vpp"] <= m.num_layers + 2,
         lambda s, m, t, n: f"pp*vpp={s.pp * s.vpp} virtual stages exceed num_layers+2={m.num_layers + 2} "
                            "(each needs a layer; the embedding and the loss may count as one each)"),
    Rule("schedule", ("vpp", "schedule"), lambda c, m, t, n: (c["vpp"] > 1) | (c["schedule"] != Schedule.INTERLEAVED),
         lambda s, m, t, n: "interleaved needs vpp > 1"),
    Rule("mbs", ("dp", "mbs"), lambda c, m, t, n: t.global_batch % (c["dp"] * c["mbs"]) == 0,
         lambda s, m, t, n: f"global batch {t.global_batch} is not divisible by dp*mbs = {s.dp}*{s.mbs}"),
    Rule("vpp", ("dp", "mbs", "pp", "vpp"),
         lambda c, m, t, n: ~((c["pp"] > 1) & (c["vpp"] > 1) & (_micro_batches(c, t) % c["pp"] != 0)),
         lambda s, m, t, n: f"the interleaved schedule needs micro-batches ({s.micro_batches(t.global_batch)}) "
                            f"divisible by pp={s.pp}"),
    Rule("cp", ("cp",), lambda c, m, t, n: (c["cp"] == 1) | (t.seq_len % (2 * c["cp"]) == 0),
         lambda s, m, t, n: f"seq_len={t.seq_len} is not divisible by 2*cp={2 * s.cp} (load-balanced causal split)"),
    Rule("ep", ("ep",), lambda c, m, t, n: (c["ep"] == 1) | _moe(m),
         lambda s, m, t, n: f"ep={s.ep} but {m.name} has no experts"),
    Rule("etp", ("etp",), lambda c, m, t, n: (c["etp"] == 1) | _moe(m),
         lambda s, m, t, n: f"etp={s.etp} but {m.name} has no experts"),
    Rule("ep", ("ep",), lambda c, m, t, n: (not _moe(m)) or m.moe.num_experts % c["ep"] == 0,
         lambda s, m, t, n: f"ep={s.ep} does not divide num_experts={m.moe.num_experts}"),
    Rule("ep", ("ep", "etp", "tp", "cp", "dp"),
         lambda c, m, t, n: (c["tp"] * c["cp"] * c["dp"]) % (c["etp"] * c["ep"]) == 0,
         lambda s, m, t, n: f"etp*ep = {s.etp}*{s.ep} does not divide tp*cp*dp = {s.tp * s.cp * s.dp} "
                            "(the devices of a pipeline stage; dp counts every data-parallel device, expert-parallel "
                            f"ones too: {s.ep}-way experts over {s.dp} data replicas is dp={s.dp * s.ep},ep={s.ep})"),
    Rule("etp", ("etp",), lambda c, m, t, n: (not _moe(m)) or m.moe.expert_ffn_hidden_size % c["etp"] == 0,
         lambda s, m, t, n: f"etp={s.etp} does not divide expert_ffn_hidden_size={m.moe.expert_ffn_hidden_size}"),
    Rule("fp8_param", ("fp8_param",), lambda c, m, t, n: (c["fp8_param"] == 0) | (t.precision == "fp8"),
         lambda s, m, t, n: f"fp8_param=1 keeps the weights in fp8, which needs --precision fp8 (got {t.precision})"),
    Rule("grad_bf16", ("grad_bf16",), lambda c, m, t, n: (c["grad_bf16"] == 0) | (t.precision != "fp32"),
         lambda s, m, t, n: "grad_bf16=1 reduces the gradients in 16 bits, which needs a 16-bit --precision "
                            f"(got {t.precision})"),
    Rule("offload_layers", ("offload_layers", "offload_act"),
         lambda c, m, t, n: (c["offload_layers"] == 0) | (c["offload_act"] == 1),
         lambda s, m, t, n: f"offload_layers={s.offload_layers} without offload_act=1 (the count of layers that "
                            "offload their activations)"),
    Rule("offload_layers", ("offload_layers",), lambda c, m, t, n: c["offload_layers"] <= m.num_layers,
         lambda s, m, t, n: f"offload_layers={s.offload_layers} is more than the model's {m.num_layers} layers"),
    # hybrid sharding (HSDP): dp_replicate replicas of a dp/dp_replicate-way shard group; only sharded states
    # have a shard group (torchtitan's DDP is dp_replicate alone; Megatron-Core's instances are distributed
    # optimizers), and the expert data-parallel group splits the same way (Megatron-Core parallel_state:
    # "Expert data parallel size should be divisible by partial DistOpt shard factor")
    Rule("dp_replicate", ("dp_replicate", "dp"), lambda c, m, t, n: c["dp"] % c["dp_replicate"] == 0,
         lambda s, m, t, n: f"dp_replicate={s.dp_replicate} does not divide dp={s.dp} (the shard group is "
                            "dp/dp_replicate ranks)"),
    Rule("dp_replicate", ("dp_replicate", "zero"), lambda c, m, t, n: (c["dp_replicate"] == 1) | (c["zero"] >= 1),
         lambda s, m, t, n: f"dp_replicate={s.dp_replicate} with zero=0 (hybrid sharding replicates a ZeRO shard "
                            "group: it needs zero >= 1; zero 0 replicates over all of dp already)"),
    Rule("dp_replicate", ("dp_replicate", "dp", "tp", "cp", "ep", "etp"),
         lambda c, m, t, n: (not _moe(m)) or ((c["tp"] * c["cp"] * c["dp"]) // np.maximum(c["etp"] * c["ep"], 1))
         % c["dp_replicate"] == 0,
         lambda s, m, t, n: f"dp_replicate={s.dp_replicate} does not divide the expert data-parallel size "
                            f"edp={s.edp} (the experts' shard group is edp/dp_replicate ranks)"),
    Rule("offload_opt", ("offload_opt", "zero"), lambda c, m, t, n: (c["offload_opt"] == 0) | (c["zero"] >= 1),
         lambda s, m, t, n: "offload_opt=1 steps each rank's optimizer shard on its host, which needs zero >= 1 "
                            "(Megatron-Core's --optimizer-cpu-offload runs under the distributed optimizer)"),
)


def _ok(rule: Rule, cols: Cols, model, train, devices: int) -> np.ndarray:
    n = len(cols["tp"])
    return np.broadcast_to(np.asarray(rule.ok(cols, model, train, devices), dtype=bool), (n,))


def legal_rows(cols: Cols, model, train, devices: int, only_new: tuple[str, ...] | None = None) -> np.ndarray:
    """AND of every rule whose columns are present (with ``only_new``: only rules reading one of those keys)."""
    n = len(cols["tp"])
    keep = np.ones(n, dtype=bool)
    for rule in RULES:
        if not set(rule.reads) <= set(cols):
            continue
        if only_new is not None and not set(rule.reads) & set(only_new):
            continue
        keep &= _ok(rule, cols, model, train, devices)
    return keep


def strategy_columns(s) -> dict[str, np.ndarray]:
    """One strategy (a ``Strategy``; this module reads its knobs, not the class) as the columns the rules read."""
    cols = {k: np.array([getattr(s, k)], dtype=np.int64) for k in KEYS
            if k not in ("recompute", "schedule", "dispatcher", "layer_split", "cp_comm")}
    cols["cp_comm"] = np.array([s.cp_comm.code], dtype=np.int64)
    cols["recompute"] = np.array([s.recompute.code], dtype=np.int64)
    cols["schedule"] = np.array([int(s.schedule)], dtype=np.int64)
    cols["dispatcher"] = np.array([s.dispatcher.code], dtype=np.int64)
    return cols


def unoffered_modules(recompute: RecomputePolicy, framework) -> list[str]:
    """The recompute modules of a module-set value that the stack does not offer ([] for none/selective/full)."""
    if framework.recompute_modules is None:
        return []
    return [m for m in recompute.module_labels if m not in framework.recompute_modules]


def _modules_error(recompute: RecomputePolicy, framework, field: str) -> AsapError | None:
    missing = unoffered_modules(recompute, framework)
    if not missing:
        return None
    offered = ", ".join(framework.recompute_modules) or "none"
    return AsapError(f"{field}.recompute", f"recompute module {missing[0]} is not available in {framework.name} "
                                           f"(its recompute modules: {offered})")


def check_offered(values: Mapping[str, Any], framework, field: str = "fix") -> None:
    """Raise AsapError for the first pinned value the framework does not offer (``plan --fix``)."""
    for key, allowed in framework.offers.items():
        if key in values and values[key] not in allowed:
            raise AsapError(f"{field}.{key}", f"{key}={values[key]} is not available in {framework.name} "
                                              f"(offers {', '.join(map(str, allowed))})")
    if "recompute" in values and (err := _modules_error(RecomputePolicy.parse(values["recompute"]), framework,
                                                         field)) is not None:
        raise err


def first_broken_rule(s, model, train, devices: int, field: str = "strategy",
                      framework=None) -> AsapError | None:
    cols = strategy_columns(s)
    for rule in RULES:
        if not _ok(rule, cols, model, train, devices)[0]:
            return AsapError(f"{field}.{rule.key}", rule.problem(s, model, train, devices))
    if framework is not None:
        if s.pp > 1 and s.offload_act and not framework.offload_act_with_pp:
            return AsapError(f"{field}.offload_act", f"offload_act=1 with pp={s.pp} is not available in "
                                                     f"{framework.name} (no CPU offloading with a pipeline)")
        if s.pp > 1 and s.zero > framework.max_zero_with_pp:
            return AsapError(f"{field}.zero", f"zero={s.zero} with pp={s.pp} is not available in {framework.name} "
                                              f"(at most zero={framework.max_zero_with_pp} with a pipeline)")
        if s.dp_replicate > 1 and int(s.zero) not in framework.hsdp_zero:
            offered = (f"hybrid sharding with zero {' or '.join(map(str, framework.hsdp_zero))}"
                       if framework.hsdp_zero else "no hybrid sharding")
            return AsapError(f"{field}.dp_replicate", f"dp_replicate={s.dp_replicate} with zero={int(s.zero)} is not "
                                                      f"available in {framework.name} ({offered})")
        for key, allowed in framework.offers.items():
            value = plain_value(getattr(s, key))
            if value not in allowed and not (key == "cp_comm" and s.cp == 1):  # cp=1 exchanges nothing
                return AsapError(f"{field}.{key}", f"{key}={value} is not available in {framework.name} "
                                                   f"(offers {', '.join(map(str, allowed))})")
        if (err := _modules_error(s.recompute, framework, field)) is not None:
            return err
    if s.layer_split:
        try:
            check_layer_split(s.layer_split, model.num_layers, s.pp * s.vpp, f"{field}.layer_split")
        except AsapError as e:
            return e
    return None
