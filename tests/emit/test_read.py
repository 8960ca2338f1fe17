"""Reading a job as its stack writes it (``asap.emit.read``, ``asap read``).

(a) Real configs from the six stacks' own repositories (tests/data/stack_configs, each file's repository, path and
commit in its SOURCES): every one reads (with the values asserted here) or is refused in one line naming the key.
(b) The round trip: ``emit`` then ``read_job`` gives back the same model (every field but the name), train spec
(global batch, sequence length, precision, framework) and completed strategy, for every preset model and every
format that expresses it; where emit refuses, the case is skipped with emit's reason.
"""

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from asap.search.advice import emit_strategy
from asap.emit import FRAMEWORK_OF
from asap.emit.read import READ_FORMATS, read_job
from asap.errors import AsapError
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.presets import MODEL_PRESETS
from asap.spec.job import Job
from conftest import assert_one_line_error

DATA = Path(__file__).parents[1] / "data" / "stack_configs"
SUFFIX = {"megatron": ".sh", "megatron-bridge": ".yaml", "torchtitan": ".toml", "deepspeed": ".json",
          "maxtext": ".yml", "mindformers": ".yaml"}
CLUSTER = {"megatron": "dgx-h100-8node", "megatron-bridge": "dgx-h100-8node", "torchtitan": "dgx-h100-8node",
           "deepspeed": "dgx-h100-8node", "maxtext": "tpu-v5p-256chip", "mindformers": "ascend-910b-64node"}
# per format: the defaults, and a strategy that exercises its parallel, sharding and recompute keys (64 devices)
STRATEGIES = {
    "megatron": ["", "tp=2,pp=4,vpp=2,cp=2,mbs=2,zero=1,recompute=selective,cp_comm=a2a,grad_bf16=1",
                 "tp=4,zero=1,offload_opt=1,recompute=full"],
    "megatron-bridge": ["", "tp=2,pp=2,cp=2,mbs=1,zero=3,dp_replicate=2,recompute=full",
                        "tp=2,zero=1,offload_act=1,offload_opt=1"],
    "torchtitan": ["", "tp=2,pp=2,vpp=2,schedule=interleaved,zero=3,dp_replicate=2,recompute=full",
                   "tp=2,zero=2,offload_opt=1,recompute=selective"],
    "maxtext": ["", "tp=4,pp=2,zero=3,dp_replicate=2,recompute=save_qkv_proj"],
    "deepspeed": ["", "tp=2,pp=2,mbs=2,zero=1,recompute=full", "zero=3,dp_replicate=4,offload_opt=1"],
    "mindformers": ["", "tp=2,pp=2,vpp=2,zero=1,sp=1,recompute=selective,mbs=2", "cp=2,cp_comm=a2a,zero=1,dp_replicate=2"],
}


def job_for(fmt: str, model, strategy: str):
    from asap.cost.estimate import estimate_spelled

    job = Job.from_names(model, CLUSTER[fmt], 512, 4096, "bf16", devices=64)
    job = job.with_train(replace(job.train, framework=FRAMEWORK_OF[fmt]))
    try:
        s = estimate_spelled(job, strategy).strategy
        return job, s, emit_strategy(fmt, job, s, strict=True)  # strict: what differs is no round trip
    except AsapError as e:
        pytest.skip(f"emit refuses: {e}")


def assert_round_trip(fmt: str, model, strategy: str, tmp_path: Path) -> None:
    job, s, text = job_for(fmt, model, strategy)
    path = tmp_path / f"job{SUFFIX[fmt]}"
    path.write_text(text)
    given = dict(model=job.model, seq_len=job.train.seq_len) if fmt == "deepspeed" else {}
    got = read_job(path, fmt, cluster=job.cluster, **given)
    assert replace(got.model, name=job.model.name) == job.model
    assert (got.train.global_batch, got.train.seq_len, got.train.precision, got.train.framework) == \
        (job.train.global_batch, job.train.seq_len, job.train.precision, job.train.framework)
    assert got.strategy == s, (str(got.strategy), str(s))
    assert got.devices == job.cluster.num_devices and got.format == fmt and got.framework == FRAMEWORK_OF[fmt]


