"""Hybrid sharded data parallelism (``dp_replicate``) in each stack's own option: torchtitan
data_parallel_replicate_degree x data_parallel_shard_degree, MaxText dcn_data_parallelism x ici_fsdp_parallelism,
Megatron-LM --num-distributed-optimizer-instances (Megatron-Bridge ddp.num_distributed_optimizer_instances),
DeepSpeed MiCS mics_shard_size, MindFormers parallel_optimizer_config.optimizer_weight_shard_size."""

import json
import shlex
import tomllib

import pytest
import yaml

from asap.search.advice import emit_strategy
from asap.errors import AsapError
from asap.spec.job import Job


def job(model="llama3-8b", cluster="dgx-h100-8", b=256, s=4096, precision="bf16"):
    return Job.from_names(model, cluster, b, s, precision)


def test_torchtitan_hsdp_degrees():
    p = tomllib.loads(emit_strategy("torchtitan", job(), "tp=2,zero=3,dp_replicate=4"))["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (4, 8)
    p = tomllib.loads(emit_strategy("torchtitan", job(), "tp=2,zero=2,dp_replicate=2"))["parallelism"]
    assert (p["data_parallel_replicate_degree"], p["data_parallel_shard_degree"]) == (2, 16)
    assert p["fsdp_reshard_after_forward"] == "never"


def test_maxtext_hsdp_mesh_puts_the_replicas_across_slices():
    # 8 GPU nodes as 8 slices, dp=8 over tp=8: the replicas (data) take the slices, fsdp stays inside
    cfg = yaml.safe_load(emit_strategy("maxtext", job(), "tp=4,zero=3,dp_replicate=8"))
    assert cfg["dcn_data_parallelism"] == 8 and cfg["ici_data_parallelism"] == 1
    assert cfg["ici_fsdp_parallelism"] * cfg["dcn_fsdp_parallelism"] == 2 and cfg["dcn_fsdp_parallelism"] == 1
    cfg = yaml.safe_load(emit_strategy("maxtext", job(), "tp=4,zero=3"))  # no replicas: fsdp over everything
    assert cfg["dcn_fsdp_parallelism"] == 8 and cfg["dcn_data_parallelism"] == 1


def megatron_flags(text):
    toks = shlex.split(text.replace("\\\n", " "), comments=True)
    return {t: toks[i + 1] if i + 1 < len(toks) and not toks[i + 1].startswith("--") else None
            for i, t in enumerate(toks) if t.startswith("--")}


def test_megatron_distributed_optimizer_instances():
    a = megatron_flags(emit_strategy("megatron", job(), "tp=8,zero=1,dp_replicate=2"))
    assert a["--num-distributed-optimizer-instances"] == "2" and "--use-distributed-optimizer" in a
    a = megatron_flags(emit_strategy("megatron", job(), "tp=4,zero=3,dp_replicate=4"))
    assert a["--num-distributed-optimizer-instances"] == "4" and "--use-megatron-fsdp" in a
    assert "--num-distributed-optimizer-instances" not in megatron_flags(emit_strategy("megatron", job(), "tp=8"))
    cfg = yaml.safe_load(emit_strategy("megatron-bridge", job(), "tp=8,zero=1,dp_replicate=2"))
    assert cfg["ddp"]["num_distributed_optimizer_instances"] == 2


def test_deepspeed_mics_shard_size():
    cfg = json.loads(emit_strategy("deepspeed", job(), "zero=3,dp_replicate=8"))
    assert cfg["zero_optimization"] == {"stage": 3, "mics_shard_size": 8}
    with pytest.raises(AsapError, match="strategy.dp_replicate.*MiCS"):  # MiCS groups are runs of global ranks
        emit_strategy("deepspeed", job(), "tp=2,zero=3,dp_replicate=2")


def test_mindformers_optimizer_weight_shard_size():
    j = job(cluster="ascend-910b-64")
    cfg = yaml.safe_load(emit_strategy("mindformers", j, "tp=8,zero=1,dp_replicate=2"))
    assert cfg["parallel"]["parallel_optimizer_config"] == {"optimizer_weight_shard_size": j.devices // 8 // 2}
    assert cfg["parallel"]["enable_parallel_optimizer"] is True


@pytest.mark.parametrize("fmt,strategy,needle", [
    ("torchtitan", "zero=0,dp_replicate=2", "zero=0"),  # the legality table: no shard group under zero 0
    ("maxtext", "zero=0,dp_replicate=2", "zero=0"),
    ("megatron", "tp=8,zero=3,dp_replicate=3", "does not divide dp=8"),
    ("mindformers", "tp=8,zero=0,dp_replicate=2", "zero=0"),
])
def test_hsdp_refusals_name_the_knob(fmt, strategy, needle):
    cluster = "ascend-910b-64" if fmt == "mindformers" else "dgx-h100-8"
    with pytest.raises(AsapError, match=f"strategy.dp_replicate.*{needle}"):
        emit_strategy(fmt, job(cluster=cluster), strategy)
