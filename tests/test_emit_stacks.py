"""Round-trips through the stacks' own code: each emitted config is loaded by the stack's config classes and the
model it describes is built (meta device: no weights) by the stack's model code; its parameter count equals
asap's count of the same model (``ModelSpec.num_params``). A dense GQA model (llama3-8b), an MoE model
(mixtral-8x7b) and an MLA model (deepseek-v3: MLA, MoE with shared experts and dense layers, MTP)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from asap.cli.emit import emit_strategy
from asap.cli.estimate import load_job

STACKS = Path(__file__).parent / "stacks"


def job(model="llama3-8b", cluster="dgx-h100-8", b=256, s=4096, precision="bf16"):
    return load_job(model, cluster, None, None, b, s, precision)


def installed(*names):
    for name in names:
        if importlib.util.find_spec(name.split(".")[0]) is None or importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed (the quick start's test command installs it)")


def run_loader(script, *args, timeout=600):
    proc = subprocess.run([sys.executable, str(STACKS / script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


MEGATRON_CASES = [
    ("llama3-8b", "bf16", "tp=2,pp=2,zero=3,recompute=layernorm+moe_act,layer_split=15/17"),
    ("mixtral-8x7b", "bf16", "tp=2,pp=4,vpp=2,ep=4,mbs=2,recompute=selective,dispatcher=dedup,a2a_overlap=1"),
    ("deepseek-v3", "bf16", "tp=2,pp=8,ep=8,zero=1,recompute=selective"),
    # TransformerConfig checks fp8 with MoE or with layernorm / moe_act recomputation against the installed
    # Transformer Engine version (not installable here): fp8 on the dense model with full recomputation
    ("llama3-8b", "fp8", "tp=2,pp=2,recompute=full"),
]
# flags read outside megatron.core's configs: by pretrain_gpt.py's training loop and checkpointing
MEGATRON_TRAINING_ONLY = {"global_batch_size", "micro_batch_size", "seq_length", "ckpt_format"}


def test_megatron_core_builds_the_emitted_model(tmp_path):
    """megatron-core 0.14's TransformerConfig / MLATransformerConfig and DistributedDataParallelConfig take the
    emitted arguments (its wheel has no Megatron-LM argument parser: tests/stacks/megatron_load.py maps each flag
    to its argparse destination, then to the configs by field name), and GPTModel built from them has asap's
    parameter count, MTP included."""
    installed("megatron.core")
    paths = []
    for i, (name, precision, strategy) in enumerate(MEGATRON_CASES):
        m, c, t = job(name, precision=precision)
        paths.append(tmp_path / f"args{i}.sh")
        paths[-1].write_text(emit_strategy("megatron", m, c, t, strategy))
    dense, moe, mla, fp8 = run_loader("megatron_load.py", *paths)
    for (name, _, _), got in zip(MEGATRON_CASES, (dense, moe, mla, fp8)):
        m = job(name)[0]
        assert got["params"] == m.num_params(include_mtp=True), name
        assert got["normalization"] == "RMSNorm" and got["gated"] and got["activation"] == "silu"
        assert got["position_embedding_type"] == "rope" and got["rotary_base"] == m.rope_theta
        assert got["bias"] is False and set(got["elsewhere"]) <= MEGATRON_TRAINING_ONLY, got["elsewhere"]
    assert dense["class"] == "TransformerConfig" and dense["query_groups"] == 8
    assert dense["layout"] == [16, 18] and dense["modules"] == ["layernorm"]  # E+15t | 17t+L
    # Megatron-FSDP: the sharding strategy, the distributed optimizer and its checkpoint format
    assert dense["megatron_fsdp"] and dense["sharding"] == "optim_grads_params" and dense["dist_opt"]
    assert "ckpt_format" in dense["elsewhere"] and dense["grad_reduce_in_fp32"] is False
    assert (moe["tp"], moe["pp"], moe["vpp"], moe["ep"], moe["experts"], moe["topk"]) == (2, 4, 2, 4, 8, 2)
    assert (moe["dispatcher"], moe["deepep"], moe["a2a_overlap"]) == ("flex", True, True)
    assert moe["sp"] and moe["dist_opt"] and moe["overlap_grad_reduce"] and moe["recompute"] == "selective"
    assert mla["class"] == "MLATransformerConfig" and mla["mla"] and mla["mtp"] == 1
    assert (mla["experts"], mla["topk"], mla["modules"]) == (256, 8, ["core_attn", "layernorm", "moe_act"])
    assert mla["layout"] == [8, 7, 8, 8, 8, 8, 8, 9]  # E+7t, 7t, ..., 7t+m+L
    assert (fp8["fp8"], fp8["fp8_recipe"], fp8["bf16"], fp8["recompute"]) == ("hybrid", "tensorwise", True, "full")


def titan_case(tmp_path, model, strategy, cluster="dgx-h100-8", b=256, s=4096, precision="bf16"):
    from asap.emit.torchtitan_model import model_args_json

    _, c, t = job(cluster=cluster, b=b, s=s, precision=precision)
    toml, args = tmp_path / f"{model.name}.toml", tmp_path / f"{model.name}.json"
    toml.write_text(emit_strategy("torchtitan", model, c, t, strategy))
    args.write_text(model_args_json(model, s))
    return toml, args


def test_torchtitan_builds_the_emitted_model(tmp_path):
    """torchtitan 0.2.2's ConfigManager loads the emitted TOML; the model its train spec builds from [model]
    name and flavor (a custom flavor registered from the emitted arguments first) has asap's parameter count:
    llama3-8b is torchtitan's llama3 8B, tiny-dense a custom llama3 flavor, mixtral-8x7b a qwen3 MoE flavor
    (no q/k norms), deepseek-v3 (without MTP, which torchtitan 0.2.2 lacks) a deepseek_v3 flavor."""
    installed("torchtitan")
    from dataclasses import replace

    cases = [("llama3-8b", "tp=2,pp=2,vpp=2,mbs=2,recompute=selective,zero=3", ("llama3", "8B")),
             ("tiny-dense", "tp=2,zero=0,recompute=full", ("llama3", "asap-tiny-dense")),
             ("mixtral-8x7b", "ep=8,zero=3,mbs=2", ("qwen3", "asap-mixtral-8x7b")),
             ("deepseek-v3", "pp=4,ep=8,zero=3", ("deepseek_v3", "asap-deepseek-v3"))]
    for name, strategy, (family, flavor) in cases:
        m = job(name)[0]
        m = replace(m, mtp_layers=0)
        got = run_loader("torchtitan_load.py", *titan_case(tmp_path, m, strategy), timeout=300)
        assert (got["name"], got["flavor"]) == (family, flavor)
        assert got["params"] == m.num_params(), name
        assert got["layer_names"] == [str(i) for i in range(m.num_layers)]
        assert got["global_batch"] == 256 and got["seq_len"] == 4096 and got["mixed_precision_param"] == "bfloat16"
        if name == "llama3-8b":
            assert (got["tp"], got["pp"], got["dp_shard"], got["schedule"], got["ac"]) == (2, 2, 16,
                                                                                        "Interleaved1F1B", "selective")
            assert [len(part) for part in got["fqns"]] == [9, 8, 8, 10]  # embedding + 8 layers, ..., 8 + norm, output
        if name == "tiny-dense":
            assert (got["dp_replicate"], got["dp_shard"], got["tp"], got["local_batch"]) == (32, 1, 2, 1)
        if name == "deepseek-v3":
            assert got["ep"] == 8 and got["pp"] == 4


def test_torchtitan_registered_flavors_are_asap_shapes(tmp_path):
    """Every flavor the emitter names as torchtitan's own (REGISTERED) builds a model of asap's count."""
    installed("torchtitan")
    from asap.emit.torchtitan_model import REGISTERED
    from asap.spec.model import ModelSpec

    for (family, flavor), shape in REGISTERED.items():
        m = ModelSpec(name=f"{family}-{flavor}", **shape)
        got = run_loader("torchtitan_load.py", *titan_case(tmp_path, m, "zero=3"), timeout=300)
        assert (got["name"], got["flavor"], got["params"]) == (family, flavor, m.num_params())


def maxtext_python():
    """MaxText 0.2.5 needs Python >= 3.12: its own venv (ASAP_MAXTEXT_PYTHON, else ../main/.venv-maxtext)."""
    import os

    for candidate in (os.environ.get("ASAP_MAXTEXT_PYTHON"), Path(__file__).parents[2] / "main/.venv-maxtext/bin/python"):
        if candidate and Path(candidate).exists():
            return str(candidate)
    pytest.skip("no MaxText venv (Python >= 3.12 with maxtext 0.2.5: see docs/emit.md; ASAP_MAXTEXT_PYTHON names it)")


def test_maxtext_pyconfig_builds_the_emitted_model(tmp_path):
    """MaxText 0.2.5's pyconfig takes the emitted YAML over its base.yml on 8 virtual CPU devices; the model it
    creates on that mesh (abstract: jax.eval_shape of its init) has asap's parameter count, MTP included."""
    python = maxtext_python()
    cases = [("tiny-dense", "dp=4,tp=2,zero=3", "fp32"), ("mixtral-8x7b", "dp=8,ep=8,zero=3", "bf16"),
             ("deepseek-v3", "dp=8,ep=4,zero=3,recompute=full", "bf16")]
    paths = []
    for name, strategy, precision in cases:
        m, c, t = load_job(name, "local-cpu", None, 8, 8, 64, precision)
        paths.append(tmp_path / f"{name}.yml")
        paths[-1].write_text(emit_strategy("maxtext", m, c, t, strategy))
    proc = subprocess.run([python, str(STACKS / "maxtext_load.py"), "8", *map(str, paths)], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for (name, _, _), g in zip(cases, got):
        m = job(name)[0]
        assert g["params"] == m.num_params(include_mtp=True), name
        assert (g["layers"], g["emb"], g["rope"], g["batch"], g["seq"]) == (m.num_layers, m.hidden_size,
                                                                            m.rope_theta, 8, 64)
    dense, moe, mla = got
    assert dense["decoder_block"].endswith("LLAMA2") and dense["mesh"]["fsdp"] == 4 and dense["mesh"]["tensor"] == 2
    assert moe["decoder_block"].endswith("MIXTRAL") and moe["experts"] == 8 and moe["mesh"]["expert"] == 8
    assert mla["decoder_block"].endswith("DEEPSEEK") and mla["attention_type"] == "mla" and mla["mtp"] == 1
    assert (mla["mesh"]["expert"], mla["mesh"]["fsdp"], mla["dtype"]) == (4, 2, "bfloat16")