@pytest.mark.parametrize("fmt", READ_FORMATS)
@pytest.mark.parametrize("model", sorted(MODEL_PRESETS))
@pytest.mark.parametrize("which", [0, 1, 2])
def test_emit_then_read_gives_back_the_job(fmt, model, which, tmp_path):
    if which >= len(STRATEGIES[fmt]):
        pytest.skip(f"{fmt} has {len(STRATEGIES[fmt])} strategies here")
    assert_round_trip(fmt, model, STRATEGIES[fmt][which], tmp_path)


def test_round_trip_of_torchtitan_moe_and_megatron_uneven_split(tmp_path):
    """What the presets leave out: torchtitan's MoE (it balances with the expert bias, no loss), expert
    parallelism with the DeepEP dispatcher, and an uneven Megatron layer split (the layout argument)."""
    qwen = load_model("qwen3-30b-a3b")
    moe = replace(qwen, moe=replace(qwen.moe, expert_bias=True, aux_loss="none", aux_loss_coef=0.0))
    assert_round_trip("torchtitan", moe, "ep=8,dispatcher=dedup,zero=3", tmp_path)
    assert_round_trip("megatron", "llama3-8b", "pp=4,layer_split=7/9/9/7,zero=1", tmp_path)
    assert_round_trip("megatron", "mixtral-8x7b", "tp=2,ep=4,dispatcher=dedup,recompute=layernorm+moe_act", tmp_path)


# ---- (a) the stacks' own files ------------------------------------------------------------------------------------

def _read(stack: str, name: str, cluster: str | None):
    kw = dict(model=load_model("llama3-8b"), seq_len=2048) if stack == "deepspeed" else {}
    return read_job(DATA / stack / name, None, cluster=load_cluster(cluster) if cluster else None, **kw)


