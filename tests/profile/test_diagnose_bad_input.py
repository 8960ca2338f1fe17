"""Bad input to `asap diagnose`, through the CLI: one clear line on stderr, a non-zero exit, no traceback --
and for a trace without step markers, the stated fallback to one whole-trace window."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from asap.cli import main; main()", "diagnose"]

NO_STEPS_JOB = r'''
import sys, torch
from torch.profiler import ProfilerActivity, profile
a = torch.randn(256, 256)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:  # no schedule, no prof.step()
    for _ in range(3):
        torch.relu(a @ a)
prof.export_chrome_trace(sys.argv[1])
'''


@pytest.fixture(scope="module")
def real_trace(tmp_path_factory) -> Path:
    """A real CPU trace from a short torch.profiler run that never calls step(): no ProfilerStep#N."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("nosteps")
    (out / "job.py").write_text(NO_STEPS_JOB)
    subprocess.run([sys.executable, str(out / "job.py"), str(out / "trace.json")], check=True, timeout=120,
                   capture_output=True)
    return out / "trace.json"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def _one_clean_line(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("error:")
    for w in words:
        assert w in lines[0]
    assert proc.stdout == ""


def test_truncated_gzip(tmp_path, real_trace):
    packed = gzip.compress(real_trace.read_bytes())
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(packed[: len(packed) // 2])
    proc = _run(str(bad), "--json")
    _one_clean_line(proc, str(bad), "truncated")
    assert proc.returncode == 2


def test_not_json(tmp_path):
    bad = tmp_path / "notes.json"
    bad.write_text("this is not JSON at all\n")
    _one_clean_line(_run(str(bad), "--json"), str(bad), "not valid JSON")


def test_json_that_is_not_a_trace(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model": "tiny-dense", "steps": 3}))
    _one_clean_line(_run(str(bad)), str(bad), "not a profiler trace")


def test_chrome_trace_of_neither_kind(tmp_path):
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "frame", "ts": 0, "dur": 5, "pid": 1, "tid": 1}]}))
    _one_clean_line(_run(str(bad)), str(bad), "Kineto")


def test_missing_file(tmp_path):
    _one_clean_line(_run(str(tmp_path / "nope.json")), "no such file")


def test_bad_option_value(real_trace):
    _one_clean_line(_run(str(real_trace), "--top", "0"), "top")
    _one_clean_line(_run(str(real_trace), "--accelerator", "abacus"), "accelerator", "abacus")


def test_trace_without_step_markers_falls_back_to_the_whole_trace(real_trace):
    proc = _run(str(real_trace), "--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "no ProfilerStep#N markers" in proc.stderr and "whole trace" in proc.stderr
    out = json.loads(proc.stdout)
    assert out["steps_source"] == "whole_trace"
    assert any("whole trace" in n for n in out["notes"])
    assert out["ranks"][0]["n_steps"] == 1 and out["step_time_s"] > 0
    assert "aten::mm" in [op["name"] for op in out["top_ops"]]
