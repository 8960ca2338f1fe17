"""Framework configs: a completed strategy in a training stack's own option names (``asap emit``).

``emit(format, job, strategy, run, strict) -> str``: Megatron-LM launch arguments, a torchtitan TOML job
config, a MaxText YAML, a MindFormers YAML, a DeepSpeed JSON or a Megatron-Bridge ConfigContainer YAML, each with
its run length (``asap.emit.launch.RunLength``: from a token budget) and, in its header, its launch
(``launch(format, ...)``: the command, its environment, the companion files it runs, what the user must still
set). What a stack cannot express is refused with an ``AsapError`` naming the strategy key and the framework; a
training setting it lacks is emitted as the nearest it has, said in a ``differs`` line, or refused under
``strict``. Each emitter module names the version it follows.
"""

from __future__ import annotations

from asap.emit import deepspeed, maxtext, megatron, megatron_bridge, mindformers, torchtitan
from asap.emit.launch import Launch, RunLength
from asap.errors import AsapError
from asap.spec.job import Job

EMITTERS = {"megatron": megatron, "torchtitan": torchtitan, "maxtext": maxtext, "mindformers": mindformers,
            "deepspeed": deepspeed, "megatron-bridge": megatron_bridge}
FORMATS = tuple(EMITTERS)
# the stack (``asap.spec.framework``) whose defaults and offers a format's strategy is completed with
FRAMEWORK_OF = {"megatron": "megatron", "torchtitan": "torchtitan", "maxtext": "maxtext",
                "mindformers": "mindspore", "deepspeed": "deepspeed", "megatron-bridge": "megatron"}


def check_format(fmt: str) -> str:
    if fmt not in EMITTERS:
        raise AsapError("format", f"must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return fmt


def emit(fmt: str, job: Job, strategy, run: RunLength | None = None, strict: bool = False) -> str:
    """The config text of ``strategy`` (a completed ``asap.spec.strategy.Strategy``) for ``job``
    (``asap.spec.job.Job``) in format ``fmt``, ``run`` long (None: the format's placeholder length)."""
    return EMITTERS[check_format(fmt)].emit(job, strategy, run, strict)


def launch(fmt: str, job: Job, strategy, run: RunLength | None = None, strict: bool = False) -> Launch:
    """How to start what ``emit`` writes: the command, its environment and companion files, what is left to set."""
    return EMITTERS[check_format(fmt)].launch(job, strategy, run, strict)


def config_name(fmt: str) -> str:
    """The file name the launch line reads the emitted config from."""
    return EMITTERS[check_format(fmt)].CONFIG


def version(fmt: str) -> str:
    return EMITTERS[check_format(fmt)].VERSION