# file -> (cluster, the strategy and train it reads) or the key it is refused on
REAL = {
    ("megatron", "train_llama3_8b_h100_fp8.sh"): (None, "fp8", 128, 8192, "dp=8,tp=1,pp=1,vpp=1,cp=1,ep=1,etp=1,mbs=1,"
                                                 "zero=1,sp=0,recompute=none,schedule=1f1b,dispatcher=alltoall,"
                                                 "a2a_overlap=0,fp8_param=1,grad_bf16=1"),
    ("megatron", "train_gpt3_175b_distributed.sh"): "--step-batch-size-schedule",
    ("megatron", "train_mixtral_8x7b_distributed.sh"): "strategy.ep",  # 1 node: pp=4 leaves dp=2 for ep=8
    ("megatron", "train_llama3_8b_fsdp_h100_fp8.sh"): "--use-nccl-ub",
    ("megatron", "gpt3_mcore_te_tp1_pp4_vp1.yaml"): "--vocab-size",
    ("megatron", "gpt3_7b_tp1_pp4_memory_speed.yaml"): ("dgx-h100-1node", "bf16", 8, 8192, "dp=2,tp=1,pp=4,vpp=8,cp=1,"
                                                        "ep=1,etp=1,mbs=1,zero=1,sp=0,recompute=none,"
                                                        "schedule=interleaved,dispatcher=alltoall,a2a_overlap=0"),
    ("megatron", "moe_deepseek_proxy_fsdp_ep2_fsdp2.yaml"): "--vocab-size",
    ("megatron-bridge", "llama32_1b_pretrain.yaml"): "model._target_",
    ("megatron-bridge", "quantized_llama3_8b_pretrain_override_example.yaml"): "model._target_",
    ("torchtitan", "llama3_8b.toml"): ("dgx-h100-8node", "bf16", 64, 8192, "dp=64,tp=1,pp=1,vpp=1,cp=1,ep=1,etp=1,"
                                       "mbs=1,zero=3,sp=0,recompute=selective,schedule=1f1b,dispatcher=alltoall,"
                                       "a2a_overlap=0"),
    ("torchtitan", "llama3_405b.toml"): ("dgx-h100-8node", "fp8", 16, 8192, "dp=8,tp=8,pp=1,vpp=1,cp=1,ep=1,etp=1,"
                                         "mbs=2,zero=3,sp=1,recompute=full,schedule=1f1b,dispatcher=alltoall,"
                                         "a2a_overlap=0"),
    ("torchtitan", "deepseek_v3_16b.toml"): ("dgx-h100-8node", "bf16", 256, 4096, "dp=64,tp=1,pp=1,vpp=1,cp=1,ep=8,"
                                             "etp=1,mbs=4,zero=3,sp=0,recompute=selective,schedule=1f1b,"
                                             "dispatcher=alltoall,a2a_overlap=0"),
    ("torchtitan", "qwen3_32b.toml"): ("dgx-h100-8node", "bf16", 128, 4096, None),
    ("torchtitan", "gpt_oss_debug_model.toml"): ("dgx-h100-8node", "bf16", 512, 2048, None),
    ("torchtitan", "llama3_debug_model.toml"): "activation_checkpoint.selective_ac_option",
    ("maxtext", "llama3-8b.yml"): ("tpu-v5p-256chip", "bf16", 3072, 2048, "dp=256,tp=1,pp=1,vpp=1,cp=1,ep=1,etp=1,"
                                   "mbs=12,zero=3,sp=0,recompute=full,schedule=1f1b,dispatcher=alltoall,a2a_overlap=0"),
    ("maxtext", "gpu_llama3_8b.yml"): ("tpu-v5p-256chip", "bf16", 3072, 8192, None),
    ("maxtext", "gpu_mixtral_8x7b.yml"): ("tpu-v5p-256chip", "bf16", 3072, 4096, None),
    ("maxtext", "deepseek3-671b.yml"): ("tpu-v5p-256chip", "bf16", 3072, 2048, None),
    ("maxtext", "v5e_llama2_13b.sh"): ("tpu-v5p-256chip", "bf16", 2048, 2048, "dp=256,tp=1,pp=1,vpp=1,cp=1,ep=1,"
                                       "etp=1,mbs=8,zero=3,sp=0,recompute=qkv_proj_offloaded,schedule=1f1b,"
                                       "dispatcher=alltoall,a2a_overlap=0"),
    ("maxtext", "v5p_128b.sh"): ("tpu-v5p-256chip", "bf16", 256, 2048, "dp=32,tp=8,pp=1,vpp=1,cp=1,ep=1,etp=1,mbs=8,"
                                 "zero=3,sp=1,recompute=selective,schedule=1f1b,dispatcher=alltoall,a2a_overlap=0"),
    ("deepspeed", "pipeline_parallelism_ds_config.json"): ("dgx-h100-1node", "fp32", 256, 2048, None),
    ("deepspeed", "deepspeed_bsz64k_lamb_config_seq128.json"): "sparse_attention",
    ("deepspeed", "ds_config_fp16_z3.json"): "train_micro_batch_size_per_gpu",
    ("deepspeed", "ds_config_gpt_base_random_ltd.json"): "data_efficiency",
    ("deepspeed", "tensor_parallel_ds_config.json"): "gradient_accumulation_steps",
    ("deepspeed", "pretrain_llama2_distributed.sh"): "--vocab-size",  # GPTSentencePieceTokenizer: a file's
    ("deepspeed", "ds_pretrain_gpt_1.3B_dense.sh"): "--deepspeed_config",  # made from a template by sed
    ("mindformers", "pretrain_llama2_7b.yaml"): ("ascend-910b-64node", "fp16", 64, 4096, None),
    ("mindformers", "pretrain_mixtral-8x7b.yaml"): ("ascend-910b-64node", "fp16", 128, 4096, None),
    ("mindformers", "pretrain_llama2_70b_bf16_64p.yaml"): "recompute_config.select_recompute",
    ("mindformers", "pretrain_llama3_70b.yaml"): "recompute_config.select_recompute",
    ("mindformers", "pretrain_deepseek3_671b.yaml"): "moe_config.expert_group_size",
}
CLUSTER_FOR_REFUSAL = {"megatron": "dgx-h100-1node", "torchtitan": "dgx-h100-8node", "maxtext": "tpu-v5p-256chip",
                       "deepspeed": "dgx-h100-1node", "mindformers": "ascend-910b-64node"}


