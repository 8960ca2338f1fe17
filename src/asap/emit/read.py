"""Read a job as its stack writes it: the inverse of ``asap emit`` (``asap read``).

``read_job(path, fmt=None, *, cluster=None) -> ReadJob``: a Megatron-LM launch script or argument list (or a
functional-test ``MODEL_ARGS`` YAML), a Megatron-Bridge ``ConfigContainer`` YAML, a torchtitan TOML, a MaxText
YAML over ``base.yml`` (or a ``MaxText.train`` command line), a DeepSpeed JSON (or a Megatron-DeepSpeed launch
script naming one) and a MindFormers YAML become asap's model (``ModelSpec``), train spec (global batch, sequence
length, precision, framework) and completed strategy, with the cluster where the file states its size (nodes,
devices per node, or the device count its parallel sizes multiply to). Each key is read with its stack's own
default where the file leaves it out (Megatron's ``--micro-batch-size`` 1, no ``--use-distributed-optimizer``:
ZeRO 0; MaxText's ``base.yml``; DeepSpeed's ``zero_optimization.stage`` 0, ...: each reader cites its version).
A key the reader cannot map is refused in one line naming it (``AsapError``); keys that do not change the step's
cost (paths, logging, seeds, optimizer hyper-parameters, checkpointing) are skipped by each reader's documented
allow-list (``IGNORED``, docs/read.md), never silently.

What a format does not state comes from the keyword arguments: the cluster (its accelerator, and the device count
when the file does not fix it), and for a DeepSpeed JSON, which carries no model, the model and the sequence
length (``model=``, ``seq_len=``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from asap.emit.read_common import Parsed
from asap.errors import AsapError
from asap.spec.hardware import Cluster
from asap.spec.model import ModelSpec
from asap.spec.strategy import Strategy
from asap.spec.train import TrainSpec

READ_FORMATS = ("megatron", "megatron-bridge", "torchtitan", "maxtext", "deepspeed", "mindformers")
FRAMEWORK_OF = {"megatron": "megatron", "megatron-bridge": "megatron", "torchtitan": "torchtitan",
                "maxtext": "maxtext", "deepspeed": "deepspeed", "mindformers": "mindspore"}


@dataclass(frozen=True)
class ReadJob:
    """A job read from a stack's config: what was trained, how, and (where the file says) on how many devices."""

    model: ModelSpec
    train: TrainSpec
    strategy: Strategy
    cluster: Cluster | None  # the given cluster, resized to the file's nodes / devices; None without one
    framework: str  # asap's stack name (asap.spec.framework)
    format: str  # the format read (READ_FORMATS)
    source: str  # the path read
    devices: int = 0  # the device count the strategy spans (dp * tp * pp * cp)
    nodes: int | None = None  # nodes the file states (a launcher's --nnodes), None where it does not
    devices_per_node: int | None = None  # devices per node the file states (--nproc_per_node), None where not

    @property
    def strategy_string(self) -> str:
        return str(self.strategy)

    def to_dict(self) -> dict[str, Any]:
        from asap.spec.framework import get_framework
        from asap.spec.strategy import format_compact

        family = self.cluster.accelerator.family if self.cluster is not None else "gpu"
        fw = get_framework(self.framework, family)
        return {"source": self.source, "format": self.format, "framework": self.framework,
                "model": self.model.to_dict(),
                "train": {"global_batch": self.train.global_batch, "seq_len": self.train.seq_len,
                          "precision": self.train.precision, "framework": self.train.framework,
                          # the kernels the file compiles (None: the stack's default; asap estimate --fused-kernels)
                          "fused_kernels": self.train.fused_elementwise, "compiled_loss": self.train.compiled_loss},
                "strategy": self.strategy_string,
                "strategy_compact": format_compact(self.strategy, self.devices, self.model.moe is not None, fw),
                "devices": self.devices, "nodes": self.nodes, "devices_per_node": self.devices_per_node,
                "cluster": None if self.cluster is None else {"name": self.cluster.name, **self.cluster.to_dict()}}


def detect_format(path: Path, text: str) -> str:
    """The format of ``path`` from its name and content."""
    name = path.name.lower()
    if name.endswith(".toml"):
        return "torchtitan"
    if name.endswith(".json"):
        return "deepspeed"
    if name.endswith((".yaml", ".yml")):
        return _yaml_format(text)
    if "MaxText.train" in text or "maxtext.trainers" in text or "base.yml" in text:
        return "maxtext"
    if "--deepspeed_config" in text or "--deepspeed-config" in text:
        return "deepspeed"
    if "--" in text:
        return "megatron"
    raise AsapError("format", f"cannot tell the format of {path.name}: give --format ({', '.join(READ_FORMATS)})")


