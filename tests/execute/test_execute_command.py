"""The command executor against real child processes: success, failure, garbage, out-of-memory and a hang
each end as the right trial status, never as an exception."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from asap.errors import AsapError
from asap.spec.outcome import Failure, Measurement
from asap.execute.factory import make_executor
from asap.execute.command import CommandExecutor
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec

CHILD = r'''
import os, sys, time
mode, tp, pp, mbs, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
print(f"args tp={tp} pp={pp} mbs={mbs}", flush=True)
if mode == "ok":
    os.makedirs(out, exist_ok=True)
    for r in range(2):
        open(os.path.join(out, f"trace_rank{r}.json"), "w").write("{}")
    for step, t in enumerate([0.9, 0.20, 0.22, 0.21]):
        print(f"step {step} loss 6.2 step_time_s: {t}", flush=True)
elif mode == "fail":
    print("Traceback (most recent call last):", file=sys.stderr)
    print("ValueError: tensor model parallel size 3 does not divide 32 heads", file=sys.stderr)
    sys.exit(3)
elif mode == "garbage":
    sys.stdout.buffer.write(b"\x00\xff\xfe step_time: not-a-number \x89PNG garbage\n" * 5)
elif mode == "oom":
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB", file=sys.stderr)
    sys.exit(1)
elif mode == "hang":
    print("initializing NCCL...", flush=True)
    time.sleep(600)
'''


@pytest.fixture()
def child(tmp_path: Path) -> Path:
    p = tmp_path / "child.py"
    p.write_text(CHILD)
    return p


def _executor(child: Path, mode: str, tmp_path: Path, **kw) -> CommandExecutor:
    template = f"{sys.executable} {child} {mode} {{tp}} {{pp}} {{mbs}} {{trial_dir}}/traces"
    kw.setdefault("timeout_s", 30)
    return CommandExecutor(template, devices=8, workdir=str(tmp_path / "trials"),
                           trace_glob="{trial_dir}/traces/trace_rank*.json", **kw)


def _run_text(ex, text):
    return ex.run(ex.parse(text))


def test_success_parses_step_time_and_collects_traces(child, tmp_path):
    ex = _executor(child, "ok", tmp_path)
    res = ex.run(ex.parse("tp=2,pp=2,mbs=4"))
    assert isinstance(res, Measurement) and res.status == "ok", res
    assert res.step_time_s == pytest.approx(0.21)  # median after the first (warm-up) match
    assert res.strategy.tp == 2 and res.strategy.dp == 2  # dp = devices / (tp*pp*cp)
    assert len(res.traces) == 2 and all(t.endswith(".json") for t in res.traces)
    log = Path(res.details["log"]).read_text()
    assert "args tp=2 pp=2 mbs=4" in log  # placeholders filled, argv passed without a shell
    assert res.to_dict()["measured_step_time_s"] == pytest.approx(0.21)


def test_failure_reports_the_error_line(child, tmp_path):
    res = _run_text(_executor(child, "fail", tmp_path), "tp=2")
    assert isinstance(res, Failure) and res.status == "failed" and res.kind == "crash"
    assert "exited with code 3" in res.reason and "does not divide 32 heads" in res.reason
    assert "\n" not in res.reason


def test_garbage_output_is_a_failed_trial(child, tmp_path):
    res = _run_text(_executor(child, "garbage", tmp_path), "tp=1")
    assert res.status == "failed" and res.kind == "no_result"
    assert "no step time" in res.reason


def test_out_of_memory_is_recognised(child, tmp_path):
    res = _run_text(_executor(child, "oom", tmp_path), "tp=1")
    assert res.status == "failed" and res.kind == "oom"
    assert "out of memory" in res.reason and "20.00 GiB" in res.reason


def test_hang_is_killed_after_the_timeout(child, tmp_path):
    t0 = time.perf_counter()
    res = _run_text(_executor(child, "hang", tmp_path, timeout_s=2), "tp=1")
    assert time.perf_counter() - t0 < 20
    assert res.status == "failed" and res.kind == "timeout"
    assert "timed out after 2 s" in res.reason
    assert "initializing NCCL" in res.log_tail


def test_missing_program_and_bad_strategy_are_failed_trials(tmp_path):
    ex = CommandExecutor("/nonexistent/launcher --tp {tp}", devices=4, workdir=str(tmp_path))
    res = ex.run(ex.parse("tp=2"))
    assert res.status == "failed" and "command not found" in res.reason
    with pytest.raises(AsapError, match=r"tp\*pp\*cp"):  # 4 devices are not divisible by tp=3: refused at the edge
        ex.parse("tp=3")


def test_template_is_checked_up_front(tmp_path):
    with pytest.raises(AsapError, match="unknown placeholder"):
        CommandExecutor("train --tp {tensor_parallel}", workdir=str(tmp_path))
    with pytest.raises(AsapError, match="capturing group"):
        CommandExecutor("train", step_time_regex=r"step_time: \d+", workdir=str(tmp_path))


def test_job_placeholders_and_custom_regex(child, tmp_path):
    script = tmp_path / "echo.py"
    script.write_text("import sys; print(' '.join(sys.argv[1:])); print('elapsed time per iteration (ms): 250.0')\n"
                      "print('elapsed time per iteration (ms): 240.0')\n")
    ex = make_executor("command", template=[sys.executable, str(script), "--gbs", "{global_batch}", "--model", "{model}",
                                            "--nodes", "{nodes}", "--m", "{micro_batches}"],
                       step_time_regex=r"elapsed time per iteration \(ms\):\s*([0-9.]+)", step_time_scale=1e-3,
                       model=load_model("tiny-dense"), train=TrainSpec(16, 128), devices=4, variables={"nodes": 1},
                       workdir=str(tmp_path / "w"))
    res = ex.run(ex.parse("tp=2"))
    assert res.status == "ok", res
    assert res.step_time_s == pytest.approx(0.24)
    assert res.tokens_per_s == pytest.approx(16 * 128 / 0.24)
    assert "--gbs 16 --model tiny-dense --nodes 1 --m 8" in Path(res.details["log"]).read_text()
