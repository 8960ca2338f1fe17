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
from conftest import MEMORY_BOUND_CPU_JOB  # noqa: E402

JOB = MEMORY_BOUND_CPU_JOB  # the workload (tests/conftest.py, shared with tests/cli/test_cli_diagnose_next.py)


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
