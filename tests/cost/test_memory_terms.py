"""Memory terms as the stacks allocate them (issue 46.1), hand figures on a 68M-parameter dense model on this
machine's CPU (fp32: 4 B per weight, gradient, and Adam moment):

- torch DDP (the reference trainer's zero 0/1 over dp ranks, torchtitan's ``replicate``): ``param.grad`` and the
  Reducer's flat bucket, 2 x 4 B per parameter; FSDP2 (zero 2/3), tensor or pipeline parallelism: one copy.
- FSDP2's gradient reduction: beside the sharded gradients, one block's unsharded gradient (all-gather dtype) and
  one block's reduce-scatter input (reduce dtype) less the layer of activations freed before it exists:
  block x 4 + max(0, block x 4 - layer) B in fp32, block x 2 + max(0, block x 4 - layer) B under bf16.
- FSDP2's root never reshards after forward: under zero 3 the reference trainer keeps the embedding, final norm and
  head gathered (4 B each in fp32), torchtitan its ``[norm, output]`` unit only.
- The loss at the vocabulary shard: torchtitan's loss_parallel holds T x V / tp logits (and their fp32 copy) per
  rank; the reference trainer all-gathers them (``output_layouts=Replicate()``): T x V per rank.
"""

from dataclasses import replace

import pytest

from asap.spec.job import Job
from conftest import MID_DENSE
from asap.cost.estimate import estimate_spelled

GIB = 2 ** 30
MODEL = MID_DENSE


@pytest.fixture(scope="module")
def model_file(mid_dense_file):
    return mid_dense_file


def job(model_file, framework="asap", cluster="local-cpu"):
    return Job.from_names(model_file, cluster, 4, 128, "fp32", framework=framework, devices=2)


def test_the_parameter_count(model_file):
    h, f, v, layers = 1024, 2816, 8192, 4
    assert job(model_file).model.num_params() == layers * (4 * h * h + 3 * h * f + 2 * h) + 2 * v * h + h


H, F, V = 1024, 2816, 8192
BLOCK = 4 * H * H + 3 * H * F + 2 * H  # one transformer block's parameters (q, k, v, o; w1, w2, w3; two norms)


@pytest.mark.parametrize("strategy,copies", [("dp=2,zero=0", 2), ("dp=2,zero=1", 2), ("dp=2,zero=2", 0.5),
                                             ("tp=2", 1), ("pp=2", 1)])
def test_ddp_holds_the_gradients_twice(model_file, strategy, copies):
    j = job(model_file)
    e = estimate_spelled(j, strategy)
    P = j.model.num_params()
    if strategy.startswith("dp"):  # zero 2 (FSDP2) adds one block's reduction buffers (the test below)
        buffers = 4 * BLOCK + (4 * BLOCK - one_layer_activations(e, 12)) if strategy.endswith("zero=2") else 0
        assert e.memory_gb["grads"] * GIB == pytest.approx(copies * 4 * P + buffers, rel=1e-6)
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
    largest = max(BLOCK, V * H)  # a block outweighs the embedding here
    root = V * H + (V * H + H)  # the root's embedding, head and final norm, gathered through the step
    assert three.memory_gb["weights"] * GIB == pytest.approx(4 * P / 2 + 2 * 4 * largest + 4 * root, rel=1e-6)


def one_layer_activations(e, logit_bytes):
    """One layer's stored activations of the estimate's peak device (recompute none, one micro-batch in flight,
    4 layers): the activations term less the logits of the micro-batch (1 x 128 tokens x V x ``logit_bytes``)."""
    return (e.memory_gb["activations"] * GIB - 128 * V * logit_bytes) / 4


