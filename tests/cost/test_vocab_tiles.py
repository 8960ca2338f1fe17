"""MaxText's tiled loss (``num_vocab_tiling``) as the knob ``vocab_tiles`` (issue 46.1): one chunk's logits live
at a time (maxtext/utils/vocabulary_tiling.py: a custom_vjp over jax.lax.scan), the head's forward runs again per
chunk in the backward, only MaxText offers it, the chunks must be equal (configs/types.py), and emit/read carry
it as ``num_vocab_tiling``."""

import json

import pytest

from conftest import assert_one_line_error, run_cli

JOB = ("-m", "llama3-8b", "-c", "tpu-v5p", "--devices", "8", "-b", "32", "-s", "8192", "--framework", "maxtext")


def _estimate(strategy: str) -> dict:
    p = run_cli("estimate", *JOB, "-S", strategy, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_a_tiled_loss_holds_one_chunk_of_the_logits_and_reruns_the_head():
    whole, tiled = _estimate("vtiles1"), _estimate("vtiles4")
    # XLA's logits, 4 B each (bf16 in, fp32 out of the fused loss), 8192 tokens x 128256 on one rank: 3.914 GiB
    # whole, a quarter in four chunks
    assert whole["memory_detail_gb"]["activations_logits"] == pytest.approx(8192 * 128256 * 4 / 2**30, rel=1e-9)
    assert tiled["memory_detail_gb"]["activations_logits"] == pytest.approx(8192 * 128256 * 4 / 4 / 2**30, rel=1e-9)
    assert whole["peak_memory_gb"] - tiled["peak_memory_gb"] > 2.9  # 2.94 GiB less, the allocator's share on top
    # one more forward of the head GEMM: 2 x 8192 x 4096 x 128256 FLOPs at the chip's rate, a few tens of ms
    extra_s = tiled["step_time_s"] - whole["step_time_s"]
    flops = 2 * 8192 * 4096 * 128256 * 4  # four micro-batches per device
    assert 0 < extra_s < 3 * flops / 459e12, extra_s  # v5p: 459 TFLOP/s bf16


def test_only_maxtext_offers_it_and_the_chunks_are_equal():
    p = run_cli("estimate", *JOB[:-2], "--framework", "megatron", "-S", "vtiles4")
    assert_one_line_error(p, "strategy.vocab_tiles")
    assert "not available in megatron" in p.stderr
    p = run_cli("estimate", *JOB, "-S", "vtiles3")
    assert_one_line_error(p, "strategy.vocab_tiles")
    assert "does not divide mbs*seq_len = 8192" in p.stderr


def test_emit_and_read_carry_num_vocab_tiling(tmp_path):
    p = run_cli("emit", "-f", "maxtext", *JOB[:-2], "-S", "vtiles4", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "maxtext.yml").read_text()
    assert "\nnum_vocab_tiling: 4\n" in text
    back = json.loads(run_cli("read", str(tmp_path / "maxtext.yml"), "--json").stdout)
    assert back["strategy"].endswith(",vocab_tiles=4") and back["strategy_compact"] == "vtiles4"
