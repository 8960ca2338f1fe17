"""``asap diagnose``'s next moves (``asap.cli.diagnose.next_steps``) on a trace without attention layers: none
(the knowledge base is LLM parallelism advice)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")

from asap.profile.diagnose import diagnose  # noqa: E402
from conftest import MEMORY_BOUND_CPU_JOB as JOB  # noqa: E402


def test_a_matmul_only_trace_is_no_llm_and_gets_no_llm_advice(tmp_path):
    """The trace has matmuls but no attention layers: not LLM training, so no knowledge entry is offered (a
    transformer trace gets dense entries only: tests/cli/test_workload_kind.py)."""
    from asap.cli.diagnose import next_steps

    trace = tmp_path / "membound.json"
    subprocess.run([sys.executable, "-c", JOB, str(trace)], capture_output=True, text=True, timeout=240, check=True)
    d = diagnose([trace])
    assert d.workload is not None and d.workload["kind"] == "other"
    assert next_steps(d)["knowledge"] == []
