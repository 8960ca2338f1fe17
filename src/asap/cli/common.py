"""Helpers shared by the CLI commands: JSON output, stderr console, the job's options.

The job's options (``--model``, ``--cluster``, ``-b``, ``-s``, ``--precision``, ``--framework``,
``--moe-imbalance``, ``--nodes``, ``--devices``, ``--lengths``, ``--fused-kernels``, ``--memory-margin``) are
declared once here (``JOB_OPTIONS``): a command lists the ones it takes as ``name=JOB`` in the place its
``--help`` shows them, and ``@job_options`` gives each its declaration and hands the command all of them as one
``JobOptions``, whose ``load()`` builds the ``asap.spec.job.Job`` with the same one-line errors everywhere.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import sys
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console

from asap.cli.choices import FRAMEWORK_ALIASES, FRAMEWORKS, PRECISIONS, choice

if TYPE_CHECKING:
    from asap.spec.job import Job

# messages, never wrapped: one line each, and a path a user copies stays whole
err_console = Console(stderr=True, soft_wrap=True)


# wide enough for the tables when stdout is a file or a pipe (Rich would otherwise wrap at 80 columns)
out_console = Console() if sys.stdout.isatty() else Console(width=160)


def strategy_column(table, names: list[str], header: str = "strategy") -> None:
    """A strategy column that wraps between the compact notation's tokens and never cuts one off: at least as
    wide as the longest token (Rich folds, rather than truncates, anything longer)."""
    table.add_column(header, justify="left", overflow="fold", min_width=max(widest_token(names, 8), len(header)))


def widest_token(names: list[str], default: int = 0) -> int:
    """The longest token of the compact notation among ``names`` (the least a strategy column may be)."""
    return max((len(tok) for name in names for tok in name.split()), default=default)


def _clean(obj: Any) -> Any:
    """Make numpy scalars, tuples and non-finite floats JSON-safe."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def print_json(obj: Any) -> None:
    """Exactly one JSON document on stdout."""
    sys.stdout.write(json.dumps(_clean(obj), indent=2) + "\n")
    sys.stdout.flush()


ModelOpt = typer.Option(..., "--model", "-m", help="Preset name, native model file (YAML/JSON) or HF config.json.")
ClusterOpt = typer.Option(..., "--cluster", "-c", help="Cluster preset, accelerator name, or cluster file.")
NodesOpt = typer.Option(None, "--nodes", help="Override the cluster's node count.")
DevicesOpt = typer.Option(None, "--devices", help="Override the cluster's device count.")
SlicesOpt = typer.Option(None, "--slices", help="This many copies of the cluster (after --nodes/--devices) joined by "
                                                "the scale-out network, each its own scale-up domain: TPU multislice "
                                                "(v5p-512 --slices 4: four 256-chip slices over DCN), or racks.")
BatchOpt = typer.Option(..., "--global-batch", "-b", help="Global batch in sequences.")
SeqOpt = typer.Option(..., "--seq-len", "-s", help="Sequence length in tokens.")
PrecisionOpt = choice("bf16", "--precision", values=PRECISIONS, what="precision",
                      help="The training precision (fp8, nvfp4 and mxfp4: the GEMMs quantised, the rest of the step in "
                           "bf16; nvfp4 and mxfp4 need an accelerator with an fp4 peak).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")
FrameworkOpt = choice(None, "--framework", values=FRAMEWORKS, aliases=FRAMEWORK_ALIASES, what="framework",
                      help="The stack whose semantics the cost model follows (default by accelerator family: GPU "
                           "megatron, TPU maxtext, Ascend mindspore, CPU asap, the reference trainer; megatron-bridge "
                           "runs Megatron-Core and is priced as megatron).")
LengthsOpt = typer.Option(None, "--lengths", help="A JSON file of packed samples (lists of document lengths) or "
                                                  "document lengths: price the attention work they leave on the "
                                                  "slowest data-parallel rank (see asap balance).")
