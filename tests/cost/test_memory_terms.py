"""Memory terms as the stacks allocate them (issue 46.1), hand figures on a 68M-parameter dense model on this
machine's CPU (fp32: 4 B per weight, gradient, and Adam moment):

- torch DDP (the reference trainer's zero 0/1 over dp ranks, torchtitan's ``replicate``): ``param.grad`` and the
  Reducer's flat bucket, 2 x 4 B per parameter; FSDP2 (zero 2/3), tensor or pipeline parallelism: one copy.
"""

import pytest

from asap.spec.job import Job
from asap.cost.estimate import estimate_spelled

GIB = 2 ** 30
MODEL = {"name": "mid-dense", "num_layers": 4, "hidden_size": 1024, "ffn_hidden_size": 2816,
         "num_attention_heads": 8, "vocab_size": 8192}


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    import yaml

    p = tmp_path_factory.mktemp("m") / "mid.yaml"
    p.write_text(yaml.safe_dump(MODEL))
    return str(p)


def job(model_file, framework="asap", cluster="local-cpu"):
    return Job.from_names(model_file, cluster, 4, 128, "fp32", framework=framework, devices=2)


def test_the_parameter_count(model_file):
    h, f, v, layers = 1024, 2816, 8192, 4
    assert job(model_file).model.num_params() == layers * (4 * h * h + 3 * h * f + 2 * h) + 2 * v * h + h


@pytest.mark.parametrize("strategy,copies", [("dp=2,zero=0", 2), ("dp=2,zero=1", 2), ("dp=2,zero=2", 0.5),
                                             ("tp=2", 1), ("pp=2", 1)])
def test_ddp_holds_the_gradients_twice(model_file, strategy, copies):
    j = job(model_file)
    e = estimate_spelled(j, strategy)
    P = j.model.num_params()
    if strategy.startswith("dp"):
        assert e.memory_gb["grads"] == pytest.approx(copies * 4 * P / GIB, rel=1e-6)
    else:  # one copy of the rank's share of the parameters
        assert e.memory_gb["grads"] == pytest.approx(e.memory_gb["weights"], rel=1e-6)


def test_torchtitan_ddp_and_megatron_buffer(model_file):
    P = job(model_file).model.num_params()
    titan = estimate_spelled(job(model_file, "torchtitan"), "dp=2,zero=0")
    assert titan.memory_gb["grads"] == pytest.approx(2 * 4 * P / GIB, rel=1e-6)
    mega = estimate_spelled(job(model_file, "megatron", "dgx-h100-1"), "dp=2,zero=0")
    assert mega.memory_gb["grads"] == pytest.approx(4 * P / GIB, rel=1e-6)


def test_fp32_fsdp2_keeps_its_shards_beside_the_gathered_weights(model_file):
    """fp32 FSDP2 without resharding: the gathered fp32 weights (4 B x P) and the fp32 shards (4 B x P / 2);
    resharding: the shards and two gathered fp32 blocks."""
    j = job(model_file)
    P = j.model.num_params()
    two = estimate_spelled(j, "dp=2,zero=2")
    assert two.memory_gb["weights"] == pytest.approx((4 * P + 4 * P / 2) / GIB, rel=1e-6)
    three = estimate_spelled(j, "dp=2,zero=3")
    block = 4 * 1024 * 1024 + 3 * 1024 * 2816 + 2 * 1024
    largest = max(block, 8192 * 1024)  # the embedding is a unit of its own, larger than a block here
    assert three.memory_gb["weights"] * GIB == pytest.approx(4 * P / 2 + 2 * 4 * largest, rel=1e-6)
