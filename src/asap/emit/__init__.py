"""Framework configs: a completed strategy in a training stack's own option names (``asap emit``).

``emit(format, job, strategy) -> str``: Megatron-LM launch arguments, a torchtitan TOML job
config, a MaxText YAML, a MindFormers YAML, a DeepSpeed JSON or a Megatron-Bridge ConfigContainer YAML. What a stack cannot express is refused with an
``AsapError`` naming the strategy key and the framework. Each emitter module names the version it follows.
"""

from __future__ import annotations

from asap.emit import deepspeed, maxtext, megatron, megatron_bridge, mindformers, torchtitan
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


def emit(fmt: str, job: Job, strategy) -> str:
    """The config text of ``strategy`` (a completed ``asap.spec.strategy.Strategy``) for ``job``
    (``asap.spec.job.Job``) in format ``fmt``."""
    return EMITTERS[check_format(fmt)].emit(job, strategy)


def version(fmt: str) -> str:
    return EMITTERS[check_format(fmt)].VERSION
