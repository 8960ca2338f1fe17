"""Every emitted job runs as emitted (issue 45, points 10-12): its length follows the token budget in every format,
it carries its launch line and what the user must still set, and a torchtitan model without a stock flavor comes
with the registration file its launch line runs; each checked by the stack's own loader where one is installed."""

import json
import subprocess
import sys
import tomllib

import pytest
import yaml

from asap.search.advice import emitted_job, write_job
from asap.spec.job import Job
from asap.emit.launch import run_length
from asap.errors import AsapError
from conftest import run_cli
from test_emit_stacks import STACKS, installed, run_loader

ITERS_2T = 953674  # 2e12 // (512 x 4096)


def job(model="llama3-8b", cluster="dgx-h100-8node", b=512, s=4096, precision="bf16"):
    return Job.from_names(model, cluster, b, s, precision)


def test_run_length_by_hand():
    """2T tokens at 512 x 4096: 953,674 steps; 1% warmup (9,537); a checkpoint each hour at 4 s/step (900)."""
    r = run_length(job().train, 2e12, step_time_s=4.0)
    assert (r.iterations, r.warmup_iters, r.decay_iters, r.checkpoint_interval) == (ITERS_2T, 9537, ITERS_2T, 900)
    assert run_length(job().train, None).iterations is None


def cli(*args):
    return run_cli(*args, timeout=600)


