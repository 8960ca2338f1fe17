"""``asap diagnose``'s next moves (``asap.cli.diagnose.next_steps``) on a dense trace: entries for dense models
only."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("torch")

from asap.profile.diagnose import diagnose  # noqa: E402
from conftest import MEMORY_BOUND_CPU_JOB as JOB  # noqa: E402


def test_a_dense_trace_gets_no_moe_advice(tmp_path):
    """The trace has no all-to-all: diagnose's next moves come from entries that apply to a dense model."""
    from asap.agents.knowledge import load_knowledge
    from asap.cli.diagnose import next_steps

    trace = tmp_path / "membound.json"
    subprocess.run([sys.executable, "-c", JOB, str(trace)], capture_output=True, text=True, timeout=240, check=True)
    moves = next_steps(diagnose([trace]))["knowledge"]
    kinds = {e.id: e.model_kinds for e in load_knowledge()}
    assert moves and all(kinds[m["id"]] == ["any"] or "dense" in kinds[m["id"]] for m in moves)
    assert "moe-load-imbalance" not in {m["id"] for m in moves}
