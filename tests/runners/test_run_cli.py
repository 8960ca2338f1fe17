"""`asap run` through the CLI: a profiled real run, and strategies refused before launching."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CLI = [sys.executable, "-c", "from asap.cli import main; main()"]


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("strategy,field", [
    ("tp=3", "strategy.tp: tp=3 does not divide num_attention_heads=4"),
    ("tp=2,pp=8", "strategy.pp"),
    ("cp=2", "strategy.cp"),
    ("bogus=1", "strategy.bogus: unknown key"),
])
def test_impossible_strategy_fails_before_launching(strategy, field):
    p = _cli("run", "--model", "tiny-dense", "--strategy", strategy, "--global-batch", "8", "--seq-len", "32",
             "--steps", "2", "--device", "cpu", "--json", timeout=120)
    assert p.returncode != 0
    assert p.stdout == ""
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_bad_precision_and_model_are_one_line_errors():
    p = _cli("run", "--model", "tiny-dense", "--global-batch", "8", "--seq-len", "32", "--precision", "fp8", "--json")
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "precision" in p.stderr
    p = _cli("run", "--model", "no-such-model", "--global-batch", "8", "--seq-len", "32", "--json")
    assert p.returncode == 2 and "model" in p.stderr and "Traceback" not in p.stderr


def test_profiled_run_writes_a_trace_per_rank(tmp_path):
    pytest.importorskip("torch")
    prof = tmp_path / "prof"
    p = _cli("run", "--model", "tiny-dense", "--strategy", "pp=2,dp=2", "--global-batch", "8", "--seq-len", "32",
             "--steps", "3", "--precision", "fp32", "--device", "cpu", "--profile", str(prof), "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)  # exactly one JSON document
    for key in ("strategy", "step_time_s", "tokens_per_s", "losses", "peak_memory_gb", "traces"):
        assert key in out
    assert out["strategy"]["pp"] == 2 and out["strategy"]["dp"] == 2 and out["nproc"] == 4
    assert len(out["losses"]) == 3 and out["step_time_s"] > 0 and out["peak_memory_gb"] > 0
    assert out["tokens_per_s"] == pytest.approx(8 * 32 / out["step_time_s"])
    assert abs(out["losses"][0] - 6.2653) < 1e-3  # the same first-step loss as every other layout
    traces = out["traces"]
    assert sorted(traces) == sorted(str(prof / f"trace_rank{r}.json") for r in range(4))
    for t in traces:
        events = json.loads(open(t).read())["traceEvents"]
        steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
        assert steps == {"ProfilerStep#2"}  # only the last step is profiled, and it is never timed (asap.measure)
        assert any("Input Dims" in e.get("args", {}) for e in events)  # record_shapes=True

    d = _cli("diagnose", *traces, "--json", timeout=300)
    assert d.returncode == 0, d.stderr[-2000:]
    diag = json.loads(d.stdout)
    assert diag["step_time_s"] > 0 and len(diag["ranks"]) == 4
