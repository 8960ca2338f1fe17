"""The loop explains every trial's gain or loss (the trace diff when both runs were profiled, else the cost
model's comparison), starts where the planner would, and spends no trial on what its executor cannot run."""

from __future__ import annotations

import json
import re

from asap.execute.torch_exec import TorchExecutor
from asap.spec.loader import load_model
from asap.spec.strategy import resolve_strategy
from asap.spec.train import TrainSpec
from conftest import run_cli


def tune(tmp_path, *args):
    proc = run_cli("tune", *args, "--memory", tmp_path / "m.db", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_sim_tune_starts_from_the_plan_and_explains_each_trial(tmp_path):
    job = ["-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "256", "-s", "8192"]
    out = tune(tmp_path, *job, "--executor", "sim", "--sim-machine", "docs/examples/h100-slow-fabric.yaml",
               "--budget", "3")
    best = json.loads(run_cli("plan", *job, "--top", "1", "--json").stdout)["candidates"][0]
    first = out["trials"][0]
    assert first["status"] == "ok" and first["strategy_string"] == best["strategy_string"]
    assert first["explanation"] == ""
    later = [t for t in out["trials"][1:] if t["status"] == "ok"]
    assert later
    for t in later:
        m = re.match(r"measured ([+-]\d+\.\d)% against trial (\d+); the cost model \(corrected\) predicted: ",
                     t["explanation"])
        assert m, t["explanation"]
        ref = out["trials"][int(m.group(2)) - 1]
        assert m.group(1) == f"{t['measured_step_time_s'] / ref['measured_step_time_s'] - 1:+.1%}"[:-1]


def test_profiled_torch_trials_are_explained_from_their_traces(tmp_path):
    out = tune(tmp_path, "-m", "tiny-dense", "-c", "local-cpu", "--devices", "2", "-b", "8", "-s", "32",
               "--executor", "torch", "--budget", "2", "--steps", "3", "--precision", "fp32",
               "--profile", tmp_path / "prof")
    ok = [t for t in out["trials"] if t["status"] == "ok"]
    assert len(ok) == 2
    assert "; traces: after is " in ok[1]["explanation"] and "step " in ok[1]["explanation"]


def test_the_torch_executor_refuses_what_the_trainer_cannot_run_on_cpu():
    m, t = load_model("tiny-dense"), TrainSpec(8, 32, "fp32")
    ex = TorchExecutor(m, t, device="cpu")
    assert "context parallelism" in ex.refuses(resolve_strategy("dp=1,cp=2", m, t, 2))
    assert ex.refuses(resolve_strategy("dp=2", m, t, 2)) is None


def test_trials_on_different_sim_machines_are_not_confused(tmp_path):
    """Memory keys an experiment by where its trials are measured too: the same strategy "measured" on the slow
    machine and on the catalog's is two trials, not one remembered for the other."""
    job = ["-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "256", "-s", "8192", "--executor", "sim", "--budget", "1"]
    slow = tune(tmp_path, *job, "--sim-machine", "docs/examples/h100-slow-fabric.yaml")
    catalog = tune(tmp_path, *job)
    again = tune(tmp_path, *job, "--sim-machine", "docs/examples/h100-slow-fabric.yaml")
    assert slow["trials"][0]["status"] == catalog["trials"][0]["status"] == "ok"
    assert slow["trials"][0]["strategy_string"] == catalog["trials"][0]["strategy_string"]
    assert catalog["trials"][0]["measured_step_time_s"] < slow["trials"][0]["measured_step_time_s"]
    # the same machine again: the trial is remembered, so the loop does not run it a second time (it is
    # skipped with the remembered figure, or the loop goes on to a strategy Memory does not have there)
    first = again["trials"][0]
    if first["status"] == "skipped":
        assert first["measured_step_time_s"] == slow["trials"][0]["measured_step_time_s"]
    else:
        assert first["strategy_string"] != slow["trials"][0]["strategy_string"]