@pytest.mark.parametrize("zero", [2, 3])
def test_fsdp2_reduce_scatter_buffers(model_file, zero):
    """fp32: the sharded gradients (4 B x P / 2), one block's unsharded gradient (4 B) and its flat reduce-scatter
    input (4 B), less one layer's activations that the first block's backward frees before the input exists;
    bf16 torchtitan: a bf16 unsharded gradient and an fp32 input (2 + 4 B); Megatron's zero 3 (its own FSDP, a
    bf16 buffer): none."""
    j = job(model_file)
    P = j.model.num_params()
    e = estimate_spelled(j, f"dp=2,zero={zero}")
    layer = one_layer_activations(e, 12)  # the eager loss's three fp32 tensors per logit
    assert 0 < layer < 4 * BLOCK
    assert e.memory_gb["grads"] * GIB == pytest.approx(4 * P / 2 + 4 * BLOCK + (4 * BLOCK - layer), rel=1e-6)
    titan = Job.from_names(j.model, "dgx-h100-1", 4, 128, "bf16", framework="torchtitan", devices=2)
    t = estimate_spelled(titan, f"dp=2,zero={zero}")
    layer = one_layer_activations(t, 12)
    assert t.memory_gb["grads"] * GIB == pytest.approx(4 * P / 2 + 2 * BLOCK + max(0, 4 * BLOCK - layer), rel=1e-6)
    mega = Job.from_names(j.model, "dgx-h100-1", 4, 128, "bf16", framework="megatron", devices=2)
    assert estimate_spelled(mega, "dp=2,zero=3").memory_gb["grads"] * GIB == pytest.approx(2 * P / 2, rel=1e-6)


def test_fsdp2_reduce_input_hides_under_freed_activations():
    """At 8K tokens a layer's activations outweigh a block's fp32 reduce-scatter input: only the unsharded bf16
    gradient adds to the peak (2 B x block)."""
    m = {**MODEL, "name": "mid-long"}
    titan = Job.from_names(m, "dgx-h100-1", 16, 8192, "bf16", framework="torchtitan", devices=2)
    t = estimate_spelled(titan, "dp=2,zero=3,mbs=1")
    P = titan.model.num_params()
    assert t.memory_gb["grads"] * GIB == pytest.approx(4 * P / 2 + 2 * BLOCK, rel=1e-6)


def test_fsdp2_root_units_stay_gathered_under_zero3(model_file):
    """Zero 3 in bf16 on torchtitan: the fp32 shards live in the optimizer (no 16-bit copy), two bf16 blocks
    gathered, and its ``[norm, output]`` unit (never resharded after forward) gathered in bf16: 2 B x (V h + h);
    the embedding is resharded."""
    j = job(model_file)
    titan = Job.from_names(j.model, "dgx-h100-1", 4, 128, "bf16", framework="torchtitan", devices=2)
    t = estimate_spelled(titan, "dp=2,zero=3")
    assert t.memory_gb["weights"] * GIB == pytest.approx(2 * 2 * BLOCK + 2 * (V * H + H), rel=1e-6)


def test_the_reference_trainer_holds_the_whole_vocabulary_under_tp(model_file):
    """tp=2, sequence-parallel, fp32, no recompute: the same stored activations on both stacks; the logits of one
    micro-batch (T = 128 tokens) as the eager loss holds them at the start of the backward: the reference trainer's
    plain loss over the gathered logits (the log-softmax output, its gradient and the input's gradient, 3 x 4 B)
    T x V x 12 B; torchtitan's loss_parallel at the shard (four fp32 tensors, 16 B) T x V x 16 / 2 B."""
    j = job(model_file)
    titan = Job.from_names(j.model, "local-cpu", 4, 128, "fp32", framework="torchtitan", devices=2)
    ref, tt = (estimate_spelled(x, "dp=1,tp=2,sp=1,mbs=1,zero=0,recompute=none") for x in (j, titan))
    assert (ref.memory_gb["activations"] - tt.memory_gb["activations"]) * GIB == pytest.approx(128 * V * (12 - 16 / 2),
                                                                                                  rel=1e-6)


def test_the_eager_loss_holds_three_fp32_tensors_per_logit(model_file):
    """The logits of one micro-batch where the loss runs (issue 46.1): torchtitan's and the reference trainer's
    ``F.cross_entropy(logits.float())`` at the start of the backward hold the fp32 log-softmax output, the dense fp32
    gradient nll_loss_backward writes and log-softmax's input gradient: 3 x 4 B per logit (T = 128 tokens, V = 8192);
    torchtitan's loss_parallel at tp=2 (``_nll_loss_and_log_softmax_backward``: the saved output, zeros_like, exp,
    their sum and its product with the gradient, four fp32 tensors live) 16 B for each of the V/2 logits of its
    shard; Megatron's vocab-parallel cross entropy the bf16 logits and one fp32 buffer that becomes the gradient in
    place, 2 + 4 B."""
    titan = Job.from_names(model_file, "dgx-h100-1", 4, 128, "bf16", framework="torchtitan", devices=2)
    mega = Job.from_names(model_file, "dgx-h100-1", 4, 128, "bf16", framework="megatron", devices=2)
    for j, strategy, per_logit in ((titan, "dp=2,zero=3", 12), (titan, "tp=2,sp=1", 16 / 2), (job(model_file), "dp=2", 12),
                                   (mega, "dp=2", 6)):
        e = estimate_spelled(j, strategy)
        assert e.memory_detail_gb["activations_logits"] * GIB == pytest.approx(128 * V * per_logit, rel=1e-9)


