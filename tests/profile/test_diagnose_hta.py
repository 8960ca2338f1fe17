"""`asap diagnose` on real GPU traces (HolisticTraceAnalysis test data in ../shared/traces/hta), checked
against an independent count made here from the raw events: a plain sort-and-merge of kernel intervals per
ProfilerStep window, written without numpy and without asap's code."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from asap.profile import diagnose

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces" / "hta"
GPU_TRACES = ["nccl_parser_config_nccl_data.json.gz", "trace_diff_control_control.json.gz",
              "trace_diff_test_test.json.gz", "trace_filter_sampled_rank-0.json.gz",
              "trace_filter_sampled_rank-1.json.gz", "amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _trace(name: str) -> Path:
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


def _merge(intervals):
    """Sorted, merged copy of [(start, end)] intervals."""
    merged = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1][1] = e
        else:
            merged.append([s, e])
    return merged


def _covered(merged, lo, hi):
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in merged)


def independent_count(path: Path) -> dict:
    """Per ProfilerStep window of the busiest device: step, compute, communication, exposed, idle (us)."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    windows = {e["name"]: (float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
               if e.get("cat") in ("user_annotation", "cpu_op") and e["name"].startswith("ProfilerStep#")}
    kernels = [e for e in events if e.get("cat") in DEVICE_CATS]
    by_device = {}
    for k in kernels:
        by_device[k["pid"]] = by_device.get(k["pid"], 0.0) + float(k["dur"])
    device = max(by_device, key=by_device.get)
    comm, comp = [], []
    for k in kernels:
        if k["pid"] != device:
            continue
        span = (float(k["ts"]), float(k["ts"]) + float(k["dur"]))
        (comm if "nccl" in k["name"].lower() or "rccl" in k["name"].lower() else comp).append(span)
    comm_m, comp_m, all_m = _merge(comm), _merge(comp), _merge(comm + comp)
    out = {}
    for name, (lo, hi) in windows.items():
        busy = _covered(all_m, lo, hi)
        compute = _covered(comp_m, lo, hi)
        out[name] = {"step": hi - lo, "compute": compute, "comm": _covered(comm_m, lo, hi),
                     "exposed": busy - compute, "idle": (hi - lo) - busy}
    return out


@pytest.mark.parametrize("name", GPU_TRACES)
def test_figures_match_an_independent_count(name):
    path = _trace(name)
    d = diagnose([path])
    assert len(d.ranks) == 1
    rank = d.ranks[0]
    truth = independent_count(path)
    used = [s["name"] for s in rank.steps]
    # the tool uses every ProfilerStep window but, at most, a truncated last one
    dropped = set(truth) - set(used)
    assert set(used) <= set(truth) and len(dropped) <= 1
    if dropped:
        stub = truth[dropped.pop()]["step"]
        assert stub < 0.1 * min(truth[u]["step"] for u in used)
    mean = {k: sum(truth[u][k] for u in used) / len(used) * 1e-6 for k in ("step", "compute", "comm", "exposed", "idle")}
    step = mean["step"]
    assert d.step_time_s == pytest.approx(step, rel=0.05)
    assert abs(d.communication_s - mean["comm"]) <= 0.10 * step
    assert abs(d.exposed_communication_s - mean["exposed"]) <= 0.10 * step
    assert abs(d.idle_s - mean["idle"]) <= 0.10 * step
    assert abs(d.compute_s - mean["compute"]) <= 0.10 * step
    assert 0.0 <= d.busy_fraction <= 1.0
    assert d.bottleneck in ("compute", "memory", "communication", "host", "pipeline_bubble", "imbalance")
    assert d.evidence and d.bottleneck in d.evidence[0]


def test_accelerator_is_read_from_device_properties():
    assert diagnose([_trace("nccl_parser_config_nccl_data.json.gz")]).roofline.accelerator == "a100-40gb"
    assert diagnose([_trace("trace_diff_test_test.json.gz")]).roofline.accelerator == "v100"
    assert diagnose([_trace("amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz")]).roofline.accelerator == "mi250"


def test_idle_heavy_trace_is_host_bound():
    d = diagnose([_trace("nccl_parser_config_nccl_data.json.gz")])
    assert d.idle_s > 0.5 * d.step_time_s
    assert d.bottleneck == "host"


def test_top_ops_carry_roofline_figures():
    d = diagnose([_trace("trace_filter_sampled_rank-0.json.gz")], accelerator="a100-80gb", top=15)
    assert d.roofline.accelerator == "a100-80gb"
    names = [op.name for op in d.top_ops]
    assert any("nccl" in n.lower() for n in names)
    mm = next(op for op in d.top_ops if op.name == "aten::mm")
    assert mm.flops > 0 and mm.bytes > 0 and mm.intensity == pytest.approx(mm.flops / mm.bytes)
    assert mm.bound in ("compute", "memory")
    for op in d.top_ops:
        if "nccl" in op.name.lower():
            assert op.bound == "communication"
    assert sum(op.share for op in d.top_ops) <= 1.0 + 1e-9


def test_several_ranks_through_the_cli():
    a, b = _trace("trace_filter_sampled_rank-0.json.gz"), _trace("trace_filter_sampled_rank-1.json.gz")
    proc = subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", "diagnose", str(a), str(b),
                           "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key in ("step_time_s", "compute_s", "communication_s", "exposed_communication_s", "idle_s",
                "busy_fraction", "bottleneck", "top_ops", "ranks", "stragglers", "evidence"):
        assert key in out
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    for r in out["ranks"]:
        assert r["step_time_s"] > 0 and r["n_steps"] == 2
        assert {"compute_s", "communication_s", "exposed_communication_s", "idle_s", "busy_fraction"} <= set(r)
    # the slowest rank is the one with the most own work (step less exposed communication)
    slowest = max(out["ranks"], key=lambda r: r["step_time_s"] - r["exposed_communication_s"])
    assert out["slowest_rank"]["label"] == slowest["label"]
    assert out["step_time_s"] == pytest.approx(sum(r["step_time_s"] for r in out["ranks"]) / 2)
    assert {"cv_across_steps", "cv_across_ranks", "flagged", "where"} <= set(out["jitter"])
    for op in out["top_ops"]:
        assert {"name", "time_s", "share", "flops", "bytes", "intensity", "bound"} <= set(op)
        assert op["bound"] in ("compute", "memory", "communication")


def test_stragglers_beyond_the_threshold():
    a, b = _trace("trace_filter_sampled_rank-0.json.gz"), _trace("trace_filter_sampled_rank-1.json.gz")
    loose = diagnose([a, b], straggler_threshold=0.5)
    assert loose.stragglers == []
    tight = diagnose([a, b], straggler_threshold=0.001)
    assert [s["label"] for s in tight.stragglers] == [tight.slowest_rank["label"]]