FusedOpt = typer.Option(None, "--fused-kernels/--eager-kernels",
                        help="Price norms, RoPE, activations and residual adds as fused kernels (torch.compile, "
                             "Transformer Engine) or eager ones (default: the stack's; torchtitan and the reference "
                             "trainer are eager): the gain of torch.compile is the difference.")
TokensOpt = typer.Option(None, "--tokens", help="A training budget in tokens (15T, 300B, 2e12): adds the time to "
                                                "train and the device-hours.")
PriceOpt = typer.Option(None, "--price-per-device-hour", help="With --tokens: the cost at this price per device-hour.")
MemoryMarginOpt = typer.Option(None, "--memory-margin", min=0.0,
                               help="GiB per device to keep free: a strategy fits when its peak (the stack's runtime "
                                    "share included) is at most the device's reported memory less this. Default: "
                                    "plan keeps 8% of the device free (the headroom for allocator fragmentation "
                                    "and NCCL buffers; 0 plans to the edge), estimate and validate none.")
MoEImbalanceOpt = typer.Option(1.0, "--moe-imbalance", min=1.0,
                               help="Tokens on the busiest expert rank over the mean (1.0: force-balanced routing).")


@dataclass(frozen=True)
class JobOptions:
    """The job's options as a command was given them (a command without one keeps its default here)."""

    model: str
    cluster: str
    global_batch: int
    seq_len: int
    precision: str = "bf16"
    framework: Optional[str] = None
    moe_imbalance: float = 1.0
    nodes: Optional[int] = None
    devices: Optional[int] = None
    lengths: Optional[str] = None
    fused_kernels: Optional[bool] = None
    memory_margin: Optional[float] = None  # None: the command's default (plan: the headroom; else 0)
    slices: Optional[int] = None

    def load(self) -> "Job":
        """The job with every option applied, ``--lengths`` included (``load_lengths``)."""
        return self.load_lengths()[0]

    def load_choosing(self) -> "Job":
        """The job of a command that chooses a strategy (``plan``, ``compare --plan-best``, ``propose``, ``tune``):
        ``--memory-margin`` kept free per device, or unset the one default headroom
        (``asap.search.planner.plan_headroom``), so that every command's best is the same row. ``estimate`` and
        ``validate`` judge against the device (``load``) and report ``fits_with_headroom`` beside it."""
        from asap.search.planner import plan_headroom

        return plan_headroom(self.load(), self.memory_margin)

    def load_lengths(self) -> tuple["Job", Any, Any]:
        """(the job with every option applied; the ``--lengths`` file's attention work and its parsed document,
        both None without one: ``asap.balance.with_lengths``)."""
        if self.lengths is None:
            return self.job_without_lengths(), None, None
        from asap.balance import with_lengths

        return with_lengths(self.job_without_lengths(), self.lengths)

    def job_without_lengths(self) -> "Job":
        """The job of the other options, validated with one-line errors: the model, the cluster, the train spec,
        then the precision's peak on the accelerator."""
        from asap.spec.job import Job

        if self.slices is not None:  # --slices: the cluster of that many copies (asap.spec.hardware.with_slices)
            from asap.spec.hardware import load_cluster
            from asap.spec.loader import load_model
            from asap.spec.train import LOW_PRECISIONS, TrainSpec

            m = load_model(self.model)
            c = load_cluster(self.cluster, nodes=self.nodes, devices=self.devices, slices=self.slices)
            t = TrainSpec(self.global_batch, self.seq_len, self.precision, self.framework, self.moe_imbalance,
                          fused_elementwise=self.fused_kernels, memory_margin_gb=self.memory_margin or 0.0)
            c.accelerator.peak_flops("bf16" if self.precision in LOW_PRECISIONS else self.precision)
            if self.precision in LOW_PRECISIONS:
                c.accelerator.peak_flops(self.precision)
            return Job.resolve(m, c, t)
        return Job.from_names(self.model, self.cluster, self.global_batch, self.seq_len, self.precision,
                              self.framework, self.moe_imbalance, self.nodes, self.devices, self.fused_kernels,
                              self.memory_margin or 0.0)

    def args(self) -> str:
        """The options as they must follow a printed command so that it prices the same job (shell-quoted; the
        ones at their defaults left out)."""
        from shlex import quote

        parts = ["-m", quote(self.model), "-c", quote(self.cluster)]
        parts += ["--nodes", str(self.nodes)] if self.nodes is not None else []
        parts += ["--devices", str(self.devices)] if self.devices is not None else []
        parts += ["--slices", str(self.slices)] if self.slices is not None else []
        parts += ["-b", str(self.global_batch), "-s", str(self.seq_len)]
        parts += ["--precision", quote(self.precision)] if self.precision != "bf16" else []
        parts += ["--framework", quote(self.framework)] if self.framework else []
        parts += ["--moe-imbalance", f"{self.moe_imbalance:g}"] if self.moe_imbalance != 1.0 else []
        parts += [] if self.fused_kernels is None else ["--fused-kernels" if self.fused_kernels else "--eager-kernels"]
        parts += ["--lengths", quote(self.lengths)] if self.lengths else []
        return " ".join(parts)


