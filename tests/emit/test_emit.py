"""asap emit: each emitter round-trips the strategy; refusals and an unknown format give one line."""

import json
import shlex
import tomllib
from dataclasses import replace

import pytest
import yaml

from asap.search.advice import emit_strategy
from asap.emit import emit
from asap.errors import AsapError
from asap.spec.job import Job

from conftest import assert_one_line_error


def job(model="llama3-8b", cluster="dgx-h100-8", b=256, s=4096, precision="bf16"):
    return Job.from_names(model, cluster, b, s, precision)


def megatron_args(text):
    toks = shlex.split(text.replace("\\\n", " "), comments=True)
    out, key = {}, None
    for t in toks:
        if t.startswith("--"):
            key = t
            out[key] = []
        else:
            out[key].append(t)
    return out


def test_megatron_round_trip():
    j = job("mixtral-8x7b")
    text = emit_strategy("megatron", j, "tp=2,pp=4,vpp=2,ep=4,mbs=2,recompute=selective,dispatcher=dedup,"
                                              "a2a_overlap=1")
    a = megatron_args(text)
    assert a["--tensor-model-parallel-size"] == ["2"] and a["--pipeline-model-parallel-size"] == ["4"]
    assert a["--num-virtual-stages-per-pipeline-rank"] == ["2"]
    assert a["--expert-model-parallel-size"] == ["4"] and a["--micro-batch-size"] == ["2"]
    assert a["--global-batch-size"] == ["256"] and "--sequence-parallel" in a
    assert a["--recompute-granularity"] == ["selective"] and "--disable-bias-linear" in a
    assert a["--moe-token-dispatcher-type"] == ["flex"] and "--moe-enable-deepep" in a
    assert "--overlap-moe-expert-parallel-comm" in a and "--use-distributed-optimizer" in a
    assert a["--num-experts"] == ["8"] and a["--moe-router-topk"] == ["2"]
    # module sets, zero 3 (Megatron-FSDP), an uneven split as a pipeline layout
    j = job()
    a = megatron_args(emit_strategy("megatron", j, "tp=2,pp=2,zero=3,recompute=layernorm+moe_act,"
                                                         "layer_split=15/17"))
    # a dense model has no MoE activation to recompute: Megatron's TransformerConfig rejects moe_act without MoE
    assert a["--recompute-granularity"] == ["selective"] and a["--recompute-modules"] == ["layernorm"]
    assert "--use-megatron-fsdp" in a and a["--data-parallel-sharding-strategy"] == ["optim_grads_params"]
    layout = a["--pipeline-model-parallel-layout"][0].split("|")
    assert [p.count("t") for p in layout] == [15, 17] and layout[0].startswith("E") and layout[-1].endswith("L")
    a = megatron_args(emit_strategy("megatron", j, "tp=2,recompute=full"))
    assert a["--recompute-granularity"] == ["full"] and a["--recompute-method"] == ["uniform"]


