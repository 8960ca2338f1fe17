"""The values each enum-like option takes, and the option that checks them (``choice``).

The tuples are written out here, not imported, so that ``asap --help`` and a small ``asap estimate`` do not
import the cost model to build their options; tests/cli/test_choices.py keeps each equal to the code's own
enum (``asap.spec.train.PRECISIONS``, ``asap.spec.framework.FRAMEWORK_NAMES``, ``asap.emit.FORMATS``,
``asap.execute.factory.ExecutorKind``, ...). A value outside them is refused by the option itself: one line,
``Invalid value for '--executor': unknown executor 'torchtitann' (one of: sim, torch, ...)``, exit 2.
"""

from __future__ import annotations

from typing import Any

import typer

PRECISIONS = ("bf16", "fp16", "fp8", "fp32", "nvfp4", "mxfp4")  # asap.spec.train.PRECISIONS
RUN_PRECISIONS = ("fp32", "bf16")  # asap.runners.common.RUN_PRECISIONS: the reference trainers
FRAMEWORKS = ("megatron", "deepspeed", "torchtitan", "maxtext", "mindspore", "asap")  # spec.framework.FRAMEWORK_NAMES
# spelled as the stack a user runs; priced as the one whose semantics it has (Megatron-Bridge runs Megatron-Core)
FRAMEWORK_ALIASES = {"megatron-bridge": "megatron"}
FORMATS = ("megatron", "torchtitan", "maxtext", "mindformers", "deepspeed", "megatron-bridge")  # asap.emit.FORMATS
READ_FORMATS = ("megatron", "megatron-bridge", "torchtitan", "maxtext", "deepspeed", "mindformers")  # emit.read
EXECUTORS = ("sim", "torch", "jax", "command", "torchtitan", "deepspeed", "maxtext")  # execute.factory.ExecutorKind
LAUNCHERS = ("local", "torchrun", "srun")  # asap.execute.launch.Launcher
BACKENDS = ("torch", "jax")  # asap run --backend
DEVICE_REQUESTS = ("auto", "cpu", "cuda")  # asap.runners.common.DEVICE_REQUESTS
SCHEDULES = ("1f1b", "interleaved", "zb", "gpipe")  # asap.spec.knobs.SCHEDULES


def listed(values: tuple[str, ...]) -> str:
    return " | ".join(values)


def _check(what: str, values: tuple[str, ...], aliases: dict[str, str]):
    def check(ctx: Any, param: Any, value: Any) -> Any:
        if value is None or value in values:
            return value
        if value in aliases:
            return aliases[value]
        raise typer.BadParameter(f"unknown {what} {value!r} (one of: {', '.join(values + tuple(aliases))})",
                                 ctx=ctx, param=param)

    return check


def choice(default: Any, *decls: str, values: tuple[str, ...], help: str, what: str,
           aliases: dict[str, str] | None = None, **kw: Any) -> Any:
    """An option that takes one of ``values`` (or an alias, handed on as the value it stands for): its help
    lists them; anything else is a usage error naming the option and the choices."""
    aliases = aliases or {}
    shown = listed(values + tuple(aliases))
    every = values + tuple(aliases)

    def complete(incomplete: str) -> list[str]:  # shell completion (asap --install-completion) of the value
        return [v for v in every if v.startswith(incomplete)]

    return typer.Option(default, *decls, help=f"{help} Choices: {shown}.", metavar=what.upper().replace(" ", "-"),
                        callback=_check(what, values, aliases), autocompletion=complete, **kw)