def test_every_stored_file_is_listed_with_its_source():
    sources = (DATA / "SOURCES").read_text()
    files = {(p.parent.name, p.name) for p in DATA.glob("*/*")}
    assert files == set(REAL)
    for stack, name in files:
        line = next(ln for ln in sources.splitlines() if ln.startswith(f"{stack}/{name} <- "))
        assert re.search(r" @ [0-9a-f]{40}$", line), line


@pytest.mark.parametrize("stack, name", sorted(REAL))
def test_a_stack_s_own_config_reads_or_is_refused_naming_the_key(stack, name):
    want = REAL[(stack, name)]
    if isinstance(want, str):
        with pytest.raises(AsapError) as e:
            _read(stack, name, CLUSTER_FOR_REFUSAL.get(stack))
        assert e.value.field == want and "\n" not in str(e.value)
        return
    cluster, precision, batch, seq, strategy = want
    got = _read(stack, name, cluster)
    assert (got.train.precision, got.train.global_batch, got.train.seq_len) == (precision, batch, seq)
    if strategy is not None:
        assert str(got.strategy) == strategy


def test_torchtitans_compile_components_say_what_is_compiled():
    """``[compile] components``: torchtitan's DeepSeek-V3 16B example compiles the loss alone (eager blocks, the
    compiled loss's bytes), its 405B example the model and the loss, its 8B example nothing."""
    for name, fused, loss in (("deepseek_v3_16b.toml", False, True), ("llama3_405b.toml", True, True),
                              ("llama3_8b.toml", False, False)):
        train = _read("torchtitan", name, "dgx-h100-8node").train
        assert (train.fused_elementwise, train.compiled_loss) == (fused, loss), name


def test_the_models_real_files_describe():
    """The architectures: Megatron's example is Llama 3 8B's (with rotary base 1e6 as the script sets it); torchtitan's
    and MaxText's named models are their own tables'; MindFormers' Llama 2 7B derives its FFN width from multiple_of."""
    llama = _read("megatron", "train_llama3_8b_h100_fp8.sh", None).model
    assert replace(llama, name="llama3-8b", rope_theta=500000.0) == load_model("llama3-8b")
    assert _read("torchtitan", "llama3_8b.toml", "dgx-h100-8node").model.num_params() == \
        load_model("llama3.1-8b").num_params()
    dsv3 = _read("maxtext", "deepseek3-671b.yml", "tpu-v5p-256chip").model
    assert dsv3.mla is not None and dsv3.moe.num_experts == 256 and dsv3.moe.first_dense_layers == 3
    big = _read("maxtext", "v5p_128b.sh", "tpu-v5p-256chip").model  # base.yml's 16 x 2048 model, scale 128 = 2^(3*2+1)
    assert (big.num_layers, big.hidden_size, big.num_attention_heads, big.ffn_hidden_size) == (16 * 4, 2048 * 4, 16 * 8,
                                                                                                7168 * 8)
    mf = _read("mindformers", "pretrain_llama2_7b.yaml", "ascend-910b-64node")
    assert mf.model.ffn_hidden_size == 11008 and mf.devices == 8 and str(mf.strategy).startswith("dp=8,")
    mixtral = _read("mindformers", "pretrain_mixtral-8x7b.yaml", "ascend-910b-64node")
    assert mixtral.model.moe.num_experts == 8 and mixtral.strategy.ep == 8 and mixtral.strategy.pp == 2
    script = _read("megatron", "train_llama3_8b_h100_fp8.sh", "h100-sxm")
    assert (script.nodes, script.devices_per_node, script.cluster.num_devices) == (1, 8, 8)


