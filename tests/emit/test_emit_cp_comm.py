"""Context parallelism's exchange (``cp_comm``) in each stack's option: Megatron-LM --cp-comm-type,
Megatron-Bridge's cp_comm_type, MindFormers context_parallel_algo; MaxText runs only its all-gather."""

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
    text = emit_strategy("megatron-bridge", job(), "cp=4,cp_comm=allgather")
    assert "cp_comm_type: allgather" in text


def test_mindformers_context_parallel_algo():
    j = job(cluster="ascend-910b-64")
    pc = yaml.safe_load(emit_strategy("mindformers", j, "tp=4,cp=2,cp_comm=a2a"))["parallel_config"]
    assert pc["context_parallel_algo"] == "ulysses_cp"
    pc = yaml.safe_load(emit_strategy("mindformers", j, "tp=4,cp=2"))["parallel_config"]
    assert pc["context_parallel_algo"] == "colossalai_cp"


def test_maxtext_refuses_the_ring():
    with pytest.raises(AsapError, match="cp_comm"):
        emit_strategy("maxtext", job(), "cp=4,cp_comm=p2p")
