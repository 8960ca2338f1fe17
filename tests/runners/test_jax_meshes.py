"""``asap run --backend jax`` on 8 virtual CPU devices: every mesh of the same job starts from the same loss,
and so does the torch backend (same weights, data and loss)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from asap.cli import register_commands, app, main
from asap.errors import AsapError
from asap.runners.jax.launch import check_supported_jax, launch
from asap.runners.jax.shard import mesh_shape
from asap.spec.loader import load_model
from asap.spec.strategy import Strategy
from asap.spec.train import TrainSpec
from asap.runners.torch.launch import RunConfig, resolve_run_strategy

pytestmark = pytest.mark.jax
register_commands()
pytest.importorskip("jax")

GB, SEQ = 8, 32
DENSE = {"dp=8,zero=0": "data", "dp=8,zero=3": "fsdp", "dp=2,tp=4": "tensor", "dp=4,cp=2": "context",
         "dp=2,tp=2,zero=3": "tensor"}
MOE = {"ep=4,dp=8": "expert", "dp=8,zero=0": "data"}


def _config(model: str, text: str, steps: int = 2) -> RunConfig:
    m = load_model(model)
    s = resolve_run_strategy(text, m, TrainSpec(GB, SEQ, "fp32"))
    return RunConfig(model=m, strategy=s, global_batch=GB, seq_len=SEQ, steps=steps)


@pytest.fixture(scope="module")
def runs():
    """Every mesh of the acceptance list in one child process (one compile each)."""
    configs = [_config("tiny-dense", t) for t in DENSE] + [_config("tiny-moe", t) for t in MOE]
    results = launch(configs, timeout_s=900)
    keys = [("tiny-dense", t) for t in DENSE] + [("tiny-moe", t) for t in MOE]
    return dict(zip(keys, results, strict=True))


def test_each_strategy_runs_on_its_named_mesh_axis(runs):
    for (model, text), r in runs.items():
        axis = (DENSE if model == "tiny-dense" else MOE)[text]
        assert r.mesh[axis] > 1 and r.nproc == math.prod(r.mesh.values()), (text, r.mesh)
        assert r.backend == "jax" and len(r.losses) == 2 and r.step_time_s > 0 and r.tokens_per_s > 0
    assert runs[("tiny-dense", "dp=2,tp=2,zero=3")].mesh["fsdp"] == 2  # 4 of the child's 8 devices
    assert runs[("tiny-dense", "dp=2,tp=4")].nproc == 8
    assert runs[("tiny-moe", "ep=4,dp=8")].mesh["expert"] == 4


def test_equivalent_meshes_give_the_same_first_step_loss(runs):
    for model in ("tiny-dense", "tiny-moe"):
        first = [r.losses[0] for (m, _), r in runs.items() if m == model]
        assert max(first) - min(first) <= 1e-4 * abs(min(first)), (model, first)
        # an untrained model over 512 tokens: about ln(512) = 6.24
        assert 5.5 < first[0] < 7.0


def test_jax_and_torch_backends_agree_on_the_first_step_loss():
    """tiny-dense dp=4: the same initial weights (exported from asap.runners.torch.model), the same SyntheticTokens
    batch and the same mean token cross entropy on both backends, within 1e-3 relative."""
    runner = CliRunner()
    args = ["run", "-m", "tiny-dense", "-S", "dp=4", "-b", str(GB), "-s", str(SEQ), "--steps", "1", "--json"]
    torch_res = runner.invoke(app, args)
    jax_res = runner.invoke(app, args + ["--backend", "jax"])
    assert torch_res.exit_code == 0 and jax_res.exit_code == 0, (torch_res.output, jax_res.output)
    lt = json.loads(torch_res.stdout)["losses"][0]
    lj = json.loads(jax_res.stdout)["losses"][0]
    assert json.loads(jax_res.stdout)["backend"] == "jax"
    assert abs(lt - lj) <= 1e-3 * abs(lt), (lt, lj)


def test_what_the_jax_backend_cannot_run_is_refused_in_one_line(capsys):
    m = load_model("tiny-moe")
    t = TrainSpec(GB, SEQ, "fp32")
    with pytest.raises(AsapError, match="pp=2"):
        check_supported_jax(load_model("tiny-dense"), resolve_run_strategy("pp=2,dp=2", load_model("tiny-dense"), t), t)
    with pytest.raises(AsapError, match="dp=8,ep=4"):  # the expert axis is carved out of dp, as tpu_mesh does
        mesh_shape(Strategy(dp=2, ep=4))
    with pytest.raises(AsapError, match="does not divide"):  # the usual keys say so before any mesh is made
        resolve_run_strategy("ep=4,dp=2", m, t)
    with pytest.raises(SystemExit) as exited:
        main(["run", "-m", "tiny-dense", "-S", "pp=2", "-b", "8", "-s", "32", "--backend", "jax"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and "pp=2" in err[0], err
