"""What every emitter shares: the layer split of a strategy, micro-batch counts and one-line refusals."""

from __future__ import annotations

from asap.errors import AsapError
from asap.spec.job import Job
from asap.spec.layout import default_chunk_layers


def refuse(key: str, framework: str, problem: str) -> AsapError:
    """The one-line refusal: ``strategy.<key>: <framework> cannot express ...``."""
    return AsapError(f"strategy.{key}" if key not in ("precision", "model", "cluster") else key,
                     f"{framework} cannot express {problem}")


def chunk_layers(model, s) -> tuple[int, ...]:
    """Transformer layers per pipeline chunk (virtual order), the strategy's split or the default one."""
    return tuple(s.layer_split) if s.layer_split else default_chunk_layers(model.num_layers, s.pp * s.vpp)


def is_uniform(model, s) -> bool:
    chunks = chunk_layers(model, s)
    return len(set(chunks)) == 1


def micro_batches(train, s) -> int:
    return train.global_batch // (s.dp * s.mbs)


def recompute_modules(s) -> list[str] | None:
    """The module names of a ``recompute=a+b`` set (None for none/selective/full)."""
    return s.recompute.module_labels or None


def check_runnable(stack: str, framework: str, job: Job, s) -> None:
    """Refuse what the stack's rules (``asap.spec.stack_rules``, the ones the planner keeps to) reject."""
    from asap.spec.stack_rules import RuleJob, first_unrunnable

    err = first_unrunnable(s, framework, RuleJob.of(job), stack)
    if err is not None:
        raise err


def refuse_model(stack: str, field: str, problem: str) -> AsapError:
    """A model the stack's own model code cannot build: ``model.<field>: <stack> cannot express ...``."""
    return AsapError(f"model.{field}", f"{stack} cannot express {problem}")
