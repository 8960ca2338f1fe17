"""``asap diagnose --compare``: its argument forms and one-line refusals, on the trace_diff pair of
../shared/traces/hta (the figures themselves: tests/profile/test_diagnose_compare.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from asap.cli import app, register_commands
from asap.profile.trace_diff import TERMS

HTA = Path(__file__).resolve().parents[3] / "shared" / "traces" / "hta"
BEFORE, AFTER = HTA / "trace_diff_control_control.json.gz", HTA / "trace_diff_test_test.json.gz"


def _pair() -> tuple[Path, Path]:
    if not (BEFORE.exists() and AFTER.exists()):
        pytest.skip("the trace_diff pair is not in ../shared/traces/hta")
    return BEFORE, AFTER


def _invoke(*args):
    register_commands()
    result = CliRunner().invoke(app, ["diagnose", *map(str, args)])
    return result.exit_code, result.stdout


@pytest.mark.parametrize("order", ["flag_first", "flag_after_before"])
def test_cli_parses_before_dash_dash_after(order):
    before, after = _pair()
    args = (["--compare", before, "--", after, "--json"] if order == "flag_first"
            else [before, "--compare", "--", after, "--json"])
    code, out = _invoke(*args)
    assert code == 0, out
    doc = json.loads(out)
    assert set(doc) >= {"before", "after", "deltas_s", "ops_moved"}
    assert doc["before"]["traces"] == [str(before)] and doc["after"]["traces"] == [str(after)]
    assert set(doc["deltas_s"]) == set(TERMS)


def test_cli_human_output_and_refusals():
    before, after = _pair()
    cli = [sys.executable, "-c", "from asap.cli import main; main()", "diagnose"]
    p = subprocess.run([*cli, str(before), "--compare", "--", str(after)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert "before -> after" in p.stdout and "after is slower" in p.stdout
    for args, word in (([str(before), "--compare"], "--"), ([str(before), "--", str(after)], "--compare"),
                       (["--compare", "--", str(after)], "before"), ([str(before), "--compare", "--"], "after")):
        p = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=300)
        assert p.returncode != 0 and "Traceback" not in p.stderr, args
        assert len(p.stderr.strip().splitlines()) == 1 and word in p.stderr, (args, p.stderr)
