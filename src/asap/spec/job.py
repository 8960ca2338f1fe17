"""The job: what is trained (``ModelSpec``), on what (``Cluster``), how (``TrainSpec``), and with which training
stack (``Framework``), resolved once where the job enters (the CLI, a file, a test) and passed whole inside.

The stack is the one ``TrainSpec.framework`` names, else the accelerator family's default
(``asap.spec.framework.default_framework``); every pricing, planning, emitting and executing function reads it
as ``job.framework`` instead of looking it up again.
"""

from __future__ import annotations

from dataclasses import dataclass

from asap.spec.framework import Framework, get_framework
from asap.spec.hardware import Cluster
from asap.spec.model import ModelSpec
from asap.spec.train import TrainSpec


@dataclass(frozen=True)
class Job:
    model: ModelSpec
    cluster: Cluster
    train: TrainSpec
    framework: Framework  # the stack TrainSpec.framework names, else the accelerator family's default

    @classmethod
    def resolve(cls, model: ModelSpec, cluster: Cluster, train: TrainSpec) -> "Job":
        """The job of ``model`` on ``cluster`` trained as ``train``, its framework looked up once."""
        return cls(model, cluster, train, get_framework(train.framework, cluster.accelerator.family))

    def with_train(self, train: TrainSpec) -> "Job":
        """The same model and cluster trained as ``train`` (its framework resolved again)."""
        return Job.resolve(self.model, self.cluster, train)

    @property
    def devices(self) -> int:
        """The cluster's device count."""
        return self.cluster.num_devices
