"""A knowledge entry's precondition: checks on the current strategy and the job, machine-checked.

An entry's front matter lists its precondition under ``when``: expressions that must all hold, over the names of
``VARIABLES`` (the current strategy's knobs and the job's figures), e.g. ``ep > devices_per_node`` or
``moe and dispatcher != "dedup" and nodes > 1``. An entry whose precondition is false is not retrieved, not
cited, and no re-plan names it.

The expressions are a small, safe language, read with Python's own ``ast`` parser and evaluated here node by node
from a fixed table (``_BINARY``, ``_COMPARE``): integer and string constants, the names of ``VARIABLES``,
``and`` / ``or`` / ``not``, comparisons (``< <= == != >= >``, ``in`` a tuple of constants) and arithmetic
(``+ - * // %``). Nothing else parses: no calls, attributes, subscripts or lambdas, so an entry cannot run code.
"""

from __future__ import annotations

import ast
import operator
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from asap.spec.job import Job
    from asap.spec.strategy import Strategy

# name -> what it is; every name an expression may read
VARIABLES: dict[str, str] = {
    # the current strategy
    "tp": "tensor-parallel degree", "pp": "pipeline stages", "vpp": "virtual stages per device",
    "cp": "context-parallel degree", "ep": "expert-parallel degree", "etp": "expert tensor-parallel degree",
    "dp": "data-parallel degree", "mbs": "micro-batch size", "zero": "ZeRO stage 0..3",
    "sp": "sequence parallelism 0/1", "a2a_overlap": "all-to-all overlapped 0/1",
    "grad_bf16": "gradients reduced in bf16 0/1", "recompute": "recompute label (none, selective, full, modules)",
    "schedule": "pipeline schedule label", "dispatcher": "MoE dispatcher (alltoall, allgather, dedup)",
    "cp_comm": "context-parallel exchange (p2p, a2a, allgather)", "layer_split": "1 when a layer split is set",
    "micro_batches": "micro-batches per replica per step (global batch / (dp x mbs))",
    # the job
    "devices": "devices in the job", "devices_per_node": "devices per host", "nodes": "hosts",
    "scale_up": "devices one scale-up fabric joins (NVLink / ICI / HCCS domain), at most the job's",
    "layers": "transformer layers", "hidden": "hidden size", "heads": "attention heads",
    "kv_heads": "key/value heads", "experts": "routed experts (0 for a dense model)",
    "top_k": "experts per token (0 for a dense model)", "moe": "the model has routed experts",
    "mla": "the model has multi-head latent attention", "seq_len": "tokens per sequence",
    "global_batch": "sequences per step", "family": "accelerator family (nvidia-hopper, tpu, ascend, ...)",
    "framework": "the training stack (megatron, torchtitan, deepspeed, maxtext, mindspore, asap)",
    "precision": "training precision (bf16, fp8, fp4)",
}

_BINARY: dict[type, Callable[[Any, Any], Any]] = {ast.Add: operator.add, ast.Sub: operator.sub,
                                                  ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
                                                  ast.Mod: operator.mod}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Eq: operator.eq,
                                                    ast.NotEq: operator.ne, ast.GtE: operator.ge,
                                                    ast.Gt: operator.gt, ast.In: lambda a, b: a in b,
                                                    ast.NotIn: lambda a, b: a not in b}


def _children(node: ast.AST) -> list[ast.AST] | None:
    """The sub-expressions of a node of the language, or None for a node outside it."""
    if isinstance(node, ast.Expression):
        return [node.body]
    if isinstance(node, ast.BoolOp):
        return list(node.values)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
        return [node.operand]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return [node.left, node.right]
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        return [node.left, *node.comparators]
    if isinstance(node, ast.Tuple):
        return list(node.elts)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str)):
        return []
    return None


def _check(node: ast.AST) -> None:
    """Raise ``ValueError`` on any node outside the language or a name outside ``VARIABLES``."""
    if isinstance(node, ast.Name):
        if node.id not in VARIABLES:
            raise ValueError(f"unknown name {node.id!r} (known: {', '.join(VARIABLES)})")
        return
    children = _children(node)
    if children is None:
        raise ValueError(f"{type(node).__name__} is not allowed (comparisons, and/or/not, + - * // % only)")
    for child in children:
        _check(child)


def compile_check(text: str) -> ast.Expression:
    """The parsed expression, or ``ValueError`` naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a precondition must be a non-empty expression, got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"{text!r} does not parse ({e.msg})") from None
    _check(tree)
    return tree


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env)
    if isinstance(node, ast.BoolOp):
        values = (bool(_eval(v, env)) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env)
        return (not v) if isinstance(node.op, ast.Not) else -v
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, env)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Tuple):
        return tuple(_eval(x, env) for x in node.elts)
    if isinstance(node, ast.Constant):
        return node.value
    assert isinstance(node, ast.Name)  # _check admitted nothing else
    return env[node.id]


def holds(checks: list[str], env: Mapping[str, Any]) -> bool:
    """Whether every expression of ``checks`` is true in ``env`` (``variables``); a comparison of a number with a
    string (a wrong entry) is false, not an error."""
    try:
        return all(bool(_eval(compile_check(c), env)) for c in checks)
    except TypeError:
        return False


def failing(checks: list[str], env: Mapping[str, Any]) -> list[str]:
    """The expressions of ``checks`` that are false in ``env``."""
    return [c for c in checks if not holds([c], env)]


def variables(job: Job, strategy: Strategy) -> dict[str, Any]:
    """Every name of ``VARIABLES``: the strategy's knobs and the job's figures."""
    from asap.spec.knobs import KEYS, plain_value

    model, cluster, train = job.model, job.cluster, job.train
    env: dict[str, Any] = {k: plain_value(getattr(strategy, k)) for k in KEYS if k in VARIABLES}
    env["layer_split"] = 1 if strategy.layer_split else 0
    for k in ("recompute", "schedule", "dispatcher", "cp_comm"):
        env[k] = str(env[k])
    moe = model.moe
    env.update(micro_batches=max(train.global_batch // max(strategy.dp * strategy.mbs, 1), 1),
               devices=cluster.num_devices, devices_per_node=cluster.devices_per_node, nodes=cluster.nodes,
               scale_up=min(cluster.scale_up_domain, cluster.num_devices), layers=model.num_layers,
               hidden=model.hidden_size, heads=model.num_attention_heads, kv_heads=model.num_kv_heads,
               experts=moe.num_experts if moe else 0, top_k=moe.top_k if moe else 0, moe=moe is not None,
               mla=model.mla is not None, seq_len=train.seq_len, global_batch=train.global_batch,
               family=cluster.accelerator.family, framework=job.framework.name, precision=str(train.precision))
    for k in VARIABLES:
        env.setdefault(k, 0)
    return env
