"""``estimate --explain`` lists the parts of each memory term (issue 46.1) and ``--json`` gives them as
``memory_detail_gb``: the weights FSDP/ZeRO-3 holds gathered, FSDP2's gradient reduction buffers, the loss's
logits; each part is inside its term."""

import json

import pytest

from conftest import run_cli

JOB = ("-m", "llama3-8b", "-c", "dgx-h100-1node", "-b", "32", "-s", "4096", "-S", "tp2 zero3",
       "--framework", "torchtitan")


def test_the_parts_of_each_memory_term():
    out = json.loads(run_cli("estimate", *JOB, "--json").stdout)
    detail, terms = out["memory_detail_gb"], out["memory_gb"]
    # the logits of one micro-batch on a tensor-parallel rank's vocabulary shard under torchtitan's loss_parallel,
    # four fp32 tensors per logit (torch's _nll_loss_and_log_softmax_backward; Framework.logits_bytes):
    # 4096 tokens x 128256 / 2 x 16 B = 3.914 GiB
    assert detail["activations_logits"] == pytest.approx(4096 * 128256 / 2 * 16 / 2**30, rel=1e-9)
    assert detail["activations_cp_buffers"] == 0.0  # no context parallelism: no ring buffers
    assert detail["allowance_tp_comm_buffers"] == 0.0  # torchtitan's DTensor TP: no Transformer Engine userbuffers
    assert detail["allowance_ep_comm_buffers"] == 0.0  # a dense model: no DeepEP buffers
    empty = ("activations_cp_buffers", "allowance_tp_comm_buffers", "allowance_ep_comm_buffers")
    for part, gb in detail.items():
        assert (part in empty or 0 < gb) and gb <= terms[part.split("_")[0]] + 1e-9, (part, gb)
    text = run_cli("estimate", *JOB, "--explain").stdout
    lines = [ln for ln in text.splitlines() if "of which" in ln]
    assert [w for w in ("gathered by FSDP", "gradient reduction buffers", "logits of one micro-batch")
            if any(w in ln for ln in lines)] == ["gathered by FSDP", "gradient reduction buffers",
                                                 "logits of one micro-batch"], text


def test_a_plain_data_parallel_run_has_no_gathered_weights():
    out = json.loads(run_cli("estimate", "-m", "llama3-8b", "-c", "dgx-h100-1node", "-b", "32", "-s", "4096",
                             "-S", "zero1", "--json").stdout)
    assert out["memory_detail_gb"]["weights_gathered"] == 0
    assert out["memory_detail_gb"]["grads_reduce_buffers"] == 0
