"""The compact strategy notation: ``format_compact`` and ``parse_strategy`` are inverse over the strategies
the planner returns; the human tables of plan, propose, memory and tune at COLUMNS=100 cut no strategy off,
and each strategy cell, read back, is the strategy the command's --json gives for that row."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import tempfile
import termios

import pytest

from asap.errors import AsapError
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.strategy import (complete_strategy, format_compact, format_compact_keys, parse_strategy)
from asap.spec.train import TrainSpec
from asap.spec.job import Job
from conftest import REPO

COLUMNS = 100


def asap(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return proc


def on_terminal(*args: str, columns: int = COLUMNS) -> str:
    """What a user sees at a terminal ``columns`` wide: the command's stdout on a pseudo-terminal of that size
    (Rich lays its tables out for the terminal), without colour."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "dumb", "PYTHONIOENCODING": "utf-8"}
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-c", "from asap.cli import main; main()", *args], stdout=slave,
                                stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=REPO)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # the child closed its end
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        assert proc.wait(timeout=300) == 0, err.seek(0) or err.read().decode()[-3000:]
    text = b"".join(chunks).decode("utf-8").replace("\r\n", "\n")
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def strategy_cells(text: str, title: str) -> list[str]:
    """The strategy column of the table under ``title``: each row's cell lines joined (Rich wraps a cell
    between the notation's tokens), in row order. Fails on a cell Rich cut off with an ellipsis."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith(title))
    header = next(i for i in range(start, len(lines)) if lines[i].startswith("┃"))
    body = next(i for i in range(header, len(lines)) if lines[i].startswith("┡"))
    heads = [[h.strip() for h in ln.strip("┃").split("┃")] for ln in lines[header:body]]
    col = next(row.index("strategy") for row in heads if "strategy" in row)
    cells: list[list[str]] = []
    for ln in lines[body + 1:]:
        if ln.startswith("└"):
            break
        if not ln.startswith("│"):
            continue
        parts = [p.strip() for p in ln.strip("│").split("│")]
        if parts[0]:
            cells.append([])
        if parts[col]:
            cells[-1].append(parts[col])
    joined = [" ".join(c) for c in cells]
    assert all("…" not in c and "..." not in c for c in joined), joined
    return joined


def assert_width(text: str) -> None:
    """Every table line within the width (commands and notes are printed unwrapped, to be copied whole)."""
    rows = [ln for ln in text.splitlines() if ln[:1] in "┏┃┡│└"]
    assert rows and max(len(ln) for ln in rows) <= COLUMNS


def same(printed: str, full: dict, devices: int, moe: bool = False) -> None:
    s = complete_strategy(parse_strategy(printed), devices)
    want = complete_strategy(parse_strategy({k: v for k, v in full.items() if v is not None}), devices)
    if not moe:
        assert s.to_dict() | {"etp": 1} == want.to_dict() | {"etp": 1}, (printed, full)
    else:
        assert s == want, (printed, full)


@pytest.mark.parametrize("model, cluster, batch, seq", [
    ("llama3-70b", "dgx-h100-8node", 256, 8192), ("mixtral-8x7b", "dgx-h100-8node", 512, 4096),
    ("deepseek-v3", "gb200-nvl72", 1024, 4096), ("llama3-8b", "tpu-v5p", 256, 8192)])
def test_compact_round_trips_over_the_planners_strategies(model, cluster, batch, seq):
    from asap.search.planner import plan

    m, c, t = load_model(model), load_cluster(cluster), TrainSpec(batch, seq)
    job = Job.resolve(m, c, t)
    fw = job.framework
    result = plan(job, top=10, distinct=False)
    for e in result.candidates + result.pareto:
        text = format_compact(e.strategy, c.num_devices, m.moe is not None, fw)
        back = complete_strategy(parse_strategy(text), c.num_devices, framework=fw)
        if m.moe is None:
            back = back.__class__(**{**back.to_dict(), "etp": 1, "layer_split": back.layer_split})
        assert back == e.strategy, (text, str(e.strategy))
        assert "=" not in text and "," not in text


def test_compact_tokens_and_the_old_form_mix():
    assert parse_strategy("tp8 pp16 vpp8 cp2 ep64 zero1 rc:sel dedup") == parse_strategy(
        "tp=8,pp=16,vpp=8,cp=2,ep=64,zero=1,recompute=selective,dispatcher=dedup")
    assert parse_strategy("tp2, pp=2 split:3/1x2/0 zb a2a1 rc:layernorm+moe_act") == {
        "tp": 2, "pp": 2, "layer_split": (3, 1, 1, 0), "schedule": "zb", "a2a_overlap": 1,
        "recompute": "layernorm+moe_act"}
    assert format_compact_keys({"tp": 8, "recompute": "selective", "layer_split": (5, 4, 4, 4, 3)}) == \
        "tp8 rc:sel split:5/4x3/3"
    assert parse_strategy("defaults") == {}


@pytest.mark.parametrize("text, field", [("tpx", "strategy"), ("rc:sometimes", "strategy.recompute"),
                                         ("tp8 tp=2", "strategy.tp"), ("split:4x", "strategy.layer_split"),
                                         ("zero7", "strategy.zero")])
def test_bad_compact_tokens_name_the_field(text, field):
    with pytest.raises(AsapError) as e:
        parse_strategy(text)
    assert e.value.field == field


def test_plan_table_at_100_columns():
    # no stage ILP: its 0.2 s HiGHS limit could end on different splits in the two runs compared here
    job = ["-m", "deepseek-v3", "-c", "gb200-nvl72", "-b", "1024", "-s", "4096", "--top", "5", "--split-candidates", "0"]
    text = on_terminal("plan", *job, "--tokens", "15T")
    assert_width(text)
    cands = json.loads(asap("plan", *job, "--json").stdout)["candidates"]
    cells = strategy_cells(text, "fastest configurations")
    assert len(cells) == len(cands)
    for cell, cand in zip(cells, cands, strict=True):
        assert cell == cand["strategy_compact"]
        same(cell, cand["strategy"], 72, moe=True)
    assert strategy_cells(text, "Pareto front")


def test_propose_table_at_100_columns():
    job = ["-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "256", "-s", "8192", "-S", "tp=4,pp=4,vpp=5,cp=2"]
    text = on_terminal("propose", *job)
    assert_width(text)
    props = json.loads(asap("propose", *job, "--json").stdout)["proposals"]
    cells = strategy_cells(text, "three proposals")
    assert len(cells) == 3
    for cell, p in zip(cells, props, strict=True):
        same(cell, p["strategy"], 64)


def test_tune_and_memory_tables_at_100_columns(tmp_path):
    db = str(tmp_path / "m.sqlite")
    job = ["-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "256", "-s", "8192", "--executor", "sim",
           "--sim-machine", "docs/examples/h100-slow-fabric.yaml", "--budget", "3", "--memory", db]
    text = on_terminal("tune", *job)
    assert_width(text)
    cells = strategy_cells(text, "tune llama3-70b")
    trials = json.loads(asap("memory", "--memory", db, "--json").stdout)["trials"]
    assert len(cells) == len(trials) >= 2
    for cell, t in zip(cells, trials, strict=True):
        same(cell, t["strategy"], 64)
    mem = on_terminal("memory", "--memory", db)
    assert_width(mem)
    for cell, t in zip(strategy_cells(mem, "trials"), trials, strict=True):
        same(cell, t["strategy"], 64)
