"""`asap diagnose --fusion` on a real CPU trace of the reference trainer (tiny-dense, one process), checked
against a count made here from the raw trace JSON (its events' "Input Dims" / "Input type", nesting by time
containment, written without asap's code), and against what the model's structure says by construction:
every RMSNorm of the forward pass is one fusible chain. A real GPU trace (HolisticTraceAnalysis test data)
gets sensible chains too."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from asap.profile import diagnose  # noqa: E402
from asap.spec.loader import load_model  # noqa: E402
from asap.runners.torch.launch import resolve_run_strategy, run  # noqa: E402
from asap.spec.train import TrainSpec  # noqa: E402

GB, SEQ, STEPS = 2, 16, 3  # dp=1, mbs=1: two micro-batches a step; the first step is the profiler's warm-up
GPU_TRACE = Path(__file__).resolve().parents[3] / "shared" / "traces" / "hta" / "trace_diff_control_control.json.gz"

ELEM_BYTES = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "int": 4, "bool": 1}
# ops that move nothing themselves: views, and wrappers whose copy is a recorded child (to -> _to_copy -> copy_)
NO_TRAFFIC = {"view", "reshape", "_reshape_alias", "t", "transpose", "permute", "expand", "as_strided", "slice",
              "select", "unsqueeze", "squeeze", "detach", "alias", "empty", "empty_strided", "empty_like",
              "flatten", "unflatten", "_unsafe_view", "split", "chunk", "narrow", "unbind", "split_with_sizes",
              "view_as", "expand_as", "lift_fresh", "resolve_conj", "resolve_neg", "result_type", "to", "_to_copy",
              "type_as", "contiguous", "clone", "repeat", "numpy_T", "matrix_H"}
# the elementwise, normalization and cast kernels a fused kernel absorbs, as they appear in this trace
FUSIBLE = {"add", "add_", "sub", "mul", "mul_", "div", "div_", "pow", "sum", "mean", "rsqrt", "sqrt", "neg", "silu",
           "silu_backward", "cat", "stack", "copy_", "lerp_", "addcmul_", "addcdiv_", "_log_softmax",
           "_log_softmax_backward_data"}
INITS = {"fill_", "zero_"}
REDUCE = {"sum", "mean"}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def traffic(event):
    """(input element counts, output elements, output bytes, bytes moved) of one call, or None unrecorded."""
    args = event.get("args", {})
    dims, types = args.get("Input Dims"), args.get("Input type") or []
    name = event["name"]
    base = name.split("::")[-1]
    if dims is None:
        return None
    if "::" not in name or name.startswith("torch::autograd") or base in NO_TRAFFIC:
        return (), 0, 0, 0
    if base in ("cat", "stack"):
        listed = [s for d in dims if d and isinstance(d[0], list) for s in d]
        n = sum(numel(s) for s in listed)
        size = 4 if not any(t in ELEM_BYTES for t in types) else ELEM_BYTES[next(t for t in types if t in ELEM_BYTES)]
        return tuple(numel(s) for s in listed), n, n * size, 2 * n * size
    ts = [(numel(d), ELEM_BYTES[t]) for d, t in zip(dims, types, strict=True)
          if t in ELEM_BYTES and isinstance(d, list) and d and not isinstance(d[0], list)]
    if not ts:
        return None
    counts = tuple(n for n, _ in ts)
    if base == "copy_":
        return counts[1:2], ts[0][0], ts[0][0] * ts[0][1], ts[1][0] * ts[1][1] + ts[0][0] * ts[0][1]
    read = sum(n * s for n, s in ts)
    if base.endswith("_"):
        return counts, ts[0][0], ts[0][0] * ts[0][1], read + ts[0][0] * ts[0][1]
    if base in REDUCE:
        if len(ts) > 1 and ts[-1][0] < ts[0][0]:  # the out= tensor
            read -= ts[-1][0] * ts[-1][1]
            return counts[:-1], ts[-1][0], ts[-1][0] * ts[-1][1], read + ts[-1][0] * ts[-1][1]
        first = [d for d, t in zip(dims, types, strict=True) if t in ELEM_BYTES][0]
        out = ts[0][0] // first[-1]
        return counts, out, out * ts[0][1], read + out * ts[0][1]
    big = max(ts, key=lambda x: x[0] * x[1])
    return counts, big[0], big[0] * big[1], read + big[0] * big[1]


def own_kernels(events):
    """The calls on one thread that do memory traffic of their own: they move more than everything they call."""
    events = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
    inner = [0.0] * len(events)
    for i, e in enumerate(events):  # every op contained in e, by time
        end = e["ts"] + e["dur"]
        j = i + 1
        while j < len(events) and events[j]["ts"] < end:
            t = traffic(events[j])
            inner[i] += t[3] if t else 0
            j += 1
    out = []
    for i, e in enumerate(events):
        t = traffic(e)
        if t and t[3] > 0 and t[3] > inner[i]:
            out.append((e, t))
    return out


def chains_from_raw(path: Path) -> dict[tuple, list]:
    """{op names in order: [calls per step, saved bytes per step]} counted from the raw events."""
    doc = json.loads(path.read_text())
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#")]
    threads = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and not e["name"].startswith("ProfilerStep#"):
            threads[(e["pid"], e["tid"])].append(e)
    found = defaultdict(lambda: [0.0, 0.0])

    def close(chain):
        if len(chain) >= 2 and any(lo <= chain[0][0]["ts"] < hi for lo, hi in steps):
            row = found[tuple(e["name"] for e, _ in chain)]
            row[0] += 1 / len(steps)
            row[1] += sum(2 * t[2] for _, t in chain[:-1]) / len(steps)

    for thread in threads.values():
        chain = []
        for e, t in own_kernels(thread):
            base = e["name"].split("::")[-1]
            if base in INITS:
                continue
            fusible = e["name"].startswith("aten::") and base in FUSIBLE
            if fusible and chain and chain[-1][1][1] in t[0]:
                chain.append((e, t))
                continue
            close(chain)
            chain = [(e, t)] if fusible else []
        close(chain)
    return dict(found)


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fusion")
    m = load_model("tiny-dense")
    result = run(m, resolve_run_strategy("dp=1", m, TrainSpec(GB, SEQ)), GB, SEQ, steps=STEPS, profile_dir=str(out))
    assert len(result.traces) == 1
    return Path(result.traces[0])


def test_chains_and_saved_bytes_match_the_raw_trace(trace):
    d = diagnose([trace], fusion=True)
    assert d.roofline.ridge("fp32") > 2.0  # every elementwise op here (< 2 FLOP/B) is memory-bound
    got = {tuple(r.ops): (r.calls, r.saved_bytes) for r in d.fusion}
    want = chains_from_raw(trace)
    assert len(want) >= 5
    assert set(got) == set(want)
    for ops, (calls, saved) in want.items():
        assert got[ops][0] == pytest.approx(calls), ops
        assert got[ops][1] == pytest.approx(saved), ops
    for r in d.fusion:
        assert r.saved_s == pytest.approx(r.saved_bytes / d.roofline.bytes_per_s)
        assert r.time_s > 0
    assert [r.saved_s for r in d.fusion] == sorted((r.saved_s for r in d.fusion), reverse=True)


def test_every_forward_rmsnorm_is_one_chain(trace):
    """By construction: 4 layers x 2 norms + the final norm = 9 RMSNorms per micro-batch, 2 micro-batches a
    step. The first follows the embedding; the other 8 start with the residual add before them. Each reads x
    (mbs x seq x dim fp32) and writes x^2, its row sums, mean, mean + eps, rsqrt, x * rsqrt and the weighted
    result; all but the last are intermediates, written and read once."""
    spec = load_model("tiny-dense")
    n_micro, x = GB, 1 * SEQ * spec.hidden_size * 4
    row = 1 * SEQ * 4
    norm = ["aten::pow", "aten::sum", "aten::div_", "aten::add_", "aten::rsqrt", "aten::mul", "aten::mul"]
    rows = {tuple(r.ops): r for r in diagnose([trace], fusion=True).fusion}
    first, rest = rows[tuple(norm)], rows[tuple(["aten::add"] + norm)]
    assert first.calls == pytest.approx(n_micro)
    assert rest.calls == pytest.approx(n_micro * (2 * spec.num_layers))
    assert first.saved_bytes == pytest.approx(n_micro * 2 * (x + 4 * row + x))
    assert rest.saved_bytes == pytest.approx(n_micro * 2 * spec.num_layers * 2 * (x + x + 4 * row + x))


def test_cli_fusion_json(trace):
    p = subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", "diagnose", str(trace),
                        "--fusion", "--json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["fusion"] and set(doc["fusion"][0]) == {"ops", "calls", "time_s", "saved_bytes", "saved_s"}
    plain = subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", "diagnose", str(trace),
                            "--json"], capture_output=True, text=True, timeout=300)
    assert "fusion" not in json.loads(plain.stdout)


def test_gpu_trace_layer_norm_chains():
    """The HTA A100 trace's LayerNorm -> sigmoid -> mul (a norm then SiLU) runs between GEMMs: one chain
    whose saving is the two intermediates (the norm's and the sigmoid's outputs), read back once each."""
    if not GPU_TRACE.exists():
        pytest.skip(f"{GPU_TRACE} not present")
    d = diagnose([GPU_TRACE], fusion=True)
    rows = {tuple(r.ops): r for r in d.fusion}
    chain = rows[("aten::native_layer_norm", "aten::sigmoid", "aten::mul")]
    assert chain.calls > 1 and chain.saved_bytes > 0
    assert all(not any(n.endswith(("mm", "addmm", "bmm")) for n in r.ops) for r in d.fusion)
    assert d.roofline.accelerator.startswith("a100")


def test_cost_model_prices_fused_and_unfused_elementwise():
    """Each stack's default: Megatron fused, torchtitan and the reference trainer eager. Fusing torchtitan's
    kernels (torch.compile) prices its memory-bound term exactly as Megatron's; unfused it moves
    EAGER_ELEMENTWISE_TRAFFIC times the bytes, so it is slower but (kernel launches unchanged) under 2x."""
    import numpy as np

    from asap.cost.batch import StrategyBatch
    from asap.cost.compute import layer_compute
    from asap.spec.framework import EAGER_ELEMENTWISE_TRAFFIC, get_framework
    from asap.spec.hardware import load_cluster
    from asap.spec.strategy import Strategy
    from asap.spec.train import TrainSpec

    model, acc = load_model("llama3-8b"), load_cluster("h100-sxm", devices=8).accelerator
    S = StrategyBatch.from_strategies([Strategy(dp=8, mbs=2)])

    def memory_bound_s(framework, fused=None):
        train = TrainSpec(global_batch=64, seq_len=4096, precision="bf16", framework=framework)
        return float(np.asarray(layer_compute(model, acc, train, S, fused).memory_bound_fwd_s).reshape(-1)[0])

    assert get_framework("megatron", "nvidia").fused_elementwise
    assert not get_framework("torchtitan", "nvidia").fused_elementwise
    assert not get_framework("asap", "cpu").fused_elementwise
    assert memory_bound_s("megatron") == memory_bound_s("megatron", True) == memory_bound_s("torchtitan", True)
    eager, fused = memory_bound_s("torchtitan"), memory_bound_s("torchtitan", True)
    assert eager == memory_bound_s("megatron", False)
    assert fused < eager < EAGER_ELEMENTWISE_TRAFFIC * fused


def test_analyzer_cites_fusion_savings():
    """The Analyzer's trace view carries the fusion saving as a figure and a line of evidence."""
    if not GPU_TRACE.exists():
        pytest.skip(f"{GPU_TRACE} not present")
    from asap.agents.analyzer import from_traces

    view = from_traces([GPU_TRACE])
    rows = diagnose([GPU_TRACE], fusion=True).fusion
    assert view.figures["fusion_saved_s"] == pytest.approx(sum(r.saved_s for r in rows))
    assert any(e.startswith(f"fusion: {len(rows)} kinds of fusible chains") for e in view.evidence)
