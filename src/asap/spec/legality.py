"""The rules a parallel strategy must keep, in one table.

Each rule (``Rule``, the one shape this table and the stacks' table ``asap.spec.stack_rules`` share) names
the strategy key it blames, the keys it reads, a vectorized test over columns of integer arrays and a
``RuleJob`` (the model, train spec, devices, domains and stack; a single strategy is a batch of one, coded by
``asap.spec.knobs.strategy_columns``; ``recompute`` and ``schedule`` are ``Recompute`` / ``Schedule`` codes)
and the one-line problem it reports. ``check_strategy`` raises the first broken rule's message, the planner's
``legal_mask`` ANDs them all, and ``enumerate_space`` applies each rule as soon as the columns it reads exist,
so the three can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, cast

import numpy as np

from asap.errors import AsapError
from asap.spec.layout import check_layer_split
from asap.spec.knobs import KNOB, CpComm, RecomputePolicy, Schedule, plain_value, strategy_columns

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
class RuleJob:
    """What a rule reads besides the strategy: the model, the training spec, the devices, how many scale-up
    domains (TPU slices, NVLink nodes) they span and the stack (the planner's space builds it from a device
    count; ``of`` from a whole ``asap.spec.job.Job``). ``framework`` is None where no stack is chosen."""

    model: Any
    train: Any
    devices: int
    domains: int = 1
    framework: Any = None

    @classmethod
    def of(cls, job) -> "RuleJob":
        return cls(job.model, job.train, job.devices, job.cluster.topology.num_domains, job.framework)


@dataclass(frozen=True)
class Rule:
    """One rule, the one shape of both tables (this one and ``asap.spec.stack_rules``)."""

    key: str  # the strategy key (or "precision", "model") the message blames
    reads: tuple[str, ...]  # the columns the test needs
    ok: Callable[[Cols, RuleJob], Any]  # bool per row, or one bool for the whole batch
    problem: Callable[[Any, RuleJob], str]  # the one-line problem for one strategy (a ``Strategy``)


def _a2a_heads_ok(model, tp, cp):
    """Ulysses (cp_comm=a2a) hands each cp rank heads/(tp cp) query heads and as many KV heads: TE's
    ``AttnFuncWithCPAndQKVOA2A`` asserts that cp divides both head counts of its tp rank (no KV replication)."""
    kv = model.num_attention_heads if model.mla is not None else model.num_kv_heads
    return (model.num_attention_heads % (tp * cp) == 0) & (kv % (tp * cp) == 0)


def _moe(model) -> bool:
    return model.moe is not None


_NO_EXCHANGE = cast(Callable[[Cols], Any], KNOB["cp_comm"].inert)  # cp=1: no context-parallel exchange


RULES: tuple[Rule, ...] = (
    Rule("cp_comm", ("cp_comm", "tp", "cp"),
         lambda c, j: (c["cp_comm"] != CpComm.A2A.code) | _NO_EXCHANGE(c) | _a2a_heads_ok(j.model, c["tp"], c["cp"]),
         lambda s, j: f"cp_comm=a2a with tp*cp={s.tp * s.cp} not dividing num_attention_heads="
                            f"{j.model.num_attention_heads} and the KV heads ({j.model.num_kv_heads}): Ulysses splits heads"),
    # hierarchical CP (Megatron-Core a2a+p2p): np.prod(hierarchical_context_parallel_sizes) == cp (parallel_state),
    # the inner Ulysses group splitting heads as a2a does (TE asserts it per group)
    Rule("cp_a2a", ("cp_a2a", "cp_comm", "cp"),
         lambda c, j: (c["cp_a2a"] == 1) | ((c["cp_comm"] == CpComm.A2A_P2P.code) & (c["cp"] % c["cp_a2a"] == 0)),
         lambda s, j: f"cp_a2a={s.cp_a2a} needs cp_comm=a2a+p2p and to divide cp={s.cp} (the ring runs over cp / cp_a2a)"),
    Rule("cp_comm", ("cp_comm", "cp_a2a", "tp", "cp"),
         lambda c, j: (c["cp_comm"] != CpComm.A2A_P2P.code) | _NO_EXCHANGE(c)
         | ((c["cp_a2a"] > 1) & _a2a_heads_ok(j.model, c["tp"], c["cp_a2a"])),
         lambda s, j: f"cp_comm=a2a+p2p with cp_a2a={s.cp_a2a}: needs cp_a2a > 1 with tp*cp_a2a dividing "
                            f"num_attention_heads={j.model.num_attention_heads} and the KV heads ({j.model.num_kv_heads})"),
    Rule("dp", ("dp", "tp", "pp", "cp"), lambda c, j: c["dp"] * c["tp"] * c["pp"] * c["cp"] == j.devices,
         lambda s, j: f"dp*tp*pp*cp = {s.dp}*{s.tp}*{s.pp}*{s.cp} = {s.devices} but the cluster has {j.devices} devices"),
    Rule("tp", ("tp",), lambda c, j: j.model.num_attention_heads % c["tp"] == 0,
         lambda s, j: f"tp={s.tp} does not divide num_attention_heads={j.model.num_attention_heads}"),
    Rule("tp", ("tp",), lambda c, j: _kv_ok(j.model, c["tp"]),
         lambda s, j: f"tp={s.tp} neither divides nor is a multiple of num_kv_heads={j.model.num_kv_heads} "
                            "(query groups)"),
    Rule("tp", ("tp",), lambda c, j: j.model.ffn_hidden_size % c["tp"] == 0,
         lambda s, j: f"tp={s.tp} does not divide ffn_hidden_size={j.model.ffn_hidden_size}"),
    Rule("sp", ("sp", "tp"), lambda c, j: ~((c["sp"] == 1) & (c["tp"] == 1)),
         lambda s, j: "sequence parallelism requires tp > 1"),
    Rule("pp", ("pp",), lambda c, j: c["pp"] <= j.model.num_layers,
         lambda s, j: f"pp={s.pp} exceeds num_layers={j.model.num_layers}"),
    Rule("vpp", ("vpp", "pp"), lambda c, j: (c["vpp"] == 1) | (c["pp"] > 1),
         lambda s, j: "virtual pipeline stages require pp > 1"),
    Rule("schedule", ("vpp", "schedule"),
         lambda c, j: (c["vpp"] == 1) | np.isin(c["schedule"], PIPELINE_SCHEDULES_WITH_CHUNKS),
         lambda s, j: f"vpp={s.vpp} needs schedule=interleaved (or zb), got {s.schedule}"),
    Rule("vpp", ("vpp", "pp"), lambda c, j: c["pp"] * c["vpp"] <= j.model.num_layers + 2,
         lambda s, j: f"pp*vpp={s.pp * s.vpp} virtual stages exceed num_layers+2={j.model.num_layers + 2} "
                            "(each needs a layer; the embedding and the loss may count as one each)"),
    Rule("schedule", ("vpp", "schedule"), lambda c, j: (c["vpp"] > 1) | (c["schedule"] != Schedule.INTERLEAVED),
         lambda s, j: "interleaved needs vpp > 1"),
    Rule("mbs", ("dp", "mbs"), lambda c, j: j.train.global_batch % (c["dp"] * c["mbs"]) == 0,
         lambda s, j: f"global batch {j.train.global_batch} is not divisible by dp*mbs = {s.dp}*{s.mbs}"),
    Rule("vpp", ("dp", "mbs", "pp", "vpp"),
         lambda c, j: ~((c["pp"] > 1) & (c["vpp"] > 1) & (_micro_batches(c, j.train) % c["pp"] != 0)),
         lambda s, j: f"the interleaved schedule needs micro-batches ({s.micro_batches(j.train.global_batch)}) "
                            f"divisible by pp={s.pp}"),
    Rule("cp", ("cp",), lambda c, j: (c["cp"] == 1) | (j.train.seq_len % (2 * c["cp"]) == 0),
         lambda s, j: f"seq_len={j.train.seq_len} is not divisible by 2*cp={2 * s.cp} (load-balanced causal split)"),
    Rule("ep", ("ep",), lambda c, j: (c["ep"] == 1) | _moe(j.model),
         lambda s, j: f"ep={s.ep} but {j.model.name} has no experts"),
    Rule("etp", ("etp",), lambda c, j: (c["etp"] == 1) | _moe(j.model),
         lambda s, j: f"etp={s.etp} but {j.model.name} has no experts"),
    Rule("ep", ("ep",), lambda c, j: (not _moe(j.model)) or j.model.moe.num_experts % c["ep"] == 0,
         lambda s, j: f"ep={s.ep} does not divide num_experts={j.model.moe.num_experts}"),
    Rule("ep", ("ep", "etp", "tp", "cp", "dp"),
         lambda c, j: (c["tp"] * c["cp"] * c["dp"]) % (c["etp"] * c["ep"]) == 0,
         lambda s, j: f"etp*ep = {s.etp}*{s.ep} does not divide tp*cp*dp = {s.tp * s.cp * s.dp} "
                            "(the devices of a pipeline stage; dp counts every data-parallel device, expert-parallel "
                            f"ones too: {s.ep}-way experts over {s.dp} data replicas is dp={s.dp * s.ep},ep={s.ep})"),
    Rule("etp", ("etp",), lambda c, j: (not _moe(j.model)) or j.model.moe.expert_ffn_hidden_size % c["etp"] == 0,
         lambda s, j: f"etp={s.etp} does not divide expert_ffn_hidden_size={j.model.moe.expert_ffn_hidden_size}"),
    Rule("fp8_param", ("fp8_param",), lambda c, j: (c["fp8_param"] == 0) | (j.train.precision == "fp8"),
         lambda s, j: f"fp8_param=1 keeps the weights in fp8, which needs --precision fp8 (got {j.train.precision})"),
    Rule("grad_bf16", ("grad_bf16",), lambda c, j: (c["grad_bf16"] == 0) | (j.train.precision != "fp32"),
         lambda s, j: "grad_bf16=1 reduces the gradients in 16 bits, which needs a 16-bit --precision "
                            f"(got {j.train.precision})"),
    Rule("offload_layers", ("offload_layers", "offload_act"),
         lambda c, j: (c["offload_layers"] == 0) | (c["offload_act"] == 1),
         lambda s, j: f"offload_layers={s.offload_layers} without offload_act=1 (the count of layers that "
                            "offload their activations)"),
    Rule("offload_layers", ("offload_layers",), lambda c, j: c["offload_layers"] <= j.model.num_layers,
         lambda s, j: f"offload_layers={s.offload_layers} is more than the model's {j.model.num_layers} layers"),
    # hybrid sharding (HSDP): dp_replicate replicas of a dp/dp_replicate-way shard group; only sharded states
    # have a shard group (torchtitan's DDP is dp_replicate alone; Megatron-Core's instances are distributed
    # optimizers), and the expert data-parallel group splits the same way (Megatron-Core parallel_state:
    # "Expert data parallel size should be divisible by partial DistOpt shard factor")
    Rule("dp_replicate", ("dp_replicate", "dp"), lambda c, j: c["dp"] % c["dp_replicate"] == 0,
         lambda s, j: f"dp_replicate={s.dp_replicate} does not divide dp={s.dp} (the shard group is "
                            "dp/dp_replicate ranks)"),
    Rule("dp_replicate", ("dp_replicate", "zero"), lambda c, j: (c["dp_replicate"] == 1) | (c["zero"] >= 1),
         lambda s, j: f"dp_replicate={s.dp_replicate} with zero=0 (hybrid sharding replicates a ZeRO shard "
                            "group: it needs zero >= 1; zero 0 replicates over all of dp already)"),
    Rule("dp_replicate", ("dp_replicate", "dp", "tp", "cp", "ep", "etp"),
         lambda c, j: (not _moe(j.model)) or ((c["tp"] * c["cp"] * c["dp"]) // np.maximum(c["etp"] * c["ep"], 1))
         % c["dp_replicate"] == 0,
         lambda s, j: f"dp_replicate={s.dp_replicate} does not divide the expert data-parallel size "
                            f"edp={s.edp} (the experts' shard group is edp/dp_replicate ranks)"),
    Rule("offload_opt", ("offload_opt", "zero"), lambda c, j: (c["offload_opt"] == 0) | (c["zero"] >= 1),
         lambda s, j: "offload_opt=1 steps each rank's optimizer shard on its host, which needs zero >= 1 "
                            "(Megatron-Core's --optimizer-cpu-offload runs under the distributed optimizer)"),
    # MaxText's tiled loss splits a device's batch-sequence axis into equal chunks (configs/types.py: "Per
    # device batch size times sequence length should be divisible by the number of vocab tiles")
    Rule("vocab_tiles", ("vocab_tiles", "mbs"), lambda c, j: (c["mbs"] * j.train.seq_len) % c["vocab_tiles"] == 0,
         lambda s, j: f"vocab_tiles={s.vocab_tiles} does not divide mbs*seq_len = {s.mbs * j.train.seq_len} "
                            "(the tokens of a micro-batch are cut into equal chunks)"),
)


def rule_rows(rule: Rule, cols: Cols, job: RuleJob) -> np.ndarray:
    """The rule's test as one bool per row."""
    n = len(cols["tp"])
    return np.broadcast_to(np.asarray(rule.ok(cols, job), dtype=bool), (n,))


