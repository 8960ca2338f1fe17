"""asap: find, explain and verify the fastest way to train a large language model on a given cluster.

The importable API (the CLI is a thin face over it):

    from asap import load_model, load_cluster, parse_strategy, TrainSpec, Job, estimate

    job = Job.resolve(load_model("llama3-8b"), load_cluster("h100-sxm", nodes=1), TrainSpec(64, 4096))
    estimate(job, "tp=2")  # the job's framework is resolved once, in Job.resolve
"""

from asap.errors import AsapError
from asap.version import __version__

__all__ = ["AsapError", "__version__", "load_model", "load_cluster", "parse_strategy", "TrainSpec", "Job", "estimate"]


def __getattr__(name):  # lazy: keep `import asap` cheap for the CLI
    if name in ("load_model",):
        from asap.spec.loader import load_model

        return load_model
    if name in ("load_cluster",):
        from asap.spec.hardware import load_cluster

        return load_cluster
    if name in ("parse_strategy",):
        from asap.spec.strategy import parse_strategy

        return parse_strategy
    if name == "TrainSpec":
        from asap.spec.train import TrainSpec

        return TrainSpec
    if name == "Job":
        from asap.spec.job import Job

        return Job
    if name == "estimate":
        from asap.cost.estimate import estimate_spelled  # the edge: text or a mapping is parsed here

        return estimate_spelled
    raise AttributeError(name)