def test_torchtitans_compiled_loss_holds_the_half_logits_and_their_gradient(model_file):
    """torchtitan compiles its loss with the model (``[compile] enable``, components ["model", "loss"]): Inductor
    saves the bf16 logits and writes their bf16 gradient, 2 x 2 B per logit (benchmarks/loss_memory_cpu.py measures
    4.00 B; fp32 8.00 B); its vocabulary-parallel loss under tensor parallelism keeps the eager 16 B of its shard;
    the reference trainer does not compile (12 B whatever the kernels)."""
    for precision, per_logit in (("bf16", 4), ("fp32", 8)):
        titan = Job.from_names(model_file, "dgx-h100-1", 4, 128, precision, framework="torchtitan", devices=2,
                               fused_kernels=True)
        e = estimate_spelled(titan, "dp=2,zero=3")
        assert e.memory_detail_gb["activations_logits"] * GIB == pytest.approx(128 * V * per_logit, rel=1e-9)
    e = estimate_spelled(titan, "tp=2,sp=1")
    assert e.memory_detail_gb["activations_logits"] * GIB == pytest.approx(128 * V * 16 / 2, rel=1e-9)
    eager_blocks = replace(titan, train=replace(titan.train, fused_elementwise=False, compiled_loss=True))
    assert estimate_spelled(eager_blocks, "dp=2").memory_detail_gb["activations_logits"] * GIB == pytest.approx(
        128 * V * 8)  # torchtitan's components = ["loss"]: eager blocks, the compiled loss (fp32 here)
    ref = Job.from_names(model_file, "local-cpu", 4, 128, "fp32", framework="asap", devices=2, fused_kernels=True)
    assert estimate_spelled(ref, "dp=2").memory_detail_gb["activations_logits"] * GIB == pytest.approx(128 * V * 12)


def test_eager_swiglu_saves_silus_output_beside_the_three_a_fused_kernel_keeps(model_file):
    """Eager kernels (the reference trainer, torchtitan without compile) run silu(w1 x) * (w3 x): autograd saves
    w1's output, silu's output, w3's output and the product, four ffn-wide tensors a layer where a fused kernel
    keeps three (benchmarks/saved_activations_cpu.py counts them): 4 layers x 128 tokens x 2816 x 4 B more, and
    nothing else; the fused figure is what Megatron-Core prices."""
    for framework in ("asap", "torchtitan"):
        eager = estimate_spelled(job(model_file, framework), "dp=2,zero=0,recompute=none")
        fused_job = Job.from_names(model_file, "local-cpu", 4, 128, "fp32", framework=framework, devices=2,
                                   fused_kernels=True)
        fused = estimate_spelled(fused_job, "dp=2,zero=0,recompute=none")
        # torchtitan's compiled loss holds fewer bytes a logit too (the test above); the rest is the layers'
        logits = eager.memory_detail_gb["activations_logits"] - fused.memory_detail_gb["activations_logits"]
        extra = (eager.memory_gb["activations"] - fused.memory_gb["activations"] - logits) * GIB
        assert extra == pytest.approx(4 * 128 * F * 4, rel=1e-9), framework


def test_torchtitan_op_sac_keeps_every_second_gemm_output(model_file):
    """torchtitan's selective op AC per block (bf16, T = 128 tokens, MHA: 8 heads x 128 = h): the block's input,
    the outputs of the odd aten.mm calls (wq, wv, w1, w2 of wq wk wv wo w1 w3 w2), SDPA's output and its fp32
    log-sum-exp (T x 8 x 4 B); at tp=2 with sequence parallelism the input at T/2, the column-parallel outputs at
    1/2, w2's partial sums whole, and the two reduce-scatters' outputs (T/2 x h each)."""
    titan = Job.from_names(model_file, "dgx-h100-1", 4, 128, "bf16", framework="torchtitan", devices=2)
    T = 128
    for strategy, block in (("dp=2,zero=3,recompute=selective", T * (H + H + H + H + F + H) * 2 + T * 8 * 4),
                            ("tp=2,sp=1,recompute=selective",
                             (T / 2 * H + T * H / 2 + T * H / 2 + T * H / 2 + T * F / 2 + T * H + 2 * T / 2 * H) * 2
                             + T * 4 * 4)):
        e = estimate_spelled(titan, strategy)
        logits = e.memory_detail_gb["activations_logits"] * GIB
        assert e.memory_gb["activations"] * GIB - logits == pytest.approx(4 * block, rel=1e-9)