# each job option's type and declaration, by its parameter name (JobOptions' fields)
JOB_OPTIONS: dict[str, tuple[Any, Any]] = {
    "model": (str, ModelOpt), "cluster": (str, ClusterOpt), "global_batch": (int, BatchOpt), "seq_len": (int, SeqOpt),
    "precision": (str, PrecisionOpt), "framework": (Optional[str], FrameworkOpt),
    "moe_imbalance": (float, MoEImbalanceOpt), "nodes": (Optional[int], NodesOpt),
    "devices": (Optional[int], DevicesOpt), "lengths": (Optional[str], LengthsOpt),
    "fused_kernels": (Optional[bool], FusedOpt), "memory_margin": (Optional[float], MemoryMarginOpt),
    "slices": (Optional[int], SlicesOpt)}
assert set(JOB_OPTIONS) == {f.name for f in fields(JobOptions)}


class _JobOption:
    def __repr__(self) -> str:
        return "JOB"


JOB: Any = _JobOption()  # a command parameter's default: "the job option of this name, declared in JOB_OPTIONS"
# The ``options`` parameter's default: ``job_options`` always passes the JobOptions (and hides the parameter
# from Typer), so the command reads it as one; typed Any, as JOB is.
OPTIONS: Any = None


def job_options(command):
    """A command whose parameters default to ``JOB`` takes those job options, each with its one declaration
    (``JOB_OPTIONS``) in the place the command lists it; the command gets them together as ``options``."""
    sig = inspect.signature(command)
    names = [p.name for p in sig.parameters.values() if p.default is JOB]
    params = [p.replace(annotation=JOB_OPTIONS[p.name][0], default=JOB_OPTIONS[p.name][1]) if p.name in names else p
              for p in sig.parameters.values() if p.name != "options"]

    @functools.wraps(command)
    def run(**kwargs):
        options = JobOptions(**{name: kwargs.pop(name) for name in names})
        return command(options=options, **kwargs)

    run.__signature__ = sig.replace(parameters=params)
    run.__annotations__ = {k: v for k, v in command.__annotations__.items() if k not in names and k != "options"}
    return run


LearnMemoryOpt = typer.Option(None, "--memory", help="A Sharding Memory (SQLite) file with measured runs (asap learn): "
                                                     "price with the cost model's terms corrected by the runs of the "
                                                     "same stack on the same accelerator family (JSON: learned_from, "
                                                     "corrections).")


def with_learned(job: "Job", memory: Optional[str]) -> tuple["Job", dict[str, Any]]:
    """``job`` corrected by the measured runs in ``memory`` (``asap.learn.learned_job``) and the JSON fields that
    say so (``learned_from``, ``corrections``); without ``memory``: the job as it is and no fields."""
    if memory is None:
        return job, {}
    from asap.learn import learned_fields, learned_job, learned_text

    job, learned = learned_job(job, memory)
    return job, {**learned_fields(learned), "learned": learned_text(learned)}


def print_learned(fields: dict[str, Any]) -> None:
    """The human output's line: which runs corrected the model and by how much."""
    if fields:
        out_console.print(fields["learned"], highlight=False, soft_wrap=True)
