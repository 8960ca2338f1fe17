"""The ``sim`` executor: the cost model stands in for the cluster (``asap.cost.estimate.estimate``)."""

from __future__ import annotations

from asap.execute.base import Executor
from asap.spec.outcome import Failure, Measurement, Result
from asap.spec.job import Job
from asap.spec.strategy import Strategy, resolve_strategy
from asap.spec.words import FailureKind


class SimExecutor(Executor):
    """A predicted step time for every strategy; one that does not fit in memory is a failed trial (oom)."""

    name = "sim"

    def __init__(self, job: Job):
        self.job = job
        self.model, self.cluster, self.train = job.model, job.cluster, job.train

    @property
    def machine(self) -> str:
        """What the trials are "measured" on: the machine's name and a digest of every figure that prices it
        (Memory keeps trials on different sim machines apart)."""
        import dataclasses
        import hashlib
        import json

        acc = self.cluster.accelerator
        figures = {"cluster": self.cluster.to_dict(), "accelerator": dataclasses.asdict(acc)}
        digest = hashlib.sha1(json.dumps(figures, sort_keys=True, default=str).encode()).hexdigest()[:12]
        return f"sim {self.cluster.name or acc.name} {digest}"

    def parse(self, spelled: str | dict) -> Strategy:
        return resolve_strategy(spelled, self.model, self.train, self.cluster.num_devices)

    def _run(self, s: Strategy) -> Result:
        from asap.cost.estimate import estimate  # the cost model is an optional layer for this module

        est = estimate(self.job, s)
        details = est.to_dict()
        if not est.fits:
            return Failure(s, f"does not fit: predicted peak memory {est.peak_memory_gb:.1f} GiB reserved per device "
                              f"> {self.cluster.hbm_gb:g} GiB", kind=FailureKind.OOM, details=details)
        return Measurement(s, est.step_time_s, tokens_per_s=est.tokens_per_s,
                           peak_memory_gb=est.peak_memory_gb, predicted=True, details=details)
