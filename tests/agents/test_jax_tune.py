"""``asap tune --executor jax``: the closed loop measuring its trials on JAX meshes of 8 virtual CPU devices."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from asap.memory import Memory
from asap.cli import register_commands, app

pytestmark = pytest.mark.jax
pytest.importorskip("jax")
register_commands()


def test_tune_with_the_jax_executor_ends_no_slower_than_its_first_trial(tmp_path, monkeypatch):
    monkeypatch.setenv("ASAP_DATA_DIR", str(tmp_path))  # no calibration of this machine: the catalog's figures
    db = tmp_path / "memory.sqlite"
    res = CliRunner().invoke(app, ["tune", "-m", "tiny-dense", "--cluster", "local-cpu", "--devices", "8", "-b", "8",
                                   "-s", "32", "--executor", "jax", "--budget", "2", "--steps", "2",
                                   "--memory", str(db), "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    first = r["trials"][0]
    assert first["status"] == "ok", first
    assert r["best"]["measured_step_time_s"] <= first["measured_step_time_s"]
    with Memory.open(db) as mem:
        stored = mem.trials()
    ran = [x for x in r["trials"] if x["status"] != "skipped"]
    assert ran and len(stored) == len(ran)  # every trial it ran, ok or failed, is in Memory
    assert [x.status for x in stored] == [x["status"] for x in ran]
    assert {x.executor for x in stored} == {"jax"}
