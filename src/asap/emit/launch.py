"""What every emitted job carries besides its parallel layout: the run's length from a token budget, and its launch.

``RunLength`` (``run_length``): a budget of ``tokens`` is ``iterations = floor(tokens / (global_batch x
seq_len))`` optimizer steps (2T at 512 x 4096: 953,674); the learning rate warms up over ``WARMUP_FRACTION`` of
them (1%: Llama 3 405B warmed up over 8,000 of ~1.2M steps, 0.67%; DeepSeek-V3 over 2,000 of ~500K, 0.4%;
NeMo/Megatron recipes use ~0.5-2%) and decays (cosine) over all of them; a checkpoint is written every
``CHECKPOINT_PERIOD_S`` (one hour) of the estimated step time, ``floor(3600 / step_time_s)`` iterations, so that
a failure loses at most an hour of the whole job. Without a budget each format keeps its placeholder length and
says so in the list of what the user must still set.

``Launch``: the command every node runs (its environment first: what the stack needs, e.g. Megatron's
CUDA_DEVICE_MAX_CONNECTIONS), the companion files the command runs (torchtitan's flavor registration,
Megatron-Bridge's entry script), what the differences from asap's model are (``differs``: a setting the stack
lacks, emitted as the nearest it has) and what the user must still set (dataset, tokenizer, output paths).
Each emitter's ``launch(job, s)`` builds its own, from the stack's documented launcher (cited there).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from asap.spec.job import Job

WARMUP_FRACTION = 0.01
CHECKPOINT_PERIOD_S = 3600.0
RDZV_PORT = 29500


@dataclass(frozen=True)
class RunLength:
    """The run's length in optimizer steps (None: no budget given; the format's placeholder, said so)."""

    tokens: float | None = None
    iterations: int | None = None
    warmup_iters: int | None = None
    decay_iters: int | None = None
    checkpoint_interval: int | None = None
    step_time_s: float | None = None
    tokens_per_step: int = 0

    def line(self) -> str:
        if self.iterations is None or self.tokens is None or self.checkpoint_interval is None:
            return "# run length: no --tokens budget: the steps, the schedule's lengths and the checkpoint interval " \
                   "are placeholders (asap emit --tokens N writes them)"
        every = f" (~{self.checkpoint_interval * self.step_time_s / 60:.0f} min at the estimated " \
                f"{self.step_time_s:.3g} s/step)" if self.step_time_s else ""
        return (f"# run length: {short_count(self.tokens)} tokens / ({self.tokens_per_step} tokens/step) = "
                f"{self.iterations:,} iterations; warmup {self.warmup_iters:,}, cosine decay over "
                f"{self.decay_iters:,}; checkpoint every {self.checkpoint_interval:,}{every}")


def short_count(x: float) -> str:
    """2e12 -> ``2T``, 3e11 -> ``300B``."""
    for suffix, scale in (("P", 1e15), ("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if x >= scale:
            return f"{x / scale:.4g}{suffix}"
    return f"{x:.4g}"


def run_length(train, tokens: float | None, step_time_s: float | None = None) -> RunLength:
    """The budget's iterations, warmup, decay and checkpoint interval (module docstring)."""
    if tokens is None:
        return RunLength()
    per_step = train.global_batch * train.seq_len
    iters = max(1, int(tokens // per_step))
    warmup = max(1, round(WARMUP_FRACTION * iters))
    if step_time_s and step_time_s > 0:
        every = int(CHECKPOINT_PERIOD_S // step_time_s)
    else:
        every = iters // 100
    every = min(iters, max(1, every))
    return RunLength(tokens, iters, min(warmup, iters), iters, every, step_time_s, per_step)


@dataclass(frozen=True)
class Launch:
    """How to start the emitted job: ``env`` then ``command`` on every node; ``files`` (name -> text) beside the
    config, which the command runs; ``differs`` (what the stack trains differently from asap's model);
    ``to_set`` (what the user must still set, with the option that sets it)."""

    command: str
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    to_set: tuple[str, ...] = ()
    differs: tuple[str, ...] = ()
    where: str = "on the node"

    @property
    def line(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{env} {self.command}".strip()

    def header(self, comment: str = "#") -> str:
        lines = [f"launch ({self.where}): {self.line}"]
        lines += [f"companion file (beside this config, run by the launch line): {name}" for name in self.files]
        lines += [f"differs from asap's model: {d}" for d in self.differs]
        if self.to_set:
            lines.append("you must still set: " + "; ".join(self.to_set))
        return "".join(f"{comment} {ln}\n" for ln in lines)

    def to_dict(self) -> dict:
        return {"command": self.line, "env": dict(self.env), "where": self.where, "files": sorted(self.files),
                "to_set": list(self.to_set), "differs": list(self.differs)}


def torchrun(job: Job, program: str) -> str:
    """``torchrun`` over the cluster's nodes and devices per node, the c10d rendezvous at $MASTER_ADDR (torchrun's
    documented multi-node form; under Slurm each node's task runs it: ``srun --nodes N --ntasks-per-node 1``)."""
    c = job.cluster
    base = f"torchrun --nnodes {c.nodes} --nproc-per-node {c.devices_per_node}"
    if c.nodes > 1:
        base += f" --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:{RDZV_PORT}"
        base = f"srun --nodes {c.nodes} --ntasks-per-node 1 {base}"
    return f"{base} {program}"


def torchrun_where(job: Job) -> str:
    n = job.cluster.nodes
    return f"once, in a Slurm allocation of {n} nodes: srun starts torchrun on each" if n > 1 else "on the node"


def rendezvous_to_set(job: Job) -> tuple[str, ...]:
    """What a multi-node torchrun needs from the user: the rendezvous host."""
    if job.cluster.nodes == 1:
        return ()
    return ("MASTER_ADDR, the first node's address (export MASTER_ADDR=$(scontrol show hostnames "
            "$SLURM_JOB_NODELIST | head -n1))",)


SM100_OR_NEWER = frozenset({"blackwell"})  # the catalog's NVIDIA families from SM100 (B200, GB200, GB300)


def blackwell_or_newer(job: Job) -> bool:
    return job.cluster.accelerator.family in SM100_OR_NEWER