def test_context_parallel_exchange_buffers():
    """Full recompute, cp=4 (T = 8192 / 4 = 2048 tokens a rank, bf16, MHA K,V width 2 x 1024): beside the layer
    re-materialised, the ring's two (K,V | dK,dV) backward buffers hold 4 kv_chunk (kv_chunk = T x 2048 x 2 B), the
    all-gather the whole sequence's K,V and their gradients 2 x 4 kv_chunk, Ulysses one more set of Q, K, V in the
    head layout, T x (1024 + 2048) x 2 B. The vocabulary is small so that the layer, not the logits, is the larger
    transient."""
    m = {**MODEL, "name": "mid-cp", "vocab_size": 512}
    j = Job.from_names(m, "dgx-h100-1", 1, 8192, "bf16", framework="megatron", devices=4)
    act = {c: estimate_spelled(j, f"cp=4,cp_comm={c},recompute=full").memory_gb["activations"] * GIB
           for c in ("p2p", "allgather", "a2a")}
    T = 2048
    kv_chunk = T * 2 * H * 2
    assert act["allgather"] - act["p2p"] == pytest.approx(8 * kv_chunk - 4 * kv_chunk, rel=1e-9)
    assert act["a2a"] - act["p2p"] == pytest.approx(T * 3 * H * 2 - 4 * kv_chunk, rel=1e-9)


@pytest.mark.parametrize("cluster,precision,fp8_param,quantised", [
    ("dgx-h100-1", "fp8", 0, 2 * 1.0), ("dgx-h100-1", "fp8", 1, 2 * 1.0), ("b200-8node", "fp8", 0, 1.0)])
def test_transformer_engine_keeps_rowwise_and_columnwise_fp8_weights(model_file, cluster, precision, fp8_param,
                                                                      quantised):
    """Megatron-Core through Transformer Engine, zero 0 on one device: beside the bf16 weights (2 B; none under
    fp8_param), each weight quantised rowwise for the forward and columnwise for the backward (1 B each on Hopper,
    whose fp8 GEMMs take only TN: the transpose); Blackwell's fp8 GEMMs take any layout, so one copy there.
    weights = P (2 + copies) or P x copies with fp8_param."""
    j = Job.from_names(model_file, cluster, 4, 128, precision, framework="megatron", devices=1)
    e = estimate_spelled(j, f"dp=1,zero=0,fp8_param={fp8_param}")
    P = j.model.num_params()
    half = 0.0 if fp8_param else 2.0
    assert e.memory_gb["weights"] * GIB == pytest.approx(P * (half + quantised), rel=1e-6)


def test_context_parallel_buffers_follow_the_stacks_ring():
    """cp=4 p2p, full recompute, T = 2048 tokens a rank (bf16, kv_chunk = T x 2048 x 2 B): Transformer Engine's ring
    (Megatron-Core) 4 kv_chunk; torch's context_parallel (torchtitan) all-gathers the whole sequence's K,V in its
    backward (4 kv_chunk) and rings dK,dV in fp32 (accumulators, their concatenation, the receive buffer: 3 x 2
    kv_chunk): 10 kv_chunk; listed as estimate --explain's activations_cp_buffers."""
    m = {**MODEL, "name": "mid-cp", "vocab_size": 512}
    kv_chunk = 2048 * 2 * H * 2
    for framework, chunks in (("megatron", 4), ("torchtitan", 4 + 3 * 2)):
        j = Job.from_names(m, "dgx-h100-1", 1, 8192, "bf16", framework=framework, devices=4)
        e = estimate_spelled(j, "cp=4,cp_comm=p2p,recompute=full")
        assert e.memory_detail_gb["activations_cp_buffers"] * GIB == pytest.approx(chunks * kv_chunk, rel=1e-9)
