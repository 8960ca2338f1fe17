"""The docs' tables of what each stack offers and cannot run are the code's tables (``asap.spec.stack_docs``
renders ``spec/framework.py``'s offers and ``spec/stack_rules.py``'s rules); ``estimate`` refuses what the
chosen stack cannot run, in one line, as ``plan`` and ``emit`` do. Regenerate the docs' tables with

    PYTHONPATH=src python tests/house/test_stack_docs.py --write
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from asap.spec.framework import FRAMEWORKS
from asap.spec.stack_docs import options_table, replace_table, rule_text, shown_table
from asap.spec.stack_rules import STACK_RULES

REPO = Path(__file__).resolve().parents[2]  # tests/<room>/this file
DOCS = [REPO / "docs" / "inputs.md", REPO / "docs" / "cost_model.md"]


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_docs_option_tables_equal_the_stack_rules(doc):
    assert shown_table(doc.read_text(encoding="utf-8")) == options_table()


def test_the_table_names_every_stack_offer_and_rule():
    table = options_table()
    for name, fw in FRAMEWORKS.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        for key, values in fw.offers.items():
            assert f"`{key}` {', '.join(str(v) for v in values)}" in row
        for rule in STACK_RULES.get(name, ()):
            assert rule_text(rule) in row
    megatron = next(line for line in table.splitlines() if line.startswith("| `megatron` |"))
    assert "`schedule` 1f1b, interleaved;" in megatron  # Megatron-Core core_r0.14.0 has no zero-bubble schedule
    torchtitan = next(line for line in table.splitlines() if line.startswith("| `torchtitan` |"))
    assert "`dispatcher` alltoall, dedup" in torchtitan  # DeepEP: expert_parallel_comm_backend = "deepep"


DSV3 = ["-m", "deepseek-v3", "-c", "h800", "--nodes", "256", "-b", "15360", "-s", "4096"]


def test_estimate_refuses_what_the_stack_cannot_run(cli):
    r = cli("estimate", *DSV3, "-S", "pp16 ep64 dedup a2a1")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "megatron cannot express a2a_overlap=1 with pp>1 and vpp=1" in lines[0]
    assert "Traceback" not in r.stderr
    ok = cli("estimate", *DSV3, "-S", "pp16 ep64 dedup a2a1", "--any-stack", "--json")
    assert ok.returncode == 0, ok.stderr


def write() -> None:
    for doc in DOCS:
        doc.write_text(replace_table(doc.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__" and "--write" in sys.argv:
    write()
