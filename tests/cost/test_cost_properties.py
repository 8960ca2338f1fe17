"""Monotonic behaviour of the cost model (hypothesis property tests)."""

from dataclasses import replace

from hypothesis import given, settings, strategies as st

from asap.cost.batch import StrategyBatch
from asap.cost.estimate import estimate_batch
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.strategy import Strategy
from asap.spec.train import TrainSpec
from asap.spec.job import Job

MODELS = {name: load_model(name) for name in ("llama3-70b", "qwen3-30b-a3b", "gpt3-175b")}
CLUSTER = load_cluster("h100-sxm", nodes=16)  # 128 devices

strategy_st = st.fixed_dictionaries(dict(
    model=st.sampled_from(sorted(MODELS)),
    tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4]), cp=st.sampled_from([1, 2]),
    mbs=st.sampled_from([1, 2]), recompute=st.sampled_from(["none", "selective", "full"]),
    zero=st.sampled_from([0, 1, 2, 3]), ep=st.sampled_from([1, 2, 4, 8]), seq=st.sampled_from([2048, 4096]),
    gb_mult=st.sampled_from([1, 2, 4]),
))


def build(p, tp=None, zero=None, gb=None):
    model = MODELS[p["model"]]
    tp = tp or p["tp"]
    ep = p["ep"] if model.moe else 1
    dp = 128 // (tp * p["pp"] * p["cp"])
    gb = gb or dp * p["mbs"] * 8 * p["gb_mult"]
    s = Strategy(dp=dp, tp=tp, pp=p["pp"], cp=p["cp"], ep=ep, etp=1, mbs=p["mbs"], recompute=p["recompute"],
                 zero=p["zero"] if zero is None else zero, sp=1 if tp > 1 else 0)
    return model, TrainSpec(gb, p["seq"]), s


def run(model, train, s):
    return estimate_batch(Job.resolve(model, CLUSTER, train), StrategyBatch.from_strategies([s]))


@settings(max_examples=60, deadline=None)
@given(strategy_st)
def test_more_tp_never_raises_weight_memory(p):
    prev = None
    for tp in (1, 2, 4, 8):
        model, train, s = build(p, tp=tp)
        w = float(run(model, train, s).memory_gb["weights"][0])
        if prev is not None:
            assert w <= prev + 1e-9
        prev = w


@settings(max_examples=60, deadline=None)
@given(strategy_st)
def test_larger_global_batch_never_lowers_step_time(p):
    model, train, s = build(p)
    t1 = float(run(model, train, s).step_time_s[0])
    t2 = float(run(model, replace(train, global_batch=train.global_batch * 2), s).step_time_s[0])
    assert t2 >= t1


@settings(max_examples=60, deadline=None)
@given(strategy_st)
def test_zero3_never_uses_more_memory_than_zero1(p):
    model, train, s = build(p)
    m1 = float(run(model, train, replace(s, zero=1)).peak_memory_gb[0])
    m3 = float(run(model, train, replace(s, zero=3)).peak_memory_gb[0])
    assert m3 <= m1 + 1e-9
