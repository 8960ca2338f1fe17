"""docs/agents.md shows the real output of `asap propose` for one scenario of each bottleneck class: every block
marked ``<!-- output of: asap ... -->`` is followed by a ```` ```text ```` block that must equal what that
command prints (run from the repository root). Regenerate the blocks with

    PYTHONPATH=src python tests/agents/test_agents_doc_output.py --write
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]  # tests/<room>/this file
DOC = REPO / "docs" / "agents.md"
MARK = re.compile(r"^<!-- output of: (asap .+?) -->\n```text\n(.*?)```\n", re.M | re.S)

pytestmark = pytest.mark.slow


def shown() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in MARK.finditer(DOC.read_text(encoding="utf-8"))]


def real_output(command: str) -> str:
    args = shlex.split(command)[1:]
    p = subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", *args], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{command}: {p.stderr[-1000:]}"
    return p.stdout


def test_every_class_has_a_shown_scenario():
    classes = set()
    for _, text in shown():
        classes.add(text.split(" ", 1)[0])
    assert {"tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "pipeline_bubble", "memory_capacity", "recompute", "host",
            "expert_imbalance", "sequence_imbalance", "stage_imbalance", "compute", "memory_bandwidth"} <= classes


@pytest.mark.parametrize("command,text", shown(), ids=[c.split(" -S ")[0][:60] for c, _ in shown()])
def test_shown_output_is_the_real_output(command, text):
    assert real_output(command) == text


def write() -> None:
    doc = DOC.read_text(encoding="utf-8")
    out = MARK.sub(lambda m: f"<!-- output of: {m.group(1)} -->\n```text\n{real_output(m.group(1))}```\n", doc)
    DOC.write_text(out, encoding="utf-8")


if __name__ == "__main__" and "--write" in sys.argv:
    write()
