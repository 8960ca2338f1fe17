"""MaxText remat policies (``recompute=save_qkv_proj``, ``recompute=custom:...``) emitted as base.yml keys, and
refused by every other stack in one line."""

import pytest
import yaml

from asap.search.advice import emit_strategy
from asap.errors import AsapError
from asap.spec.remat import TENSORS
from asap.spec.job import Job


def job():
    return Job.from_names("llama3-8b", "v5p-512", 256, 8192, "bf16")


@pytest.mark.parametrize("policy", ["minimal", "save_qkv_proj", "save_dot_except_mlp", "save_out_proj",
                                    "qkv_proj_offloaded", "minimal_offloaded"])
def test_named_policy(policy):
    cfg = yaml.safe_load(emit_strategy("maxtext", job(), f"zero=3,recompute={policy}"))
    assert cfg["remat_policy"] == policy and "decoder_layer_input" not in cfg


def test_custom_sets_every_tensor():
    cfg = yaml.safe_load(emit_strategy("maxtext", job(),
                                       "zero=3,recompute=custom:decoder_layer_input=offload+query_proj=device"))
    assert cfg["remat_policy"] == "custom"
    assert {t: cfg[t] for t in TENSORS} == {t: {"decoder_layer_input": "offload", "query_proj": "device"}.get(
        t, "remat") for t in TENSORS}


def test_compact_spelling_round_trips():
    cfg = yaml.safe_load(emit_strategy("maxtext", job(), "zero3 rc:custom:out_proj=offload"))
    assert cfg["out_proj"] == "offload" and cfg["decoder_layer_input"] == "device"


def test_offload_act_with_a_policy_is_refused():
    with pytest.raises(AsapError, match="offload_act"):
        emit_strategy("maxtext", job(), "zero=3,recompute=minimal,offload_act=1")


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan", "deepspeed"])
def test_other_stacks_refuse(fmt):
    j = Job.from_names("llama3-8b", "dgx-h100-8", 256, 4096, "bf16")
    with pytest.raises(AsapError, match="recompute") as e:
        emit_strategy(fmt, j, "tp=2,recompute=save_qkv_proj")
    assert "\n" not in str(e.value)