def test_a_megatron_deepspeed_script_reads_its_heredoc_json_and_launcher(tmp_path):
    """Megatron-DeepSpeed's Llama 2 example with the vocabulary stated (its tokenizer is a file): the model and
    parallel sizes from the Megatron arguments, the batch, ZeRO stage and precision from the JSON the script writes
    with ``cat <<EOT``, the size from torchrun's arguments."""
    text = (DATA / "deepspeed" / "pretrain_llama2_distributed.sh").read_text()
    script = tmp_path / "llama2.sh"
    script.write_text(text.replace("--tokenizer-type GPTSentencePieceTokenizer",
                                   "--tokenizer-type GPTSentencePieceTokenizer --vocab-size 32000"))
    got = read_job(script)
    assert got.format == "deepspeed" and (got.nodes, got.devices_per_node) == (1, 8)
    assert (got.train.global_batch, got.train.seq_len, got.train.precision) == (32, 2048, "bf16")
    assert (got.strategy.dp, got.strategy.tp, got.strategy.pp, got.strategy.mbs, int(got.strategy.zero)) == \
        (2, 2, 2, 4, 0)
    m = got.model
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_kv_heads, m.activation, m.norm) == \
        (24, 2048, 5504, 4, "swiglu", "rmsnorm")


# ---- the pieces ---------------------------------------------------------------------------------------------------

def test_the_shell_evaluator_builds_the_launch_line_as_bash_would():
    from asap.emit.read_shell import launch_line

    script = """
    TP=${TP:-4}
    NODES=$1
    ARGS=( --tensor-model-parallel-size $TP  # a comment (with parentheses)
           --num-layers 2 )
    if [[ "$MODE" == "fp8" ]] || [ -n "$FORCE" ]; then
        ARGS+=( --fp8-format hybrid )
    elif [ -z "$NODES" ]; then
        ARGS+=("--bf16")
    else
        ARGS+=(--fp16)
    fi
    if [ ! -f "$PRETRAIN" ]; then
        echo "missing"; exit 1
    fi
    WORLD=$((TP*2))
    torchrun --nproc_per_node $WORLD --nnodes ${NODES:-3} pretrain_gpt.py ${ARGS[@]} \\
        --seq-length 16
    """
    before, after, _ = launch_line(script, re.compile(r"pretrain_gpt\.py$"), "script")
    assert before == ["torchrun", "--nproc_per_node", "8", "--nnodes", "3"]
    assert after == ["--tensor-model-parallel-size", "4", "--num-layers", "2", "--bf16", "--seq-length", "16"]


def test_a_heredoc_is_written_with_the_script_s_variables():
    from asap.emit.read_shell import launch_line

    script = 'B=64\ncat <<EOT > /tmp/ds.json\n{"train_batch_size": $B}\nEOT\nif [ $B -gt 8 ]; then\n X=1\nfi\n' \
             'deepspeed pretrain_gpt.py --x $X\n'
    _, after, shell = launch_line(script, re.compile(r"pretrain_gpt\.py$"), "script")
    assert json.loads(shell.files["/tmp/ds.json"]) == {"train_batch_size": 64} and after == ["--x", "1"]


def test_a_condition_it_cannot_decide_that_sets_variables_is_refused():
    from asap.emit.read_shell import launch_line

    with pytest.raises(AsapError, match="cannot decide"):
        launch_line('if [ -f /x ]; then\n A=1\nfi\npython pretrain_gpt.py --a $A\n',
                    re.compile(r"pretrain_gpt\.py$"), "script")


def test_every_megatron_flag_it_maps_is_one_megatron_lm_parses():
    """The mapped flags are Megatron-LM core_r0.14.0's own (its arguments.py, vendored in tests/stacks)."""
    from asap.emit.read_megatron import MAPPED

    source = (Path(__file__).parents[1] / "stacks" / "megatron_lm" / "megatron" / "training" / "arguments.py").read_text()
    missing = [f for f in MAPPED if f"'{f}'" not in source and f'"{f}"' not in source]
    assert missing == [], missing