def test_torchtitan_round_trip():
    j = job()
    cfg = tomllib.loads(emit_strategy("torchtitan", j, "tp=2,pp=2,vpp=2,mbs=2,recompute=selective,zero=3"))
    p, tr = cfg["parallelism"], cfg["training"]
    assert (p["tensor_parallel_degree"], p["pipeline_parallel_degree"], p["data_parallel_shard_degree"]) == (2, 2, 16)
    assert p["data_parallel_replicate_degree"] == 1 and p["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert p["pipeline_parallel_microbatch_size"] == 2 and len(p["module_fqns_per_model_part"]) == 4
    assert tr["global_batch_size"] == 256 and tr["local_batch_size"] == 256 // 16 and tr["seq_len"] == 4096
    assert cfg["activation_checkpoint"]["mode"] == "selective"
    cfg = tomllib.loads(emit_strategy("torchtitan", j, "tp=8,mbs=4,zero=0,recompute=full"))
    p = cfg["parallelism"]
    assert p["data_parallel_replicate_degree"] == 8 and p["data_parallel_shard_degree"] == 1
    assert cfg["training"]["local_batch_size"] == 4 and cfg["activation_checkpoint"]["mode"] == "full"


def test_torchtitan_compiles_where_the_job_prices_fused_kernels():
    """``[compile] enable`` follows the job's kernels (``--fused-kernels``: torch.compile of the model and, by
    torchtitan's default components, the loss, as the cost model prices them); off by default (eager)."""
    for fused, enabled in ((None, False), (False, False), (True, True)):
        j = job()
        j = replace(j, train=replace(j.train, fused_elementwise=fused))
        assert tomllib.loads(emit_strategy("torchtitan", j, "zero=3"))["compile"] == {"enable": enabled}


def test_maxtext_round_trip():
    j = job(cluster="v5p-512")
    cfg = yaml.safe_load(emit_strategy("maxtext", j, "tp=4,pp=2,mbs=2,recompute=full,zero=3"))
    axes = {k: v for k, v in cfg.items() if k.endswith("_parallelism")}
    prod = 1
    for v in axes.values():
        prod *= v
    assert prod == 256
    assert cfg["ici_tensor_parallelism"] * cfg["dcn_tensor_parallelism"] == 4
    assert cfg["ici_pipeline_parallelism"] * cfg["dcn_pipeline_parallelism"] == 2
    assert cfg["ici_fsdp_parallelism"] * cfg["dcn_fsdp_parallelism"] == 32
    assert cfg["num_pipeline_microbatches"] == 256 // (32 * 2) and cfg["remat_policy"] == "full"
    assert cfg["per_device_batch_size"] * 256 * cfg["gradient_accumulation_steps"] == 256
    assert cfg["max_target_length"] == 4096
    # on GPUs every 8-GPU NVLink domain is a slice: the data axis crosses DCN
    j = job()
    cfg = yaml.safe_load(emit_strategy("maxtext", j, "tp=8,zero=0,mbs=4"))
    assert cfg["ici_tensor_parallelism"] == 8 and cfg["dcn_data_parallelism"] == 8
    assert cfg["gradient_accumulation_steps"] == 256 // (8 * 4)


def test_mindformers_round_trip():
    j = job("mixtral-8x7b", cluster="ascend-910b-64")
    text = emit_strategy("mindformers", j, "tp=4,pp=4,vpp=2,ep=2,mbs=1,recompute=full,layer_split="
                                                 "4/4/4/4/4/4/4/4")
    cfg = yaml.safe_load(text)
    pc = cfg["parallel_config"]
    dp = j.devices // 16
    assert (pc["data_parallel"], pc["model_parallel"], pc["pipeline_stage"], pc["expert_parallel"]) == (dp, 4, 4, 2)
    assert pc["micro_batch_num"] == 256 // dp and pc["use_seq_parallel"] is True
    assert cfg["parallel"]["enable_parallel_optimizer"] is True and pc["optimizer_shard"] is True
    assert cfg["recompute_config"]["recompute"] is True
    mc = cfg["model"]["model_config"]
    assert mc["pp_interleave_num"] == 2 and mc["offset"] == [[0] * 4, [0] * 4]
    assert cfg["moe_config"]["enable_deredundency"] is True  # the stack's default dispatcher, dedup
    j = job(cluster="ascend-910b-64")
    cfg = yaml.safe_load(emit_strategy("mindformers", j, "tp=8,pp=2,layer_split=15/17,recompute=selective"))
    assert cfg["model"]["model_config"]["offset"] == [-1, 1]
    assert cfg["recompute_config"]["select_recompute"] is True


def test_deepspeed_round_trip():
    j = job()
    cfg = json.loads(emit_strategy("deepspeed", j, "tp=2,pp=2,mbs=2,zero=1,recompute=full"))
    assert cfg["train_batch_size"] == 256 and cfg["train_micro_batch_size_per_gpu"] == 2
    assert cfg["gradient_accumulation_steps"] == 256 // (16 * 2) and cfg["zero_optimization"]["stage"] == 1
    assert cfg["pipeline"]["stages"] == 2 and cfg["tensor_parallel"]["autotp_size"] == 2
    assert cfg["bf16"]["enabled"] is True and "activation_checkpointing" in cfg


@pytest.mark.parametrize("fmt,strategy,needle", [
    ("torchtitan", "zero=1", "strategy.zero"),
    ("torchtitan", "tp=2,zero=3,recompute=layernorm+mlp", "strategy.recompute"),
    ("maxtext", "zero=2", "strategy.zero"),
    ("deepspeed", "tp=2,sp=1", "strategy.sp"),
    ("megatron", "pp=2,schedule=gpipe", "strategy.schedule"),
])
def test_refusals_one_line(cli, fmt, strategy, needle):
    proc = cli("emit", "--format", fmt, "-m", "llama3-8b", "-c", "dgx-h100-8", "-b", "256", "-s", "4096",
               "--strategy", strategy, "--framework", "megatron", "--json")
    assert_one_line_error(proc, needle)


def test_emitter_refusals_name_framework():
    j = job()
    from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge

    s = replace(estimate(j, "tp=2,pp=2,zero=1").strategy, vpp=2)
    with pytest.raises(AsapError, match="deepspeed cannot express vpp"):
        emit("deepspeed", j, s)


def test_megatron_refuses_what_its_config_rejects():
    j = job("mixtral-8x7b")
    for strategy, why in [("pp=2,vpp=2,ep=4,recompute=full,a2a_overlap=1", "recompute=full"),
                          ("pp=2,ep=4,a2a_overlap=1", "virtual stages"), ("ep=1,a2a_overlap=1", "ep=1")]:
        with pytest.raises(AsapError, match=f"megatron cannot express a2a_overlap=1 .*{why}"):
            emit_strategy("megatron", j, strategy)


def test_unknown_format_one_line(cli):
    proc = cli("emit", "--format", "colossal", "-m", "llama3-8b", "-c", "dgx-h100-8", "-b", "256", "-s", "4096",
               "--json")
    assert_one_line_error(proc, "format", "megatron")


def test_cli_json(cli):
    proc = cli("emit", "--format", "deepspeed", "-m", "llama3-8b", "-c", "dgx-h100-8", "-b", "256", "-s", "4096",
               "--strategy", "tp=2", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["format"] == "deepspeed" and json.loads(doc["text"])["tensor_parallel"]["autotp_size"] == 2
    proc = cli("emit", "--format", "megatron", "-m", "llama3-8b", "-c", "dgx-h100-8", "-b", "256", "-s", "4096")
    assert proc.returncode == 0 and "--tensor-model-parallel-size 1" in proc.stdout


def test_deepspeed_own_loader():
    if importlib_spec("deepspeed") is None:
        pytest.skip("deepspeed is not installed (pip install torchtitan==0.2.2 deepspeed==0.19.8)")
    try:
        from deepspeed.runtime.config import DeepSpeedConfig
    except ImportError as e:
        pytest.skip(f"deepspeed does not import here: {e}")
    j = job(cluster="dgx-h100-1", b=16)
    # dp=1: without torch.distributed DeepSpeedConfig takes a world size of 1
    cfg = DeepSpeedConfig(json.loads(emit_strategy("deepspeed", j, "tp=2,pp=4,mbs=2,zero=1,recompute=full")))
    assert cfg.train_batch_size == 16 and cfg.train_micro_batch_size_per_gpu == 2
    assert cfg.gradient_accumulation_steps == 8 and cfg.zero_optimization_stage == 1
    assert cfg.bfloat16_config.enabled and cfg.pipeline["stages"] == 4


def importlib_spec(name):
    import importlib.util

    return importlib.util.find_spec(name)


def test_plan_emit_writes_the_best_plan_in_the_formats_options(cli):
    """``plan --emit FORMAT`` plans with the format's own stack and emits the best candidate."""
    p = cli("plan", "-m", "llama3-8b", "-c", "h100-sxm", "--devices", "16", "-b", "64", "-s", "4096",
            "--emit", "torchtitan", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    import tomllib

    cfg = tomllib.loads(d["emit"]["text"])
    best = d["candidates"][0]["strategy"]
    assert d["emit"]["format"] == "torchtitan"
    assert cfg["parallelism"]["tensor_parallel_degree"] == best["tp"]
    assert cfg["parallelism"]["pipeline_parallel_degree"] == best["pp"]
    bad = cli("plan", "-m", "llama3-8b", "-c", "h100-sxm", "--devices", "16", "-b", "64", "-s", "4096",
              "--emit", "nope")
    assert_one_line_error(bad, "format")


def test_plan_emit_takes_the_best_candidate_the_format_can_express(cli):
    """Faster candidates the format refuses are skipped, each with its one-line reason; the emitted one is the
    first the emitter accepts, in plan order."""
    p = cli("plan", "-m", "mixtral-8x7b", "-c", "dgx-h100-8node", "-b", "256", "-s", "4096", "--top", "8",
            "--emit", "megatron", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    order = [c["strategy_string"] for c in d["candidates"]]
    emitted = d["emit"]["strategy_string"]
    assert emitted in order
    assert [s["strategy_string"] for s in d["emit"]["skipped"]] == order[:order.index(emitted)]
    assert all(s["reason"].startswith(("a2a_overlap", "schedule", "dispatcher")) or "megatron" in s["reason"]
               for s in d["emit"]["skipped"])