def rows_keeping(rules: tuple[Rule, ...], cols: Cols, job: RuleJob,
                 only_new: tuple[str, ...] | None = None) -> np.ndarray:
    """AND of the rules whose columns are present (with ``only_new``: only the rules reading one of those keys;
    without, the whole-job ones too)."""
    keep = np.ones(len(cols["tp"]), dtype=bool)
    for rule in rules:
        if not set(rule.reads) <= set(cols):
            continue
        if only_new is not None and not set(rule.reads) & set(only_new):
            continue
        keep &= rule_rows(rule, cols, job)
    return keep


def first_broken(rules: tuple[Rule, ...], s, job: RuleJob) -> Rule | None:
    """The first of ``rules`` that the strategy ``s`` breaks."""
    cols = strategy_columns(s)
    return next((rule for rule in rules if not rule_rows(rule, cols, job)[0]), None)


def legal_rows(cols: Cols, job: RuleJob, only_new: tuple[str, ...] | None = None) -> np.ndarray:
    """AND of every rule of ``RULES`` whose columns are present (with ``only_new``: only rules reading one of
    those keys)."""
    return rows_keeping(RULES, cols, job, only_new)


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
    """The first rule of ``RULES`` ``s`` breaks, then (with a ``framework``) the first option that stack does
    not offer (``Framework.offers``; its limits on combinations are ``asap.spec.stack_rules``), then the layer
    split's structure; None if none."""
    rule = first_broken(RULES, s, RuleJob(model, train, devices, framework=framework))
    if rule is not None:
        return AsapError(f"{field}.{rule.key}", rule.problem(s, RuleJob(model, train, devices, framework=framework)))
    if framework is not None:
        for key, allowed in framework.offers.items():
            value = plain_value(getattr(s, key))
            inert = KNOB[key].inert
            if value not in allowed and not (inert is not None and inert(vars(s))):
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
