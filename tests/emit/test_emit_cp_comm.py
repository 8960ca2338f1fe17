"""Context parallelism's exchange (``cp_comm``) in each stack's option: Megatron-LM --cp-comm-type,
Megatron-Bridge's cp_comm_type (Transformer Engine's spelling: all_gather), MindFormers context_parallel_algo,
MaxText context_parallel_strategy (all_gather by default, ulysses; no ring)."""

import shlex

import pytest
import yaml

from asap.search.advice import emit_strategy
from asap.errors import AsapError
from asap.spec.job import Job


def megatron_flags(text):
    toks = shlex.split(text.replace("\\\n", " "), comments=True)
    return {t: toks[i + 1] if i + 1 < len(toks) and not toks[i + 1].startswith("--") else None
            for i, t in enumerate(toks) if t.startswith("--")}


def job(cluster="dgx-h100-8", s=32768):
    return Job.from_names("llama3-8b", cluster, 64, s, "bf16")


def test_megatron_cp_comm_type():
    a = megatron_flags(emit_strategy("megatron", job(), "cp=4,cp_comm=a2a"))
    assert a["--cp-comm-type"] == "a2a" and a["--context-parallel-size"] == "4"
    assert "--cp-comm-type" not in megatron_flags(emit_strategy("megatron", job(), "cp=4"))  # p2p, the default
    # TE's attn_forward_func_with_cp takes all_gather and raises on Megatron's help's "allgather"
    text = emit_strategy("megatron-bridge", job(), "cp=4,cp_comm=allgather")
    assert "cp_comm_type: all_gather" in text
    assert megatron_flags(emit_strategy("megatron", job(), "cp=4,cp_comm=allgather"))["--cp-comm-type"] == "all_gather"


def test_mindformers_context_parallel_algo():
    j = job(cluster="ascend-910b-64")
    pc = yaml.safe_load(emit_strategy("mindformers", j, "tp=4,cp=2,cp_comm=a2a"))["parallel_config"]
    assert pc["context_parallel_algo"] == "ulysses_cp"
    pc = yaml.safe_load(emit_strategy("mindformers", j, "tp=4,cp=2"))["parallel_config"]
    assert pc["context_parallel_algo"] == "colossalai_cp"


def test_maxtext_refuses_the_ring():
    with pytest.raises(AsapError, match="cp_comm"):
        emit_strategy("maxtext", job(), "cp=4,cp_comm=p2p")


def test_maxtext_ulysses():
    """cp_comm=a2a is MaxText's context_parallel_strategy ulysses; its default all_gather is left unwritten."""
    j = job(cluster="v5p-512", s=32768)
    assert yaml.safe_load(emit_strategy("maxtext", j, "cp=4,cp_comm=a2a"))["context_parallel_strategy"] == "ulysses"
    assert "context_parallel_strategy" not in yaml.safe_load(emit_strategy("maxtext", j, "cp=4"))


@pytest.mark.parametrize("fmt,comm", [("maxtext", "a2a"), ("megatron", "allgather"), ("megatron-bridge", "allgather")])
def test_read_back(fmt, comm, tmp_path):
    """What emit writes for the exchange reads back as the same cp_comm (all_gather for TE, ulysses for
    MaxText); MaxText's ring and an unbalanced MaxText split are refused in one line."""
    from dataclasses import replace

    from asap.emit import FRAMEWORK_OF
    from asap.emit.read import read_job

    j = job(cluster="v5p-512" if fmt == "maxtext" else "dgx-h100-8", s=32768)
    j = j.with_train(replace(j.train, framework=FRAMEWORK_OF[fmt]))
    path = tmp_path / ("job.yml" if fmt != "megatron" else "job.sh")
    path.write_text(emit_strategy(fmt, j, f"cp=4,cp_comm={comm}"))
    assert read_job(path, fmt, cluster=j.cluster).strategy.cp_comm == comm
    if fmt == "maxtext":
        for key, value in (("context_parallel_strategy", "ring"), ("context_parallel_load_balance", "false")):
            cfg = yaml.safe_load(path.read_text()) | {key: value}
            path.write_text(yaml.safe_dump(cfg))
            with pytest.raises(AsapError, match=key):
                read_job(path, fmt, cluster=j.cluster)
            cfg.pop(key)
            path.write_text(yaml.safe_dump(cfg | {"context_parallel_strategy": "ulysses"}))


@pytest.mark.parametrize("fmt", ["megatron", "megatron-bridge"])
def test_hierarchical_cp_round_trip(fmt, tmp_path):
    """a2a+p2p writes --hierarchical-context-parallel-sizes 2 2 (hierarchical_context_parallel_sizes: [2, 2])
    and reads back as cp_comm a2a+p2p with cp_a2a 2."""
    from asap.emit.read import read_job

    j = job()
    text = emit_strategy(fmt, j, "cp=4,cp_comm=a2a+p2p,cp_a2a=2")
    if fmt == "megatron":
        flags = megatron_flags(text)
        assert flags["--cp-comm-type"] == "a2a+p2p" and "--hierarchical-context-parallel-sizes 2 2" in text
    else:
        assert yaml.safe_load(text)["model"]["hierarchical_context_parallel_sizes"] == [2, 2]
    path = tmp_path / ("job.sh" if fmt == "megatron" else "job.yaml")
    path.write_text(text)
    got = read_job(path, fmt, cluster=j.cluster).strategy
    assert (str(got.cp_comm), got.cp_a2a) == ("a2a+p2p", 2)


def test_torchtitan_cp_defaults_only(tmp_path):
    """torchtitan's context parallelism is read as torch's defaults (head-tail balance, all-gather rotation);
    an unbalanced split or the all-to-all rotation is refused naming the key."""
    from dataclasses import replace

    from asap.emit.read import read_job

    j = job()
    j = j.with_train(replace(j.train, framework="torchtitan"))
    text = emit_strategy("torchtitan", j, "cp=4")
    path = tmp_path / "job.toml"
    path.write_text(text)
    assert read_job(path, "torchtitan", cluster=j.cluster).strategy.cp == 4
    for key, value in (("context_parallel_load_balancer", '""'), ("context_parallel_rotate_method", '"alltoall"')):
        path.write_text(text.replace("[parallelism]\n", f"[parallelism]\n{key} = {value}\n"))
        with pytest.raises(AsapError, match=key):
            read_job(path, "torchtitan", cluster=j.cluster)
