"""What diagnose's words mean: busy kernels vs bound time, the ridge at the trace's own precision, operators
near neither roof called overhead (host), interval residues shown as 0, and the next command with the two
knowledge entries that answer the verdict."""

from __future__ import annotations

import json

import pytest

from asap.profile.devices import roofline_for
from asap.profile.diagnose import OVERHEAD_UTILIZATION, _Group, _row, _t, bottleneck_scores, bound_fractions
from conftest import SHARED, run_cli

CONTROL = SHARED / "traces" / "hta" / "trace_diff_control_control.json.gz"


def group(flops: float, nbytes: float, time_s: float, calls: float = 100.0) -> _Group:
    g = _Group()
    g.time, g.calls, g.flops, g.bytes, g.costed = time_s, calls, flops, nbytes, True
    g.precisions["bf16"] = time_s * 1e6
    return g


def test_an_op_near_neither_roof_is_overhead_and_counts_as_host():
    a100 = roofline_for("a100-80gb")
    # 1 GFLOP and 1 MB (1000 FLOP/B, above the ridge) in 100 calls of 10 us: 1 TFLOP/s (0.3% of 312) and 1 GB/s:
    # neither roof binds
    slow = _row("aten::mm", group(1e9, 1e6, 1e-3), 1e-3, a100)
    assert slow.bound == "compute" and slow.overhead_bound
    assert slow.flop_utilization < OVERHEAD_UTILIZATION and slow.bandwidth_utilization < OVERHEAD_UTILIZATION
    # the same op 50x faster is compute-bound for real (16% of peak)
    fast = _row("aten::mm", group(1e9, 1e6, 2e-5), 2e-5, a100)
    assert fast.bound == "compute" and not fast.overhead_bound
    # as slow, but in one 1 ms call: a slow (or contended) kernel, not launch overhead
    long_call = _row("aten::mm", group(1e9, 1e6, 1e-3, calls=1.0), 1e-3, a100)
    assert not long_call.overhead_bound
    comp, mem, over = bound_fractions([slow])
    assert (comp, mem, over) == (0.0, 0.0, 1.0)
    fig = {"compute_s": 1e-3, "exposed_communication_s": 0.0, "exposed_p2p_s": 0.0, "idle_s": 0.0}
    scores = bottleneck_scores(fig, comp, mem, 0.0, over)
    assert max(scores, key=scores.get) == "host" and scores["host"] == pytest.approx(1e-3)


def test_residues_of_interval_sums_read_as_zero():
    assert _t(1.7e-18) == "0 s"
    assert _t(0.0123) == "12.3 ms"


def test_ridge_at_the_traces_own_precision_and_labelled_rows():
    proc = run_cli("diagnose", CONTROL)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "ridge 100 FLOP/B at fp32, the trace's dominant precision" in out  # A100 fp32 = bf16 / 2
    assert "compute kernels busy" in out and "of which overlapped with compute" in out
    assert "-bound" in out.splitlines()[0]


def test_next_steps_name_propose_and_no_llm_entries_for_a_recommendation_trace():
    job = ["-m", "llama3-8b", "-c", "dgx-a100-1node", "-b", "32", "-s", "2048", "-S", "dp=8"]
    out = json.loads(run_cli("diagnose", CONTROL, *job, "--json").stdout)
    nxt = out["next_steps"]
    assert nxt["command"] == f"asap propose {CONTROL} -m llama3-8b -c dgx-a100-1node -b 32 -s 2048 -S dp=8"
    assert json.loads(run_cli("diagnose", CONTROL, "--json").stdout)["next_steps"]["command"] is None  # no job
    # the trace is a recommendation model (FBGEMM embeddings): the LLM knowledge base has nothing for it
    assert out["workload"]["kind"] == "recommendation" and nxt["knowledge"] == []
    human = run_cli("diagnose", CONTROL, *job).stdout
    assert human.count("try (") == 0 and "no LLM parallelism advice" in human and "next: asap propose" in human


def test_idle_while_shared_cores_run_other_devices_is_contention_not_host():
    """Two XLA:CPU devices on one host's cores, one 10 ms step: device 0 computes 0-6 ms, device 1 computes
    4-10 ms. Device 0's idle 6-10 ms is spent while device 1 holds the cores (contended); device 1's 0-4 ms the
    same. None of it is the host program's."""
    import numpy as np

    from asap.profile.diagnose import contended_s, rank_figures
    from asap.profile.trace import Timeline
    from asap.profile.windows import Intervals

    def tl(rank, start_us, end_us, shared):
        return Timeline(label=f"device {rank}", source="x", rank=rank, framework="jax", device_kind="cpu",
                        device_name="/host:CPU", device_memory_bytes=None, windows_us=np.array([[0.0, 10_000.0]]),
                        window_names=["train#0"], windows_source="StepTraceAnnotation",
                        compute=Intervals.union_of([start_us], [end_us]), comm=Intervals.empty(),
                        p2p=Intervals.empty(), ops=[], shared_host=shared)

    pair = [tl(0, 0.0, 6000.0, "host"), tl(1, 4000.0, 10_000.0, "host")]
    assert contended_s(pair[0], pair)[0] == pytest.approx(4e-3)
    assert rank_figures(pair[1], pair).contended_s == pytest.approx(4e-3)
    own = [tl(0, 0.0, 6000.0, None), tl(1, 4000.0, 10_000.0, None)]  # devices with cores of their own
    assert contended_s(own[0], own)[0] == 0.0
    fig = {"compute_s": 6e-3, "exposed_communication_s": 0.0, "exposed_p2p_s": 0.0, "idle_s": 4e-3,
           "contended_s": 4e-3}
    scores = bottleneck_scores(fig, 1.0, 0.0, 0.0)
    assert scores["host"] == pytest.approx(0.0) and scores["compute"] == pytest.approx(10e-3)