def _yaml_format(text: str) -> str:
    import yaml

    try:
        d = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise AsapError("config", f"not YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(d, dict):
        raise AsapError("config", "a YAML config must be a mapping")
    if "MODEL_ARGS" in d:
        return "megatron"
    if "ConfigContainer" in str(d.get("_target_", "")) or \
            (isinstance(d.get("model"), dict) and isinstance(d.get("train"), dict)):
        return "megatron-bridge"
    if "parallel_config" in d or "runner_config" in d:
        return "mindformers"
    return "maxtext"


def read_job(path: Path, fmt: str | None = None, *, cluster: Cluster | None = None, model: ModelSpec | None = None,
             seq_len: int | None = None) -> ReadJob:
    """The job ``path`` describes (``fmt`` None: detected from the file); ``cluster`` gives the accelerator and,
    where the file does not fix it, the device count; ``model`` and ``seq_len`` what the format does not carry (a
    DeepSpeed JSON's model; a stated model is refused if they differ)."""
    path = Path(path)
    if not path.is_file():
        raise AsapError("config", f"{path}: no such file")
    text = path.read_text(errors="replace")
    fmt = fmt or detect_format(path, text)
    if fmt not in READ_FORMATS:
        raise AsapError("format", f"must be one of {', '.join(READ_FORMATS)}, got {fmt!r}")
    from asap.emit import read_bridge, read_deepspeed, read_maxtext, read_megatron, read_mindformers, read_torchtitan

    readers = {"megatron": read_megatron, "megatron-bridge": read_bridge, "torchtitan": read_torchtitan,
               "maxtext": read_maxtext, "deepspeed": read_deepspeed, "mindformers": read_mindformers}
    parsed = readers[fmt].read(path, text, model=model, seq_len=seq_len, cluster=cluster)
    return assemble(parsed, fmt, str(path), cluster)


def _devices(parsed: Parsed, cluster: Cluster | None, fmt: str) -> tuple[int, Cluster | None]:
    """The device count (the file's, else the cluster's) and the cluster resized to the file's size."""
    s = parsed.strategy
    per_replica = s.get("tp", 1) * s.get("pp", 1) * s.get("cp", 1)
    devices = parsed.devices or (parsed.dp * per_replica if parsed.dp else 0)
    if parsed.nodes and parsed.devices_per_node:
        devices = devices or parsed.nodes * parsed.devices_per_node
        if cluster is not None:
            cluster = replace(cluster, nodes=parsed.nodes, devices_per_node=parsed.devices_per_node)
    if cluster is not None and devices and cluster.num_devices != devices:
        cluster = cluster.with_devices(devices)
    if not devices:
        if cluster is None:
            raise AsapError("cluster", f"the {fmt} config does not state the device count: give a cluster "
                                       "(--cluster C, --devices N)")
        devices = cluster.num_devices
    if devices % per_replica:
        raise AsapError("strategy.dp", f"{devices} devices are not a multiple of tp*pp*cp={per_replica}")
    return devices, cluster


def assemble(parsed: Parsed, fmt: str, source: str, cluster: Cluster | None) -> ReadJob:
    """The job from a format reader's findings: the strategy completed with the stack's defaults for what the file
    leaves out (only the knobs that do not act here: a dense model's dispatcher, cp=1's exchange) and checked as
    ``asap estimate`` checks one."""
    from asap.spec.framework import get_framework
    from asap.spec.strategy import complete_strategy, fit_strategy, parse_strategy

    framework = FRAMEWORK_OF[fmt]
    train = TrainSpec(parsed.global_batch, parsed.seq_len, parsed.precision, framework,
                      fused_elementwise=parsed.fused, compiled_loss=parsed.compiled_loss)
    devices, cluster = _devices(parsed, cluster, fmt)
    family = cluster.accelerator.family if cluster is not None else "gpu"
    fw = get_framework(framework, family)
    s = complete_strategy(parse_strategy(parsed.strategy, "strategy"), devices, "strategy", fw)
    s = fit_strategy(s, parsed.model, train, devices, "strategy", fw)
    if train.global_batch % (s.dp * s.mbs):
        raise AsapError("strategy.mbs", f"global batch {train.global_batch} is not a multiple of dp*mbs="
                                        f"{s.dp * s.mbs}")
    return ReadJob(parsed.model, train, s, cluster, framework, fmt, source, devices, parsed.nodes,
                   parsed.devices_per_node)
