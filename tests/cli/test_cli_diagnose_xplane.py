"""``asap run --backend jax --profile`` writes a perfetto trace and an XProf .xplane.pb; ``asap diagnose`` reads
either to the same step time and bottleneck."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from asap.cli import app, register_commands

register_commands()


def test_diagnose_reads_a_recorded_xplane_as_its_perfetto_export(tmp_path):
    """A real run with --profile writes both; the step time and the bottleneck agree."""
    pytest.importorskip("jax")
    runner = CliRunner()
    prof = tmp_path / "prof"
    res = runner.invoke(app, ["run", "--backend", "jax", "-m", "tiny-dense", "-S", "dp=4", "-b", "8", "-s", "32",
                              "--steps", "3", "--profile", str(prof), "--json"])
    assert res.exit_code == 0, res.output
    (perfetto,) = [Path(t) for t in json.loads(res.stdout)["traces"]]
    (xplane,) = list(perfetto.parent.glob("*.xplane.pb"))
    a = json.loads(runner.invoke(app, ["diagnose", str(perfetto), "--json"]).stdout)
    b = json.loads(runner.invoke(app, ["diagnose", str(xplane), "--json"]).stdout)
    assert b["step_time_s"] == pytest.approx(a["step_time_s"], rel=1e-6)
    assert b["bottleneck"] == a["bottleneck"]