def test_torchtitan_defaults_are_its_job_config_s():
    """The defaults the reader assumes are torchtitan 0.2.2's own JobConfig fields."""
    pytest.importorskip("torchtitan")
    from torchtitan.config.job_config import ActivationCheckpoint, Parallelism, Training

    assert (Training().local_batch_size, Training().global_batch_size, Training().seq_len) == (8, -1, 2048)
    assert (Training().mixed_precision_param, Training().mixed_precision_reduce) == ("bfloat16", "float32")
    assert (Parallelism().data_parallel_shard_degree, Parallelism().data_parallel_replicate_degree) == (-1, 1)
    assert (ActivationCheckpoint().mode, ActivationCheckpoint().selective_ac_option) == ("selective", "2")
    assert Parallelism().pipeline_parallel_microbatch_size == 1
    from torchtitan.config.job_config import Compile  # --fused-kernels: the model and the loss compiled

    assert (Compile().enable, sorted(Compile().components)) == (False, ["loss", "model"])


@pytest.mark.parametrize("fmt, text, key", [
    ("megatron", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 100 --seq-length 8 "
                 "--global-batch-size 8 --frobnicate 3", "--frobnicate"),
    ("torchtitan", "[training]\nseq_len = 8\nwarp = 1\n", "training.warp"),
    ("maxtext", "per_device_batch_size: 1\nwarp_drive: true\n", "warp_drive"),
    ("deepspeed", '{"train_batch_size": 8, "zero_optimization": {"stage": 2, "warp": 1}}', "zero_optimization.warp"),
    ("mindformers", "parallel_config:\n  data_parallel: 2\n  warp: 1\n", "parallel_config.warp"),
    ("megatron-bridge", "model:\n  _target_: x\n  warp: 1\ntrain: {}\nddp: {}\n", "model.warp"),
])
def test_a_key_it_cannot_map_is_refused_naming_it(fmt, text, key, tmp_path):
    path = tmp_path / f"c{SUFFIX[fmt]}"
    path.write_text(text)
    with pytest.raises(AsapError) as e:
        read_job(path, fmt, cluster=load_cluster("dgx-h100-1node"), model=load_model("tiny-dense"), seq_len=8)
    assert e.value.field == key


def test_asap_read_prints_one_json_document_and_refuses_in_one_line(cli):
    p = cli("read", str(DATA / "torchtitan" / "llama3_405b.toml"), "--cluster", "dgx-h100-8node", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["format"] == "torchtitan" and d["train"]["precision"] == "fp8" and d["devices"] == 64
    assert d["strategy"].startswith("dp=8,tp=8,") and d["strategy_compact"] and d["cluster"]["nodes"] == 8
    assert d["model"]["num_layers"] == 126
    assert (d["train"]["fused_kernels"], d["train"]["compiled_loss"]) == (True, True)  # [compile] model and loss
    bad = cli("read", str(DATA / "megatron" / "train_gpt3_175b_distributed.sh"))
    assert_one_line_error(bad, "--step-batch-size-schedule")
    no_cluster = cli("read", str(DATA / "torchtitan" / "llama3_8b.toml"))
    assert_one_line_error(no_cluster, "training.global_batch_size")


def test_deepspeed_takes_the_offload_emit_now_writes():
    """The offload emit used to drop (found by the round trip): DeepSpeed 0.19.8's own DeepSpeedConfig reads it."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.config import DeepSpeedConfig

    j = Job.from_names("llama3-8b", "dgx-h100-1node", 16, 4096, "bf16")
    j = j.with_train(replace(j.train, framework="deepspeed"))
    text = emit_strategy("deepspeed", j, "tp=2,pp=4,mbs=2,zero=1,recompute=full,offload_opt=1")
    cfg = DeepSpeedConfig(json.loads(text))  # dp=1: DeepSpeedConfig takes a world size of 1 without a process group
    assert cfg.zero_config.offload_optimizer.device == "cpu" and cfg.zero_optimization_stage == 1
