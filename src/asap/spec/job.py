"""The job: what is trained (``ModelSpec``), on what (``Cluster``), how (``TrainSpec``), and with which training
stack (``Framework``), resolved once where the job enters (the CLI, a file, a test: ``Job.from_names`` from the
names the CLI takes, with its checks; ``Job.resolve`` from loaded parts) and passed whole inside.

The stack is the one ``TrainSpec.framework`` names, else the accelerator family's default
(``asap.spec.framework.default_framework``); every pricing, planning, emitting and executing function reads it
as ``job.framework`` instead of looking it up again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from asap.spec.framework import Framework, get_framework
from asap.spec.hardware import Cluster, load_cluster
from asap.spec.loader import load_model
from asap.spec.model import ModelSpec
from asap.spec.train import LOW_PRECISIONS, TrainSpec


@dataclass(frozen=True)
class Job:
    model: ModelSpec
    cluster: Cluster
    train: TrainSpec
    framework: Framework  # the stack TrainSpec.framework names, else the accelerator family's default
    # the user's measured runs that corrected this job's cluster (asap.cost.learning.Learned.apply_job): how many,
    # and their relative residuals' spread after the correction; the prediction interval narrows toward them
    # (asap.cost.bands.shrink_to_learned)
    learned_runs: int = 0
    learned_spread: float | None = None

    @classmethod
    def resolve(cls, model: ModelSpec, cluster: Cluster, train: TrainSpec) -> "Job":
        """The job of ``model`` on ``cluster`` trained as ``train``, its framework looked up once."""
        return cls(model, cluster, train, get_framework(train.framework, cluster.accelerator.family))

    @classmethod
    def from_names(cls, model: str | dict | ModelSpec, cluster: str | dict | Cluster, global_batch: int,
                   seq_len: int, precision: str = "bf16", framework: str | None = None, moe_imbalance: float = 1.0,
                   nodes: int | None = None, devices: int | None = None, fused_kernels: bool | None = None,
                   memory_margin_gb: float = 0.0) -> "Job":
        """The job the CLI's options name, with every check the CLI makes, each a one-line ``AsapError``: the
        model (a preset, a native file or a Hugging Face config.json), the cluster (a preset, a catalog name or a
        file; ``nodes``/``devices`` override its size), the training spec, then the precision's peak on the
        accelerator (a 16-bit peak for the weights' dtype, and the quantised GEMMs' own peak for fp8/fp4, which
        not every part has: fp4 needs Blackwell or CDNA4)."""
        m = load_model(model)
        c = load_cluster(cluster, nodes=nodes, devices=devices)
        t = TrainSpec(global_batch, seq_len, precision, framework, moe_imbalance, fused_elementwise=fused_kernels,
                      memory_margin_gb=memory_margin_gb)
        c.accelerator.peak_flops("bf16" if precision in LOW_PRECISIONS else precision)
        if precision in LOW_PRECISIONS:
            c.accelerator.peak_flops(precision)
        return cls.resolve(m, c, t)

    def with_train(self, train: TrainSpec) -> "Job":
        """The same model and cluster trained as ``train`` (its framework resolved again)."""
        resolved = Job.resolve(self.model, self.cluster, train)
        return replace(resolved, learned_runs=self.learned_runs, learned_spread=self.learned_spread)

    @property
    def devices(self) -> int:
        """The cluster's device count."""
        return self.cluster.num_devices
