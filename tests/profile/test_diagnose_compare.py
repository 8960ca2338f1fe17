"""`asap diagnose --compare BEFORE... -- AFTER...` on the shared HolisticTraceAnalysis trace-diff pair (real A100
/ V100 traces of one job before and after a change), checked against an independent interval count made here
from the raw events, on two real runs of the reference trainer whose work differs by construction, and through
the CLI in both orders that docs/design.md allows."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from asap.profile.trace_diff import PARTS, TERMS, compare_traces

HTA = Path(__file__).resolve().parents[3] / "shared" / "traces" / "hta"
BEFORE, AFTER = HTA / "trace_diff_control_control.json.gz", HTA / "trace_diff_test_test.json.gz"


def _pair() -> tuple[Path, Path]:
    if not (BEFORE.exists() and AFTER.exists()):
        pytest.skip("the trace_diff pair is not in ../shared/traces/hta")
    return BEFORE, AFTER


def _merged(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _inside(merged, lo, hi):
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in merged)


def raw_figures(path: Path) -> dict:
    """Mean over the ProfilerStep windows (but a stub last one) of the busiest device's step, compute,
    exposed communication and idle, in seconds, from sorting and merging its kernel intervals."""
    events = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    windows = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#"))
    if len(windows) > 1 and windows[-1][1] - windows[-1][0] < 0.1 * min(e - s for s, e in windows[:-1]):
        windows = windows[:-1]
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    load = {}
    for k in kernels:
        load[k["pid"]] = load.get(k["pid"], 0) + k["dur"]
    mine = [k for k in kernels if k["pid"] == max(load, key=load.get)]
    comm = _merged([(k["ts"], k["ts"] + k["dur"]) for k in mine if "nccl" in k["name"].lower()])
    comp = _merged([(k["ts"], k["ts"] + k["dur"]) for k in mine if "nccl" not in k["name"].lower()])
    both = _merged(comm + comp)
    sums = {"step_time_s": 0.0, "compute_s": 0.0, "exposed_communication_s": 0.0, "idle_s": 0.0}
    for lo, hi in windows:
        busy, compute = _inside(both, lo, hi), _inside(comp, lo, hi)
        for k, v in (("step_time_s", hi - lo), ("compute_s", compute), ("exposed_communication_s", busy - compute),
                     ("idle_s", hi - lo - busy)):
            sums[k] += v * 1e-6 / len(windows)
    return sums


def test_deltas_match_an_independent_count():
    before, after = _pair()
    d = compare_traces([before], [after])
    a, b = raw_figures(before), raw_figures(after)
    step = max(a["step_time_s"], b["step_time_s"])
    for k in ("step_time_s", "compute_s", "exposed_communication_s", "idle_s"):
        assert abs(d["deltas_s"][k] - (b[k] - a[k])) <= 0.10 * step, k
    for k in TERMS:
        assert d["deltas_s"][k] == pytest.approx(d["after"][k] - d["before"][k])
    # the three parts add up to the step on each side, so their changes add up to the step's change
    assert sum(d["deltas_s"][k] for k in PARTS) == pytest.approx(d["deltas_s"]["step_time_s"], rel=1e-6)
    assert d["deltas_s"]["step_time_s"] > 0 and d["verdict"].startswith("after is slower")
    moved = [abs(r["delta_s"]) for r in d["ops_moved"]]
    assert moved == sorted(moved, reverse=True) and len(moved) == 10
    assert {r["status"] for r in d["ops_moved"]} <= {"added", "removed", "changed"}


def test_a_set_against_itself_moves_nothing_and_swapping_negates():
    before, after = _pair()
    same = compare_traces([before], [before], top=5)
    assert all(v == 0 for v in same["deltas_s"].values())
    assert all(r["delta_s"] == 0 and r["status"] == "changed" for r in same["ops_moved"])
    assert same["verdict"].startswith("after is unchanged")
    there, back = compare_traces([before], [after]), compare_traces([after], [before])
    for k in TERMS:
        assert back["deltas_s"][k] == pytest.approx(-there["deltas_s"][k])


def test_real_runs_four_times_the_micro_batches(tmp_path):
    """tiny-dense, dp=1, mbs=1: global batch 1 -> 16 is 1 -> 16 micro-batches a step, so every layer GEMM is
    called exactly sixteen times as often (counted from the traces, whatever the machine's load), and the step's
    change splits exactly into the changes of compute, exposed communication and idle (step = compute + exposed
    communication + idle on each side). Which way the times move is the machine's business: a descheduled
    process can stretch one op by a second on a loaded host, so no sign of a time difference is asserted."""
    pytest.importorskip("torch")
    from asap.spec.loader import load_model
    from asap.runners.torch.launch import resolve_run_strategy, run
    from asap.spec.train import TrainSpec

    traces = {}
    for gb in (1, 16):
        out = tmp_path / f"gb{gb}"
        m = load_model("tiny-dense")
        traces[gb] = run(m, resolve_run_strategy("dp=1", m, TrainSpec(gb, 16)), gb, 16, steps=2, profile_dir=str(out)).traces
    d = compare_traces(traces[1], traces[16], top=1000)
    mm = next(r for r in d["ops_moved"] if r["name"] == "aten::mm")
    assert mm["calls_after"] == pytest.approx(16 * mm["calls_before"])
    assert mm["status"] == "changed"
    deltas = d["deltas_s"]
    assert deltas["step_time_s"] == pytest.approx(deltas["compute_s"] + deltas["exposed_communication_s"]
                                                  + deltas["idle_s"], abs=1e-9)
