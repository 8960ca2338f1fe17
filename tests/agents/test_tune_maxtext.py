"""MaxText 0.2.5 (its own Python >= 3.12 environment) on 8 virtual CPU devices through ``asap tune --executor
maxtext``: each trial's emitted YAML sets the mesh, MaxText's own step lines give the step time, its xplane
profile is read by ``asap diagnose``. The environment: ``ASAP_MAXTEXT_PYTHON``, else ``.venv-maxtext`` beside the
repository's ``.venv`` (the README's test command and .ci/run make it)."""

import json
import os
import sqlite3
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]  # tests/<room>/this file


def maxtext_python() -> str:
    for p in (os.environ.get("ASAP_MAXTEXT_PYTHON"), REPO / ".venv-maxtext" / "bin" / "python",
              REPO.parent / "main" / ".venv-maxtext" / "bin" / "python"):
        if p and Path(p).is_file():
            return str(p)
    pytest.skip("no MaxText environment (.venv-maxtext: see the README's test command)")


def test_tune_maxtext_on_8_virtual_devices(cli, tmp_path):
    db = tmp_path / "memory.db"
    p = cli("tune", "-m", "tiny-dense", "-c", "local-cpu", "--devices", "8", "-b", "8", "-s", "64",
            "--executor", "maxtext", "--python", maxtext_python(), "--budget", "2", "--steps", "3",
            "--memory", db, "--profile", tmp_path / "trials", "--json", timeout=1500)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    with sqlite3.connect(db) as con:
        trials = con.execute("select status, measured_step_time_s, reason, traces from trials order by id").fetchall()
        results = [json.loads(r[0]) for r in con.execute(
            "select outputs from audit where agent='executor' and step='result' order by id")]
    assert trials[0][0] == "ok" and trials[0][1] > 0, trials
    assert "completed step: 2, seconds:" in results[0]["details"]["log_tail"]
    # the emitted YAML's mesh is the one MaxText built: its 8 devices over the strategy's axes
    s = out["trials"][0]["strategy"]
    yml = (tmp_path / "trials" / "trial1" / "maxtext.yml").read_text()
    assert f"ici_tensor_parallelism: {s['tp']}" in yml and "base_config: base.yml" in yml
    assert "Num_devices: 8" in (tmp_path / "trials" / "trial1" / "output.log").read_text()
    assert out["correction"]["trials"] == sum(t[0] == "ok" for t in trials)
    xplane = [t for t in json.loads(trials[0][3]) if t.endswith(".xplane.pb")]
    d = cli("diagnose", xplane[0], "--json")
    assert d.returncode == 0, d.stderr
    assert json.loads(d.stdout)["step_time_s"] > 0
