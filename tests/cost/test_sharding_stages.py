"""Each stack's sharding stages as the stack allocates them (issue 45.1), hand figures on Llama 3 70B
(70,553,706,496 parameters; a block 855,654,400: attention 2 x 8192^2 + 2 x 8192 x 1024, SwiGLU 3 x 8192 x 28672,
two norms) on 8 DGX H100 nodes (64 GPUs), 256 x 8192 tokens.

- FSDP2 without resharding (torchtitan ``fsdp_reshard_after_forward = "never"``, ``apply_fsdp``'s "never"
  policy; the reference trainer's ``fully_shard(reshard_after_forward=False)``): every block's unsharded bf16
  parameters live from its forward to its backward (``FSDPParamGroup.post_forward`` reshards only when
  ``_reshard_after_forward``), so at the end of the forward the whole model: 2 B x 70.55e9 = 131.42 GiB.
- FSDP2 resharding (zero 3): two blocks gathered (the one computing and the one prefetched), 2 x 2 B x 855.65e6.
- DeepSpeed ZeRO-2 (``stage_1_and_2.py``): the 16-bit parameters stay whole (2 B x P), the fp32 gradients and
  optimizer states are partitioned; ZeRO-3 (``stage3.py``): the largest submodule (a third of a block) plus the
  prefetch bucket (``stage3_prefetch_bucket_size`` 5e7 parameters) gathered, in bf16.
- Megatron-Core's distributed optimizer (zero 1): bf16 parameters and the fp32 main-grad buffer whole, the
  fp32 master and Adam states (12 B) sharded over dp.
"""

import json

import pytest

from conftest import run_cli

from asap.spec.job import Job
from asap.cost.estimate import estimate_spelled

GIB = 2 ** 30
PARAMS = 70_553_706_496
BLOCK = 855_654_400


def job(framework):
    return Job.from_names("llama3-70b", "dgx-h100-8node", 256, 8192, "bf16", framework=framework)


def test_the_hand_counts_are_the_model_s():
    j = job("torchtitan")
    assert j.model.num_params() == PARAMS
    h, ffn, kv = 8192, 28672, 1024
    assert 2 * h * h + 2 * h * kv + 3 * h * ffn + 2 * h == BLOCK


@pytest.mark.parametrize("framework", ["torchtitan", "asap"])
def test_fsdp2_without_resharding_holds_every_block_gathered(framework):
    e = estimate_spelled(job(framework), "cp=4,zero=2")  # dp 16 x cp 4 = 64 shards
    assert e.memory_gb["weights"] == pytest.approx(2 * PARAMS / GIB, rel=1e-4)  # 131.42 GiB
    # the fp32 gradient shards, and FSDP2's reduction buffers (tests/cost/test_memory_terms.py): a block's bf16
    # unsharded gradient and its fp32 reduce-scatter input less one layer's activations (2048 tokens a device)
    buffers = e.memory_gb["grads"] * GIB - 4 * PARAMS / 64
    assert 2 * BLOCK < buffers < 6 * BLOCK
    assert e.memory_gb["optimizer"] == pytest.approx(12 * PARAMS / 64 / GIB, rel=1e-4)
    assert not e.fits


def test_fsdp2_resharding_gathers_two_blocks():
    e = estimate_spelled(job("torchtitan"), "cp=4,zero=3,recompute=selective")  # torchtitan's default AC
    # no 16-bit copy beside FSDP2's fp32 shards: only the two gathered blocks, and the [norm, output] unit that
    # torchtitan never reshards after forward (vocabulary 128256, bf16)
    head = 128256 * 8192 + 8192
    assert e.memory_gb["weights"] == pytest.approx((2 * 2 * BLOCK + 2 * head) / GIB, rel=1e-4)  # 5.15 GiB
    assert e.fits


def test_the_gathered_weights_count_in_the_allocator_reserve():
    """Under the caching allocator (``allocator: caching``) torchtitan's reserve is one segment of its largest
    transient tensor: FSDP2's flat reduce-scatter input of one block in fp32 (4 B x 855,654,400 = 3.19 GiB), larger
    than one gathered bf16 block and than the fp32 logits of one micro-batch (2 x 8192 / 4 tokens x 128256 x 4 B
    = 1.96 GiB at the mbs torchtitan takes here); with expandable segments (its run_train.sh) two 20 MiB pages."""
    from dataclasses import replace

    titan = job("torchtitan")
    caching = titan.with_train(replace(titan.train, allocator="caching"))
    for z in (2, 3):
        e = estimate_spelled(caching, f"cp=4,zero={z}")
        mbs = e.strategy["mbs"] if isinstance(e.strategy, dict) else e.strategy.mbs
        logits = 4 * mbs * 8192 / 4 * 128256
        largest = max(4 * BLOCK, logits)
        assert e.memory_detail_gb["allowance_largest_transient"] * GIB == pytest.approx(largest)
        seg = -(-largest // 2**21) * 2**21  # rounded up to 2 MiB (kRoundLarge)
        assert (e.memory_gb["allowance"] - estimate_spelled(titan, f"cp=4,zero={z}").memory_gb["allowance"]) * GIB \
            == pytest.approx(seg - 40 * 2**20)


def test_deepspeed_stages():
    two = estimate_spelled(job("deepspeed"), "zero=2,recompute=full")
    three = estimate_spelled(job("deepspeed"), "zero=3,recompute=full")
    assert two.memory_gb["weights"] == pytest.approx(2 * PARAMS / GIB, rel=1e-4)
    assert two.memory_gb["grads"] == pytest.approx(4 * PARAMS / 64 / GIB, rel=1e-4)
    gathered = 2 * (BLOCK / 3 + 5e7)
    assert three.memory_gb["weights"] == pytest.approx((2 * PARAMS / 64 + gathered) / GIB, rel=1e-4)


def test_megatron_distributed_optimizer():
    e = estimate_spelled(job("megatron"), "tp=8,pp=2,zero=1")  # dp 4; a stage holds half the layers
    w, g, o = (e.memory_gb[k] for k in ("weights", "grads", "optimizer"))
    assert g == pytest.approx(2 * w, rel=1e-6)  # 4 B fp32 main grads beside 2 B bf16 weights, both whole
    assert o == pytest.approx(12 / 4 * w / 2, rel=1e-6)  # 12 B over dp=4


def test_plan_does_not_rank_a_zero2_that_cannot_fit():
    """``plan`` ranked ``cp4 zero2`` #1 at 65.1 GiB before FSDP2's unsharded blocks were counted: without a
    pipeline, zero 2 holds every block of the 70B unsharded (35 GB of bf16 at tp 4) and cannot fit; a pipelined
    zero 2 (a stage's blocks only) may."""
    out = run_cli("plan", "-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "256", "-s", "8192",
                  "--framework", "torchtitan", "--top", "5", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["candidates"]
    assert rows and all(r["strategy"]["zero"] != 2 or r["strategy"]["pp"] > 1 for r in rows), \
        [r["strategy_compact"] for r in rows]
    # zero 2 fits an 8B (16 GB of bf16 blocks) and is priced with them
    j = Job.from_names("llama3-8b", "dgx-h100-8node", 256, 8192, "bf16", framework="torchtitan")
    two, three = (estimate_spelled(j, f"zero={z}") for z in (2, 3))
    assert two.memory_gb["weights"] == pytest.approx(2 * j.model.num_params() / GIB, rel=1e-4)
    assert two.peak_memory_gb > three.peak_memory_gb + 13.0