def test_plan_tokens_emit_bridge_writes_the_budgets_length():
    """The issue's command: ``plan --tokens 2T --emit megatron-bridge`` wrote train_iters 1000."""
    p = cli("plan", "-m", "llama3-8b", "-c", "dgx-h100-8node", "-b", "512", "-s", "4096", "--tokens", "2T",
            "--emit", "megatron-bridge", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    cfg = yaml.safe_load(d["emit"]["text"])
    best = next(c for c in d["candidates"] if c["strategy_string"] == d["emit"]["strategy_string"])
    assert cfg["train"]["train_iters"] == ITERS_2T
    assert (cfg["scheduler"]["lr_warmup_iters"], cfg["scheduler"]["lr_decay_iters"]) == (9537, ITERS_2T)
    assert cfg["checkpoint"]["save_interval"] == int(3600 // best["step_time_s"])


def lengths_of(fmt, text):
    """(steps, warmup, checkpoint interval) as each format spells them (None where it has no such key)."""
    if fmt == "megatron":
        a = text.split()
        at = {k: int(a[a.index(k) + 1]) for k in ("--train-iters", "--lr-warmup-iters", "--save-interval")}
        return at["--train-iters"], at["--lr-warmup-iters"], at["--save-interval"]
    if fmt == "torchtitan":
        c = tomllib.loads(text)
        return c["training"]["steps"], c["lr_scheduler"]["warmup_steps"], c["checkpoint"]["interval"]
    if fmt == "maxtext":
        c = yaml.safe_load(text)
        return c["steps"], round(c["warmup_steps_fraction"] * c["steps"]), c["checkpoint_period"]
    if fmt == "mindformers":
        c = yaml.safe_load(text)
        return c["lr_schedule"]["total_steps"], c["lr_schedule"]["warmup_steps"], \
            c["callbacks"][1]["save_checkpoint_steps"]
    if fmt == "deepspeed":
        p = json.loads(text)["scheduler"]["params"]
        return p["total_num_steps"], p["warmup_num_steps"], None
    c = yaml.safe_load(text)
    return c["train"]["train_iters"], c["scheduler"]["lr_warmup_iters"], c["checkpoint"]["save_interval"]


@pytest.mark.parametrize("fmt", ["megatron", "megatron-bridge", "torchtitan", "maxtext", "mindformers", "deepspeed"])
def test_every_format_follows_tokens(fmt):
    d = emitted_job(fmt, job(), "tp2", tokens=2e12)
    steps, warmup, every = lengths_of(fmt, d["text"])
    assert (steps, warmup) == (ITERS_2T, 9537)
    assert every in (None, d["run"]["checkpoint_interval"])
    assert d["run"]["checkpoint_interval"] == int(3600 // d["run"]["step_time_s"])
    # without a budget the length is a placeholder the header lists among what to set
    plain = emitted_job(fmt, job(), "tp2")
    assert any("run's length" in item for item in plain["launch"]["to_set"])


@pytest.mark.parametrize("fmt,program", [("megatron", "pretrain_gpt.py"), ("megatron-bridge", "asap_bridge_pretrain.py"),
                                         ("torchtitan", "asap_register_llama3_8b.py"), ("deepspeed", "deepspeed "),
                                         ("mindformers", "msrun_launcher.sh"), ("maxtext", "maxtext.trainers")])
def test_every_format_carries_its_launch(fmt, program):
    """The launch line (nodes and devices per node), the environment the stack needs, what is left to set."""
    d = emitted_job(fmt, job(), "tp2")
    ln = d["launch"]
    assert program in ln["command"]
    if fmt not in ("maxtext",):
        assert ("--nnodes 8" in ln["command"] and "--nproc-per-node 8" in ln["command"]) or \
            ("--num_nodes 8 --num_gpus 8" in ln["command"]) or " 64 8 " in ln["command"]
    said = " ".join(ln["to_set"])
    assert "dataset" in said and "tokenizer" in said
    assert any(w in said for w in ("checkpoint", "output", "--save", "save_checkpoint"))
    if d["text"].startswith("#"):  # the formats with comments carry it in their header
        assert ln["command"] in d["text"] and "you must still set" in d["text"]


def test_cuda_device_max_connections():
    """Megatron-LM (validate_args) and Megatron-Bridge (PerfEnvPlugin) both need 1 with tp on Hopper; Bridge
    wants 32 on Blackwell when tp meets dp, 8 without tp on Hopper."""
    for fmt in ("megatron", "megatron-bridge"):
        d = emitted_job(fmt, job(), "tp2")
        assert d["launch"]["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
        assert d["text"].count("CUDA_DEVICE_MAX_CONNECTIONS=1") == 1
    blackwell = Job.from_names("llama3-8b", "gb200-nvl72", 512, 4096, devices=64)
    assert emitted_job("megatron-bridge", blackwell, "tp2")["launch"]["env"] == \
        {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}
    assert emitted_job("megatron-bridge", job(), "tp1")["launch"]["env"] == {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}


def test_bridge_loads_the_budgets_length(tmp_path):
    """Megatron-Bridge's own ConfigContainer.from_yaml (strict) and validate() take the budget's length."""
    import os

    sys.path.insert(0, str(STACKS))
    from bridge_env import site

    try:
        where = str(site())
    except SystemExit as e:
        pytest.skip(str(e))
    path = tmp_path / "bridge_config.yaml"
    d = emitted_job("megatron-bridge", job(), "tp2", tokens=2e12)
    path.write_text(d["text"])
    got = json.loads(subprocess.run([sys.executable, str(STACKS / "bridge_load.py"), f"64:{path}"], capture_output=True,
                                    text=True, timeout=1200, env={**os.environ, "ASAP_BRIDGE_SITE": where},
                                    check=True).stdout.strip().splitlines()[-1])[0]
    assert (got["train_iters"], got["lr_warmup_iters"], got["lr_decay_iters"], got["save_interval"]) == \
        (ITERS_2T, 9537, ITERS_2T, d["run"]["checkpoint_interval"])


def test_torchtitan_registration_file_runs_in_torchtitan(tmp_path):
    """A model no stock flavor matches (llama3-70b: Llama 3 without 3.1's RoPE scaling; mixtral-8x7b) is emitted
    with ``asap_register_<model>.py``, the file its launch line runs: torchtitan 0.2.2's own ConfigManager and train
    spec build the model after that file registers the flavor (run as torchtitan_load.py runs it, not as
    __main__), with asap's parameter count and the budget's steps, warmup and checkpoint interval."""
    installed("torchtitan")
    for name in ("llama3-70b", "mixtral-8x7b"):
        j = job(name, cluster="dgx-h100-8")
        d = emitted_job("torchtitan", j, "ep8 zero3" if name.startswith("mixtral") else "tp8 zero3", tokens=1e10)
        reg = f"asap_register_{name.replace('-', '_')}.py"
        assert list(d["files"]) == [reg] and f"{reg} --job.config_file job.toml" in d["launch"]["command"]
        folder = tmp_path / name
        written = write_job(str(folder), d)
        assert sorted(written) == sorted([str(folder / "job.toml"), str(folder / reg)])
        got = run_loader("torchtitan_load.py", folder / "job.toml", folder / reg, timeout=300)
        assert (got["flavor"], got["params"]) == (f"asap-{name}", j.model.num_params())
        assert (got["steps"], got["warmup_steps"], got["decay_type"]) == (d["run"]["iterations"],
                                                                          d["run"]["warmup_iters"], "cosine")
        assert got["checkpoint"] == [True, d["run"]["checkpoint_interval"]]


def test_torchtitan_moe_balancing_loss_differs_or_strict_refuses():
    """Mixtral balances its experts with a loss (aux_loss_coef 0.02); torchtitan 0.2.2 has none and balances by the
    expert bias: emitted that way with a line saying so, or refused under --strict."""
    j = job("mixtral-8x7b", cluster="dgx-h100-8")
    d = emitted_job("torchtitan", j, "ep8 zero3")
    assert any("aux_loss_coef=0.02" in x and "expert bias" in x for x in d["launch"]["differs"])
    assert "# differs from asap's model: moe.aux_loss_coef=0.02" in d["text"]
    assert "load_balance_coeff': 0.001" in d["files"]["asap_register_mixtral_8x7b.py"]
    with pytest.raises(AsapError, match=r"model.moe.aux_loss_coef: torchtitan cannot express"):
        emitted_job("torchtitan", j, "ep8 zero3", strict=True)
    p = cli("emit", "-f", "torchtitan", "-m", "mixtral-8x7b", "-c", "dgx-h100-8", "-b", "512", "-s", "4096",
            "-S", "ep8 zero3", "--strict")
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "moe.aux_loss_coef" in lines[0]
