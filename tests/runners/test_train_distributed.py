"""Real runs of the reference trainer on CPU processes (gloo), several strategies per torchrun launch.

The acceptance set: tiny-dense under dp=4, dp=2+tp=2, pp=2+dp=2, zero=3 dp=4, pp=2+vpp=2+tp=2; tiny-moe under
dp=4, ep=2 folded over dp=4 (and over dp=2 alone), ep=4, and tp=2 with ep=2 and expert tensor parallelism
etp=2 (Megatron-Core's default etp=tp). All start from the same weights and see the same
batches, so in fp32 their first-step losses must agree (the test allows 1e-3 relative), and so must the
later steps' (the same optimizer on the same gradients, up to reduction order). A few more combinations
(GPipe, zero-bubble, ZeRO-2, full and selective recomputation, expert tensor parallelism without tp) must
agree as well.
"""

from __future__ import annotations

import math
import time

import pytest

pytest.importorskip("torch")

from asap.spec.loader import load_model  # noqa: E402
from asap.spec.train import TrainSpec  # noqa: E402
from asap.runners.torch.launch import RunConfig, launch, resolve_run_strategy  # noqa: E402

GB, SEQ, STEPS = 8, 32, 3
DENSE = ["dp=4", "dp=2,tp=2", "pp=2,dp=2", "dp=4,zero=3", "pp=2,vpp=2,tp=2"]
MOE4 = ["dp=4", "dp=4,ep=2", "ep=4", "tp=2,ep=2,dp=2"]
WALL: dict[str, float] = {}


# more schedules, ZeRO stages, recomputation and folding, in one launch of mixed models
EXTRA = [("tiny-dense", "pp=2,dp=2,schedule=gpipe,zero=0"), ("tiny-dense", "pp=2,vpp=2,dp=2,schedule=zb,zero=2"),
         ("tiny-dense", "dp=2,tp=2,sp=0,zero=0,recompute=full"), ("tiny-dense", "pp=2,tp=2,mbs=2,recompute=selective"),
         ("tiny-moe", "dp=4,etp=2,zero=2,recompute=full"),
         ("tiny-dense", "dp=2,tp=2,recompute=layernorm+mlp"), ("tiny-moe", "dp=4,ep=2,recompute=core_attn+layernorm+moe")]


def _launch(model: str | list[str], strategies: list[str], tmp_path_factory) -> dict[str, object]:
    models = model if isinstance(model, list) else [model] * len(strategies)
    train = TrainSpec(GB, SEQ, "fp32")
    configs = []
    for m, s in zip(models, strategies, strict=True):
        spec = load_model(m)
        configs.append(RunConfig(spec, resolve_run_strategy(s, spec, train), GB, SEQ, steps=STEPS))
    t0 = time.perf_counter()
    results = launch(configs, device="cpu", timeout_s=600, workdir=str(tmp_path_factory.mktemp("run")))
    WALL[", ".join(f"{m}: {s}" for m, s in zip(models, strategies, strict=True))] = time.perf_counter() - t0
    return dict(zip(strategies, results, strict=True))


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return _launch("tiny-dense", DENSE, tmp_path_factory)


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    res = _launch("tiny-moe", MOE4, tmp_path_factory)
    res.update(_launch("tiny-moe", ["dp=2,ep=2"], tmp_path_factory))
    return res


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def _check_runs(results: dict, nprocs: dict[str, int] | None = None):
    for name, r in results.items():
        assert len(r.losses) == STEPS, name
        assert all(math.isfinite(x) for x in r.losses), name
        assert r.losses[-1] < r.losses[0], f"{name}: loss did not fall: {r.losses}"
        assert r.step_time_s > 0 and r.tokens_per_s == pytest.approx(GB * SEQ / r.step_time_s)
        assert r.peak_memory_gb > 0.05  # peak RSS of a process that imported torch
        assert r.backend == "gloo" and r.device == "cpu"
        assert r.nproc == (nprocs or {}).get(name, 4)


def test_dense_strategies_train_and_agree(dense):
    _check_runs(dense)
    ref = dense["dp=4"].losses
    for name, r in dense.items():
        assert _rel(r.losses[0], ref[0]) < 1e-3, f"{name}: first-step loss {r.losses[0]} vs dp=4 {ref[0]}"
        for a, b in zip(r.losses, ref, strict=True):
            assert _rel(a, b) < 1e-3, f"{name}: losses {r.losses} vs dp=4 {ref}"
    assert dense["dp=2,tp=2"].strategy["sp"] == 1  # sequence parallelism is the default with tp
    assert dense["pp=2,vpp=2,tp=2"].strategy["schedule"] == "interleaved"
    print("\nfirst-step losses:", {k: v.losses[0] for k, v in dense.items()})
    print("max relative spread of first-step losses:",
          max(_rel(v.losses[0], ref[0]) for v in dense.values()))


def test_moe_strategies_train_and_agree(moe):
    _check_runs(moe, {"dp=2,ep=2": 2})
    ref = moe["dp=4"].losses
    assert moe["ep=4"].strategy["dp"] == 4  # ep folded over dp
    assert moe["tp=2,ep=2,dp=2"].strategy["etp"] == 2
    for name, r in moe.items():
        assert _rel(r.losses[0], ref[0]) < 1e-3, f"{name}: first-step loss {r.losses[0]} vs dp=4 {ref[0]}"
        # the load-balancing loss of each rank sees the same tokens under ep, so later steps agree too
        if name in MOE4:
            for a, b in zip(r.losses, ref, strict=True):
                assert _rel(a, b) < 1e-3, f"{name}: losses {r.losses} vs dp=4 {ref}"
        assert all(a is not None and a > 0 for a in r.aux_losses), name
    print("\nfirst-step losses:", {k: v.losses[0] for k, v in moe.items()})


@pytest.fixture(scope="module")
def extra(tmp_path_factory):
    return _launch([m for m, _ in EXTRA], [s for _, s in EXTRA], tmp_path_factory)


def test_more_combinations_agree(extra, dense, moe):
    _check_runs(extra)
    for model, name in EXTRA:
        ref = (dense if model == "tiny-dense" else moe)["dp=4"].losses
        for a, b in zip(extra[name].losses, ref, strict=True):
            assert _rel(a, b) < 1e-3, f"{model} {name}: losses {extra[name].losses} vs dp=4 {ref}"


def test_report_wall_times(dense, moe, extra):
    for k, v in WALL.items():
        print(f"\nlaunch wall time {v:.1f} s: {k}")
