"""The job resolved once (asap.spec.job.Job), from loaded parts or from the names the CLI takes."""

from dataclasses import replace

import pytest

from asap import Job, TrainSpec, load_cluster, load_model
from asap.errors import AsapError


def test_resolve_names_the_stack_once():
    m = load_model("tiny-dense")
    assert Job.resolve(m, load_cluster("h100-sxm", devices=8), TrainSpec(8, 64)).framework.name == "megatron"
    assert Job.resolve(m, load_cluster("tpu-v5p", devices=8), TrainSpec(8, 64)).framework.name == "maxtext"
    job = Job.resolve(m, load_cluster("h100-sxm", devices=8), TrainSpec(8, 64, framework="torchtitan"))
    assert job.framework.name == "torchtitan" and job.devices == 8
    assert job.with_train(replace(job.train, framework=None)).framework.name == "megatron"


def test_from_names_makes_the_checks_the_cli_makes():
    """The job from the names the CLI takes, with its one-line errors (the precision's peak on the part too)."""
    job = Job.from_names("tiny-dense", "local-cpu", 8, 64, "fp32", devices=2, fused_kernels=False)
    assert job.framework.name == "asap" and job.devices == 2 and job.train.fused_elementwise is False
    assert Job.from_names("llama3-8b", "h100-sxm", 8, 64, framework="torchtitan", nodes=2).devices == 16
    with pytest.raises(AsapError, match="global-batch: must be a positive integer"):
        Job.from_names("tiny-dense", "local-cpu", 0, 64)
    with pytest.raises(AsapError, match="nvfp4"):
        Job.from_names("llama3-8b", "h100-sxm", 8, 64, "nvfp4")  # Hopper has no fp4 peak
