"""``asap diagnose`` on traces recorded here, by the stacks themselves: torchtitan's FSDP2 (2 CPU processes,
gloo) and DeepSpeed ZeRO-3, each run for a few steps with its profiler on (the fixtures). The frameworks'
hooks are classed by what they are, by their identity, never their time (``asap.profile.trace.FRAMEWORK_HOOKS``):
FSDP2's post-backward node and its collective record_functions are communication, DTensor's subclass dispatch
and the hooks' own Python are host overhead; so the FSDP2 step is communication plus host, not memory."""

import pytest

from asap import Job, TrainSpec, load_cluster, load_model
from asap.execute.factory import tune_executor
from asap.profile.diagnose import diagnose
from asap.profile.trace import HookRole, hook_role
from asap.spec.strategy import resolve_strategy


def _profiled_run(kind: str, strategy: str, folder) -> list[str]:
    model, train = load_model("tiny-dense"), TrainSpec(8, 64, "bf16", framework=kind)
    job = Job.resolve(model, load_cluster("local-cpu", devices=2), train)
    ex = tune_executor(kind, job, steps=2, workdir=str(folder))
    res = ex.run(resolve_strategy(strategy, model, train, 2))
    if not res.ok:
        pytest.fail(f"{kind} {strategy}: {res.reason}")
    assert res.traces, f"{kind} wrote no trace"
    return res.traces


@pytest.fixture(scope="module")
def fsdp2_traces(tmp_path_factory):
    return _profiled_run("torchtitan", "dp=2,zero=3", tmp_path_factory.mktemp("titan"))


@pytest.fixture(scope="module")
def zero3_traces(tmp_path_factory):
    return _profiled_run("deepspeed", "dp=2,zero=3", tmp_path_factory.mktemp("ds"))


def test_hook_roles_by_name():
    assert hook_role("RegisterPostBackwardFunctionBackward") is HookRole.COMMUNICATION
    assert hook_role("FSDP::post_backward_reduce (layers.0)") is HookRole.COMMUNICATION
    assert hook_role("FSDP::all_gather (layers.2)") is HookRole.COMMUNICATION
    assert hook_role("FSDP::pre_backward (layers.1)") is HookRole.HOST
    assert hook_role("PythonSubclass") is HookRole.HOST
    assert hook_role("PreBackwardFunctionForModuleBackward") is HookRole.COMMUNICATION
    assert hook_role("aten::mm") is None and hook_role("autograd::engine::evaluate_function: AddBackward0") is None


def _check_hooks(d):
    rows = {r.name: r for r in d.top_ops}
    hooks = {n: r for n, r in rows.items() if hook_role(n) is not None}
    for name, r in hooks.items():
        want = "communication" if hook_role(name) is HookRole.COMMUNICATION else "host"
        assert r.bound == want, (name, r.bound, r.bound_from)
        assert r.bound_from == "hook"
    return rows, hooks


def test_fsdp2_step_is_communication_and_host_not_memory(fsdp2_traces):
    d = diagnose(fsdp2_traces, top=200)
    rows, hooks = _check_hooks(d)
    assert any(n.startswith("FSDP::") for n in hooks), sorted(rows)[:20]
    sc, b = d.scores_s, getattr(d.bottleneck, "value", d.bottleneck)
    assert b in ("communication", "host"), (b, sc)
    assert sc["communication"] + sc["host"] > sc["memory"], sc


def test_deepspeed_zero3_hooks_are_not_work(zero3_traces):
    d = diagnose(zero3_traces, top=200)
    _check_hooks(d)
    sc = d.scores_s
    assert sc["communication"] + sc["host"] > sc["memory"], sc
