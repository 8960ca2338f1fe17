"""What each training stack can run, beyond its option lists (``Framework.offers``): one table of vectorized rules.

The planner (``search.space``) drops the rows a rule breaks, so it never ranks what the chosen ``--framework``
cannot run; every emitter (``asap.emit``) checks the same rules first and refuses with the rule's line. A rule
names the strategy key it blames, the columns it reads (a rule applies once they exist, like
``asap.spec.legality``'s), a test over integer columns (``recompute`` / ``schedule`` / ``dispatcher`` codes)
and the problem it reports for one strategy. ``estimate`` does not apply them: it prices what-ifs, including
a combination no stack offers.

Sources, per stack:
- megatron: Megatron-Core core_r0.14.0 ``TransformerConfig.__post_init__`` on ``cpu_offloading`` (no
  recompute granularity with it) and on
  ``overlap_moe_expert_parallel_comm`` (expert parallelism, virtual stages under a pipeline, the alltoall or
  flex dispatcher, no full recomputation, bf16/fp16 weights, at most one MTP layer).
- torchtitan v0.2.2: tensor parallelism is always sequence-parallel (``parallelize_llama``: SequenceParallel
  norms); ``expert_tensor_parallel_degree`` is 1 or the TP degree; the DeepEP dispatch
  (``expert_parallel_comm_backend = "deepep"``) needs expert parallelism and no expert TP
  (``models/llama4/infra/parallelize.py``); ``mixed_precision_param`` is bfloat16 or float32; the looped
  schedules (Interleaved1F1B, InterleavedZeroBubble) need virtual stages, GPipe none.
- maxtext: the expert axis is carved out of the batch axes (dp % ep); experts are sharded over the tensor axis
  or not at all; tensor, context and expert axes stay inside a slice (``dcn_*`` only for pipeline and batch).
- deepspeed: expert parallelism lives in the model code (``deepspeed.moe.layer.MoE(ep_size=...)``), not the
  JSON; no fp8; MiCS (hybrid sharding, ``mics_shard_size``) builds its shard and replicate groups from runs of
  global ranks over the whole world (``deepspeed/runtime/zero/mics_utils.py`` ``create_mics_comm_groups``), so
  it runs without tensor or pipeline parallelism.
- mindspore (MindFormers r1.5.0): ``recompute_config`` has whole-layer and selective recomputation only, experts
  are sharded by ``model_parallel`` (etp = tp), no fp8.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np

from asap.errors import AsapError
from asap.spec.framework import DISPATCHERS, FRAMEWORKS, Dispatcher
from asap.spec.legality import Rule, RuleJob, first_broken, rows_keeping
from asap.spec.placement import Placement
from asap.spec.strategy import Schedule
from asap.spec.knobs import Recompute

Cols = Mapping[str, np.ndarray]
ALLGATHER = DISPATCHERS.index(Dispatcher.ALLGATHER.value)
DEDUP = DISPATCHERS.index(Dispatcher.DEDUP.value)


StackRule = Rule  # the one rule shape (``asap.spec.legality.Rule``)


def _moe(j: RuleJob) -> bool:
    return j.model.moe is not None


def _overlap(c: Cols, j: RuleJob) -> np.ndarray:
    return (c["a2a_overlap"] == 1) & _moe(j)


# a MaxText remat policy (``asap.spec.remat``) names MaxText's checkpoint_name tags: no other stack has them
MAXTEXT_REMAT_ONLY = StackRule(
    "recompute", ("recompute",), lambda c, j: c["recompute"] < Recompute.MAXTEXT,
    lambda s, j: f"recompute={s.recompute} (a MaxText remat policy: its named tensors are MaxText's "
                 "checkpoint_name tags)")


MEGATRON = (
    MAXTEXT_REMAT_ONLY,
    StackRule("offload_act", ("offload_act", "recompute"),
              lambda c, j: (c["offload_act"] == 0) | (c["recompute"] == Recompute.NONE),
              lambda s, j: f"offload_act=1 with recompute={s.recompute} (TransformerConfig refuses cpu_offloading "
                           "with recompute_granularity: offload replaces recomputation)"),
    StackRule("a2a_overlap", ("a2a_overlap", "ep"), lambda c, j: ~_overlap(c, j) | (c["ep"] > 1),
              lambda s, j: "a2a_overlap=1 with ep=1 (the overlap needs expert parallelism)"),
    StackRule("a2a_overlap", ("a2a_overlap", "pp", "vpp"),
              lambda c, j: ~_overlap(c, j) | (c["pp"] == 1) | (c["vpp"] > 1),
              lambda s, j: "a2a_overlap=1 with pp>1 and vpp=1 (the overlap needs virtual stages)"),
    StackRule("a2a_overlap", ("a2a_overlap", "recompute"),
              lambda c, j: ~_overlap(c, j) | (c["recompute"] != Recompute.FULL),
              lambda s, j: "a2a_overlap=1 with recompute=full (the overlap needs recomputation off or selective)"),
    StackRule("a2a_overlap", ("a2a_overlap", "dispatcher"),
              lambda c, j: ~_overlap(c, j) | (c["dispatcher"] != ALLGATHER),
              lambda s, j: "a2a_overlap=1 with dispatcher=allgather (the overlap needs alltoall or flex)"),
    StackRule("a2a_overlap", ("a2a_overlap",), lambda c, j: ~_overlap(c, j) | (j.train.precision != "fp32"),
              lambda s, j: "a2a_overlap=1 with precision fp32 (the overlap needs bf16 or fp16 weights)"),
    StackRule("a2a_overlap", ("a2a_overlap",), lambda c, j: ~_overlap(c, j) | (j.model.mtp_layers <= 1),
              lambda s, j: f"a2a_overlap=1 with mtp_layers={j.model.mtp_layers} (the overlap takes one MTP layer)"),
)


def _etp_tp_or_one(c: Cols, j: RuleJob) -> np.ndarray:
    return (not _moe(j)) | (c["etp"] == 1) | (c["etp"] == c["tp"])


TORCHTITAN = (
    MAXTEXT_REMAT_ONLY,
    StackRule("sp", ("sp", "tp"), lambda c, j: (c["tp"] == 1) | (c["sp"] == 1),
              lambda s, j: "sp=0 with tp>1 (its tensor parallelism is always sequence-parallel)"),
    StackRule("etp", ("etp", "tp"), _etp_tp_or_one,
              lambda s, j: f"etp={s.etp} (expert_tensor_parallel_degree is 1 or tensor_parallel_degree)"),
    StackRule("dispatcher", ("dispatcher", "ep", "etp"),
              lambda c, j: (j.model.moe is None) | (c["dispatcher"] != DEDUP) | ((c["ep"] > 1) & (c["etp"] == 1)),
              lambda s, j: f"dispatcher=dedup with ep={s.ep}, etp={s.etp} (expert_parallel_comm_backend deepep "
                           "needs ep > 1 and etp = 1)"),
    StackRule("schedule", ("schedule", "vpp", "pp"),
              lambda c, j: (c["pp"] == 1) | (c["schedule"] != Schedule.ZB) | (c["vpp"] > 1),
              lambda s, j: "schedule=zb with vpp=1 (InterleavedZeroBubble is a looped schedule: vpp > 1)"),
    StackRule("precision", (), lambda c, j: j.train.precision != "fp16",
              lambda s, j: "fp16 (mixed_precision_param is bfloat16 or float32)"),
)


def _slices_left(c: Cols, j: RuleJob) -> np.ndarray:
    """The slices the pipeline and batch axes cannot cover (1: the mesh fits, as ``emit.maxtext.mesh``)."""
    return Placement(pp=c["pp"], dp=c["dp"], ep=c["ep"]).slices_left(j.domains)


MAXTEXT = (
    StackRule("ep", ("ep", "dp"), lambda c, j: c["dp"] % c["ep"] == 0,
              lambda s, j: f"ep={s.ep} not dividing dp={s.dp} (the expert axis is carved out of the batch)"),
    StackRule("etp", ("etp", "tp"), _etp_tp_or_one,
              lambda s, j: f"etp={s.etp} (experts are sharded over the tensor axis or not at all)"),
    StackRule("pp", ("pp", "vpp"), lambda c, j: (c["pp"] == 1) | (j.model.num_layers % (c["pp"] * c["vpp"]) == 0),
              lambda s, j: f"pp*vpp={s.pp * s.vpp} stages over {j.model.num_layers} layers (every stage holds "
                           "num_layers_per_pipeline_stage layers)"),
    StackRule("tp", ("tp", "pp", "dp", "ep"), lambda c, j: _slices_left(c, j) == 1,
              lambda s, j: f"this mesh over {j.domains} slices (tensor, context and expert axes must stay within "
                           "a slice; pipeline and data cross DCN)"),
    StackRule("offload_act", ("offload_act", "recompute"),
              lambda c, j: (c["offload_act"] == 0) | (c["recompute"] < Recompute.MAXTEXT),
              lambda s, j: f"offload_act=1 with recompute={s.recompute} (a remat policy states what it offloads, "
                           "tensor by tensor)"),
)

DEEPSPEED = (
    MAXTEXT_REMAT_ONLY,
    StackRule("ep", ("ep",), lambda c, j: c["ep"] == 1,
              lambda s, j: f"ep={s.ep} (expert parallelism is set in the model code, not the config)"),
    StackRule("precision", (), lambda c, j: j.train.precision != "fp8", lambda s, j: "fp8 (bf16 or fp16 only)"),
    StackRule("dp_replicate", ("dp_replicate", "tp", "pp"),
              lambda c, j: (c["dp_replicate"] == 1) | (c["tp"] * c["pp"] == 1),
              lambda s, j: f"dp_replicate={s.dp_replicate} with tp={s.tp}, pp={s.pp} (MiCS shards runs of global "
                           "ranks: mics_shard_size needs data parallelism alone)"),
)

MINDSPORE = (
    StackRule("recompute", ("recompute",), lambda c, j: c["recompute"] <= Recompute.FULL,
              lambda s, j: f"recompute={s.recompute} (recompute_config: recompute or select_recompute)"),
    StackRule("etp", ("etp", "tp"), lambda c, j: (not _moe(j)) | (c["etp"] == c["tp"]),
              lambda s, j: f"etp={s.etp} with tp={s.tp} (experts are sharded by model_parallel)"),
    StackRule("precision", (), lambda c, j: j.train.precision != "fp8",
              lambda s, j: "fp8 (compute_dtype is float32, float16 or bfloat16)"),
)

# Every stack's limits on combinations, each read from its ``Framework`` entry (``asap.spec.framework``: its
# sources there): activation offload under a pipeline (Megatron-Core's TransformerConfig refuses cpu_offloading
# with pipeline parallelism), the deepest ZeRO stage with a pipeline (DeepSpeed's PipelineEngine: ZeRO-1 at
# most), and the ZeRO stages it shards hybrid (``Framework.hsdp_zero``).
def _hybrid_stages(j: RuleJob) -> str:
    zeros = j.framework.hsdp_zero
    return f"hybrid sharding with zero {' or '.join(map(str, zeros))}" if zeros else "no hybrid sharding"


EVERY_STACK = (
    Rule("offload_act", ("offload_act", "pp"),
         lambda c, j: (c["pp"] == 1) | (c["offload_act"] == 0) | j.framework.offload_act_with_pp,
         lambda s, j: f"offload_act=1 with pp={s.pp} (no CPU offloading with a pipeline)"),
    Rule("zero", ("zero", "pp"), lambda c, j: (c["pp"] == 1) | (c["zero"] <= j.framework.max_zero_with_pp),
         lambda s, j: f"zero={int(s.zero)} with pp={s.pp} (at most zero={j.framework.max_zero_with_pp} with a "
                      "pipeline)"),
    Rule("dp_replicate", ("dp_replicate", "zero"),
         lambda c, j: (c["dp_replicate"] == 1) | np.isin(c["zero"], j.framework.hsdp_zero),
         lambda s, j: f"dp_replicate={s.dp_replicate} with zero={int(s.zero)} ({_hybrid_stages(j)})"),
)


# the stacks whose pipeline stages all hold the same number of layers: the planner adopts no uneven split there
UNIFORM_SPLIT_ONLY = ("deepspeed", "maxtext")

STACK_RULES: Mapping[str, tuple[StackRule, ...]] = {"megatron": MEGATRON, "torchtitan": TORCHTITAN,
                                                    "maxtext": MAXTEXT, "deepspeed": DEEPSPEED,
                                                    "mindspore": MINDSPORE,
                                                    # the reference trainer (asap.runners) has no named tensors
                                                    "asap": (MAXTEXT_REMAT_ONLY,)}


def rules_of(framework: str) -> tuple[Rule, ...]:
    """The rules of the stack named ``framework``: every stack's (``EVERY_STACK``, read from its entry), then its
    own."""
    return (EVERY_STACK if framework in FRAMEWORKS else ()) + STACK_RULES.get(framework, ())


def _of_stack(job: RuleJob, framework: str) -> RuleJob:
    """The job with the entry of the stack named ``framework`` (the one ``EVERY_STACK``'s rows read)."""
    if job.framework is not None and job.framework.name == framework:
        return job
    return replace(job, framework=FRAMEWORKS.get(framework))


def runnable_rows(cols: Cols, framework: str, job: RuleJob, only_new: tuple[str, ...] | None = None) -> np.ndarray:
    """AND of the stack's rules whose columns are present (with ``only_new``: those reading one of these keys,
    and the whole-job ones on the first call, ``only_new=None``)."""
    return rows_keeping(rules_of(framework), cols, _of_stack(job, framework), only_new)


def first_unrunnable(s, framework: str, job: RuleJob, stack: str | None = None,
                     field: str = "strategy") -> AsapError | None:
    """The first stack rule ``s`` breaks, as the one line ``<field>: <stack> cannot express ...`` (``stack``:
    the name the message gives, e.g. the format mindformers for the framework mindspore)."""
    job = _of_stack(job, framework)
    rule = first_broken(rules_of(framework), s, job)
    if rule is None:
        return None
    where = rule.key if rule.key in ("precision", "model") else f"{field}.{rule.key}"
    return AsapError(where, f"{stack or framework} cannot express {rule.problem(s, job)}")


def domains_of(devices: int, scale_up_domain: int) -> int:
    """How many scale-up domains ``devices`` span (``Topology.num_domains``)."""
    return max(1, devices // max(1, scale_up_domain))


__all__ = ["RuleJob", "StackRule", "STACK_RULES", "EVERY_STACK", "rules_of", "runnable_rows", "first_unrunnable",
           "domains_of", "UNIFORM_SPLIT_ONLY"]


def runnable_strategy(job, text: str, any_stack: bool = False):
    """The completed strategy, refused in one line (``asap.spec.stack_rules``, the table the planner and
    ``emit`` use) where the job's stack cannot run it, unless ``any_stack``."""
    from asap.spec.strategy import resolve_strategy

    s = resolve_strategy(text, job.model, job.train, job.devices, framework=job.framework)
    err = None if any_stack else first_unrunnable(s, job.framework.name, RuleJob.of(job))
    if err is not None:
        raise AsapError(err.field, f"{err.problem}; --any-stack prices it as a what-if")
    return s
