"""``make_executor`` sits above the executors (asap.execute.factory): the base imports none of them, so base and
the executors form no import cycle; every kind is built or refused in one line."""

import ast
from pathlib import Path

import pytest

from asap import Job, TrainSpec, load_cluster, load_model
from asap.errors import AsapError
from asap.execute.factory import ExecutorKind, make_executor

EXECUTE = Path(__file__).resolve().parents[2] / "src" / "asap" / "execute"


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_base_imports_no_executor():
    assert not {m for m in _imports(EXECUTE / "base.py") if m.startswith("asap.execute")}


def test_no_executor_imports_the_factory():
    for f in EXECUTE.rglob("*.py"):
        if f.name != "factory.py":
            assert "asap.execute.factory" not in _imports(f), f


def test_kinds():
    m, c = load_model("tiny-dense"), load_cluster("local-cpu", devices=2)
    assert make_executor("sim", job=Job.resolve(m, c, TrainSpec(8, 64))).name == "sim"
    ex = make_executor("command", template="echo {tp}", framework="torchtitan",
                       job=Job.resolve(m, c, TrainSpec(8, 64, "bf16", "torchtitan")))
    assert ex.refuses(ex.parse("dp=2,zero=1")).startswith("strategy.zero: torchtitan cannot express")
    with pytest.raises(AsapError, match="executor: must be one of"):
        make_executor("slurm")
    assert {k.value for k in ExecutorKind} >= {"command", "torchtitan", "deepspeed", "maxtext"}
