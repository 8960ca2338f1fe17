"""``make_executor(kind, **kwargs)``: the one place that knows every executor. It sits above them (base <- each
executor <- factory), so no executor imports the factory and the base imports none of them."""

from __future__ import annotations

from enum import Enum

from asap.errors import AsapError
from asap.execute.base import Executor
from asap.spec.job import Job


class ExecutorKind(str, Enum):
    SIM = "sim"
    TORCH = "torch"
    JAX = "jax"
    COMMAND = "command"
    TORCHTITAN = "torchtitan"
    DEEPSPEED = "deepspeed"
    MAXTEXT = "maxtext"


def make_executor(kind: str, **kwargs) -> Executor:
    """``sim`` (job: an ``asap.spec.job.Job``), ``torch`` or ``jax`` (model, train, steps, ...), ``command``
    (template, ...; with ``framework`` and ``job``: a stack's emitted config per trial), ``torchtitan``,
    ``deepspeed`` or ``maxtext`` (job, steps, ...)."""
    try:
        k = ExecutorKind(kind)
    except ValueError:
        raise AsapError("executor", f"must be one of {', '.join(e.value for e in ExecutorKind)}, got {kind!r}") from None
    cls: type[Executor]
    if k is ExecutorKind.SIM:
        from asap.execute.sim import SimExecutor as cls
    elif k is ExecutorKind.TORCH:
        from asap.execute.torch_exec import TorchExecutor as cls
    elif k is ExecutorKind.JAX:
        from asap.execute.jax_exec import JaxExecutor as cls
    elif k is ExecutorKind.COMMAND:
        if kwargs.get("framework") and kwargs.get("job") is not None:
            from asap.execute.stack import StackExecutor as cls
        else:
            kwargs.pop("job", None)
            from asap.execute.command import CommandExecutor as cls
    elif k is ExecutorKind.TORCHTITAN:
        from asap.execute.torchtitan_exec import TorchtitanExecutor as cls
    elif k is ExecutorKind.DEEPSPEED:
        from asap.execute.deepspeed_exec import DeepSpeedExecutor as cls
    else:
        from asap.execute.maxtext_exec import MaxTextExecutor as cls
    return cls(**kwargs)


STACKS = (ExecutorKind.TORCHTITAN, ExecutorKind.DEEPSPEED, ExecutorKind.MAXTEXT)
# asap.spec.framework's names -> the stack's config format and log format (MindSpore runs MindFormers)
FORMAT_OF = {"megatron": "megatron", "torchtitan": "torchtitan", "maxtext": "maxtext", "deepspeed": "deepspeed",
             "mindspore": "mindformers", "mindformers": "mindformers"}


def tune_framework(kind: str, framework: str | None) -> str | None:
    """The framework a tune's plans are made within: a stack executor's own (``--framework`` must agree)."""
    if kind in {k.value for k in STACKS}:
        if framework not in (None, kind):
            raise AsapError("framework", f"--executor {kind} runs {kind}, got --framework {framework}")
        return kind
    return framework


def tune_executor(kind: str, job: Job, *, steps: int = 5, workdir: str | None = None,
                  launch: str | None = None, launcher: str = "local", variables: dict | None = None,
                  step_time_regex: str | None = None, step_time_scale: float = 1.0, timeout_s: float | None = None,
                  python: str | None = None):
    """The executor ``asap tune`` runs (the real ones: ``command`` with a launch template, or a stack's own)."""
    cluster, train = job.cluster, job.train
    if kind in {k.value for k in STACKS}:
        if launch:
            raise AsapError("launch", f"--executor {kind} builds its own command; a template needs --executor command")
        extra = {"python": python} if python else {}
        return make_executor(kind, job=job, steps=steps, workdir=workdir,
                             timeout_s=timeout_s or 900.0, **extra)
    if not launch:
        raise AsapError("launch", "--executor command needs --launch TEMPLATE (the stack's command line)")
    from asap.execute.launch import default_variables, launch_argv

    argv = launch_argv(launcher, launch)
    values = {**default_variables(cluster), **(variables or {})}
    fmt = FORMAT_OF.get(train.framework or "") if train.framework else None
    common = dict(variables=values, timeout_s=timeout_s or 3600.0, workdir=workdir)
    if step_time_regex:
        return make_executor("command", template=argv, step_time_regex=step_time_regex,
                             step_time_scale=step_time_scale, devices=cluster.num_devices, model=job.model,
                             train=train, **common)
    if fmt is None:
        raise AsapError("framework", "--executor command needs --framework F (its log format and config) or "
                                     "--step-time-regex")
    return make_executor("command", template=argv, framework=fmt, job=job, **common)
