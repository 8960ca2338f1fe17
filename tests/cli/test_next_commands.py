"""Every command a tool prints for the user to run next runs as printed and gives the figure printed beside
it: estimate's ``next:`` when a strategy does not fit, plan's ``reproduce #1``, propose's ``reproduce #i``,
diagnose's ``next:`` (given the job), and the tune report's reproduce lines, on the docs' examples."""

from __future__ import annotations

import html
import json
import re
import shlex
import subprocess
import sys

import pytest

from asap.cli.format import seconds
from conftest import REPO, SHARED

CONTROL = SHARED / "traces" / "hta" / "trace_diff_control_control.json.gz"


def asap(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


def run_printed(command: str, *extra: str, cwd=None) -> subprocess.CompletedProcess:
    """A printed command exactly as printed (shell words, the leading ``asap`` replaced by this Python's)."""
    words = shlex.split(command)
    assert words[0] == "asap", command
    proc = asap(*words[1:], *extra, cwd=cwd)
    assert proc.returncode == 0, (command, proc.stderr)
    return proc


def printed(proc: subprocess.CompletedProcess, prefix: str) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return [ln[len(prefix):].strip() for ln in proc.stdout.splitlines() if ln.startswith(prefix)]


@pytest.mark.parametrize("job, strategy", [
    # README's old workflow example (it does not fit) and the 405B case with --devices
    ("-m llama3-70b -c dgx-h100-8node -b 256 -s 8192", "tp=4,pp=2,zero=1"),
    ("-m llama3.1-405b -c h100-sxm --devices 64 -b 64 -s 8192", "tp8 pp8"),
])
def test_estimate_next_runs_and_its_first_row_is_the_one_named(job, strategy):
    [line] = printed(asap("estimate", *shlex.split(job), "-S", strategy), "next:")
    command, note = line.split("   (", 1)
    named, step = re.search(r"#1 there: (.+) at (\S+ \S+)\)$", note).groups()
    plan = json.loads(run_printed(command, "--json").stdout)
    best = plan["candidates"][0]
    assert best["fits"] and best["strategy_compact"] == named and seconds(best["step_time_s"]) == step
    for word in shlex.split(job):  # every job option kept
        assert word in shlex.split(command)


def test_plan_reproduce_line_gives_the_first_row():
    job = ["-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "256", "-s", "8192", "--top", "3"]
    [command] = printed(asap("plan", *job), "reproduce #1:")
    plan = json.loads(asap("plan", *job, "--json").stdout)
    assert plan["candidates"][0]["command"] == command
    est = json.loads(run_printed(command, "--json").stdout)
    assert est["step_time_s"] == pytest.approx(plan["candidates"][0]["step_time_s"], rel=1e-9)
    assert est["strategy"] == plan["candidates"][0]["strategy"]


def test_plan_with_a_small_batch_says_why_dp_is_capped_and_why_fewer_rows():
    out = asap("plan", "-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "7", "-s", "8192", "--fix", "tp8 pp2")
    limits = printed(out, "limit:")
    assert any("dp is at most 1" in ln and "global batch 7" in ln for ln in limits), limits
    assert any("fewer than --top 5" in ln and "tp, pp pinned" in ln for ln in limits), limits


def test_include_oom_ranks_the_rows_that_do_not_fit_by_how_far_over():
    plan = json.loads(asap("plan", "-m", "llama3.1-405b", "-c", "h100-sxm", "--devices", "64", "-b", "64", "-s",
                           "8192", "--include-oom", "--top", "6", "--json").stdout)
    over = [c["peak_memory_gb"] - 80.0 for c in plan["candidates"]]
    assert all(not c["fits"] for c in plan["candidates"])
    assert over == sorted(over)
    assert any("how far over" in ln or "least over" in ln for ln in plan["limits"])


def test_propose_reproduce_lines_give_each_prediction():
    job = ["-m", "llama3-8b", "-c", "tpu-v5p", "--devices", "64", "-b", "256", "-s", "8192", "-S", "dp=16,cp=4"]
    commands = printed(asap("propose", *job), "reproduce #")
    proposals = json.loads(asap("propose", *job, "--json").stdout)["proposals"]
    assert len(commands) == len(proposals) == 3
    for line, p in zip(commands, proposals, strict=True):
        command = line.split(": ", 1)[1]
        assert command == p["command"]
        est = json.loads(run_printed(command, "--json").stdout)
        assert est["step_time_s"] == pytest.approx(p["predicted_step_time_s"], rel=1e-9)


def test_diagnose_next_runs_and_propose_reads_the_same_step_time():
    job = ["-m", "llama3-8b", "-c", "dgx-a100-1node", "-b", "32", "-s", "2048", "-S", "dp=8"]
    [line] = printed(asap("diagnose", str(CONTROL), *job), "next:")
    command, note = line.split("  (", 1)
    step = float(re.search(r"step time (\S+) s\)", note).group(1))
    out = json.loads(run_printed(command, "--json").stdout)
    assert out["diagnosis"]["source"] != "cost model" and f"{out['diagnosis']['step_time_s']:.4g}" == f"{step:.4g}"
    assert len(out["proposals"]) == 3


def test_diagnose_on_a_dense_model_suggests_no_moe_entry():
    from asap.agents.knowledge import load_knowledge

    moe_only = {e.id for e in load_knowledge() if e.model_kinds == ["moe"]}
    for trace in sorted((SHARED / "traces" / "hta").glob("*.json.gz")):
        for extra in ([], ["-m", "llama3-8b", "-c", "dgx-a100-1node", "-b", "32", "-s", "2048"]):
            proc = asap("diagnose", str(trace), *extra, "--json")
            if proc.returncode != 0:
                continue  # a trace diagnose refuses is not this test's subject
            ids = {k["id"] for k in json.loads(proc.stdout)["next_steps"]["knowledge"]}
            assert not ids & moe_only, (trace.name, ids)


def test_tune_report_reproduce_lines_give_each_prediction(tmp_path):
    page = tmp_path / "tune.html"
    proc = asap("tune", "-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "256", "-s", "8192", "--executor", "sim",
                "--sim-machine", "docs/examples/h100-slow-fabric.yaml", "--budget", "2", "--memory",
                str(tmp_path / "m.sqlite"), "--report", str(page), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    text = page.read_text(encoding="utf-8")
    rows = re.findall(r"<tr class=\"\"><td><span class=\"strategy\">.*?</span></td><td>.*?</td><td>([0-9.e+-]+) s</td>"
                      r".*?<code>(.*?)</code>", text)
    assert len(rows) == 3, text[-3000:]
    for predicted, command in rows:
        est = json.loads(run_printed(html.unescape(command), "--json").stdout)
        assert f"{est['step_time_s']:.4g}" == predicted
