"""``make_executor(kind, **kwargs)``: the one place that knows every executor. It sits above them (base <- each
executor <- factory), so no executor imports the factory and the base imports none of them."""

from __future__ import annotations

from enum import Enum

from asap.errors import AsapError
from asap.execute.base import Executor


class ExecutorKind(str, Enum):
    SIM = "sim"
    TORCH = "torch"
    JAX = "jax"
    COMMAND = "command"
    TORCHTITAN = "torchtitan"
    DEEPSPEED = "deepspeed"
    MAXTEXT = "maxtext"


def make_executor(kind: str, **kwargs) -> Executor:
    """``sim`` (model, cluster, train), ``torch`` or ``jax`` (model, train, steps, ...), ``command`` (template,
    ...; with ``framework`` and ``cluster``: a stack's emitted config per trial), ``torchtitan``, ``deepspeed``
    or ``maxtext`` (model, cluster, train, steps, ...)."""
    try:
        k = ExecutorKind(kind)
    except ValueError:
        raise AsapError("executor", f"must be one of {', '.join(e.value for e in ExecutorKind)}, got {kind!r}") from None
    if k is ExecutorKind.SIM:
        from asap.execute.sim import SimExecutor as cls
    elif k is ExecutorKind.TORCH:
        from asap.execute.torch_exec import TorchExecutor as cls
    elif k is ExecutorKind.JAX:
        from asap.execute.jax_exec import JaxExecutor as cls
    elif k is ExecutorKind.COMMAND:
        if kwargs.get("framework") and kwargs.get("cluster") is not None:
            from asap.execute.stack import StackExecutor as cls
        else:
            kwargs.pop("cluster", None)
            from asap.execute.command import CommandExecutor as cls
    elif k is ExecutorKind.TORCHTITAN:
        from asap.execute.torchtitan_exec import TorchtitanExecutor as cls
    elif k is ExecutorKind.DEEPSPEED:
        from asap.execute.deepspeed_exec import DeepSpeedExecutor as cls
    else:
        from asap.execute.maxtext_exec import MaxTextExecutor as cls
    return cls(**kwargs)
