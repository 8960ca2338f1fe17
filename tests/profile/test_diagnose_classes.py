"""A memory-bound CPU workload recorded here with the PyTorch profiler: skinny GEMMs of about 3 FLOP/B (under
any CPU's ridge: this host's measured roofline puts it near 8) with element-wise work around them. By
construction every operator's intensity is under the ridge, so the verdict is memory-bound (memory_bandwidth),
never compute-bound."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")

from asap.profile.diagnose import diagnose  # noqa: E402

JOB = r'''
import sys, torch
from torch.profiler import ProfilerActivity, profile, schedule
torch.set_num_threads(1)
a, b, bias = torch.randn(2048, 6), torch.randn(6, 2048), torch.randn(2048, 2048)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=0, warmup=1, active=2),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(3):
        for _ in range(3):
            y = torch.relu(a @ b + bias) * 0.5
        prof.step()
'''


def test_small_gemms_under_the_ridge_are_memory_bound(tmp_path):
    trace = tmp_path / "membound.json"
    p = subprocess.run([sys.executable, "-c", JOB, str(trace)], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    d = diagnose([trace])
    mm = next(o for o in d.top_ops if o.name == "aten::mm")
    ridge = d.roofline.ridge(mm.precision)
    assert mm.intensity == pytest.approx(2 * 2048 * 6 * 2048 / (4 * (2 * 2048 * 6 + 2048 * 2048)), rel=1e-6)
    assert mm.intensity < ridge and mm.bound == "memory"
    assert all(o.bound == "memory" for o in d.top_ops if o.intensity is not None)
    assert d.bottleneck == "memory" and d.bottleneck_class == "memory_bandwidth"
    assert d.classes[0].saving_s > 0 and "memory-bound operators" in d.classes[0].figure


def test_a_matmul_only_trace_is_no_llm_and_gets_no_llm_advice(tmp_path):
    """The trace has matmuls but no attention layers: not LLM training, so no knowledge entry is offered (the
    transformer case: tests/profile/test_workload_kind.py)."""
    from asap.cli.diagnose import next_steps

    trace = tmp_path / "membound.json"
    subprocess.run([sys.executable, "-c", JOB, str(trace)], capture_output=True, text=True, timeout=240, check=True)
    d = diagnose([trace])
    assert d.workload is not None and d.workload["kind"] == "other"
    assert next_steps(d)["knowledge"] == []
