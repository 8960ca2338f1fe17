"""The optional LLM advisor against a real local chat-completions server (http.server on 127.0.0.1:0) that
replays recorded answers in order and records what it was sent."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from asap.agents.llm import (response_schema, MAX_CANDIDATES, SYSTEM_PROMPT, AdviceResult, LLMAdvice, LLMAdvisor, LLMCandidate,
                             LLMConfig)

CONTEXT = {"model": "llama3-8b", "devices": 16, "current": "tp=2,pp=2,mbs=1",
           "diagnosis": {"bottleneck": "pipeline_bubble", "share": 0.31}}
HANG_S = 2.0  # the hanging handler's sleep; the client's timeout is 0.5 s


def completion(content, finish_reason="stop"):
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "test-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


GOOD = {"candidates": [{"strategy": {"tp": 4, "pp": 1, "recompute": "selective"},
                        "rationale": "drop the pipeline: its bubble is a third of the step"},
                       {"strategy": "pp=2,vpp=2,schedule=interleaved", "rationale": "interleave to shrink the bubble"}],
        "narrative": "The pipeline bubble dominates."}

# recorded answers: (status, body (dict -> JSON, str -> as is), seconds to wait before answering)
ANSWERS = {
    "good": (200, completion(json.dumps(GOOD)), 0),
    "fenced": (200, completion("Here you go:\n```json\n" + json.dumps(GOOD, indent=1) + "\n```\nGood luck."), 0),
    "malformed": (200, completion('{"candidates": [{"strategy": {"tp": 4}, "rationale": "x"}'), 0),
    "schema": (200, completion(json.dumps({"candidates": {"tp": 4}, "narrative": "n"})), 0),
    "one_bad": (200, completion(json.dumps({"candidates": [
        {"strategy": {"tp": 8, "mbs": 2}, "rationale": "wider tensor parallelism"},
        {"strategy": {"tp": 0}, "rationale": "no tensor parallelism at all"}], "narrative": "n"})), 0),
    "unknown_key": (200, completion(json.dumps({"candidates": [
        {"strategy": {"warp_speed": 9}, "rationale": "faster"},
        {"strategy": {"cp": 2}, "rationale": "context parallel"}]})), 0),
    "refusal": (200, completion("I can't help", finish_reason="content_filter"), 0),
    "refusal_text": (200, completion("I can't help with that."), 0),
    "http500": (500, {"error": {"message": "internal server error", "type": "server_error"}}, 0),
    "empty_choices": (200, {"id": "x", "object": "chat.completion", "choices": []}, 0),
    "not_json_body": (200, "<html>gateway</html>", 0),
    "hang": (200, completion(json.dumps(GOOD)), HANG_S),
}


class ChatServer:
    """A chat-completions endpoint replaying ``script`` (answer names) in order; ``requests`` records each
    request as (path, headers, decoded JSON body)."""

    def __init__(self):
        self.script: list[str] = []
        self.requests: list[tuple[str, dict, dict]] = []
        self.release = threading.Event()  # set at teardown: a hanging handler stops sleeping
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(n)
                with outer.lock:
                    try:
                        body = json.loads(raw)
                    except ValueError:
                        body = {"_raw": raw.decode(errors="replace")}
                    outer.requests.append((self.path, dict(self.headers), body))
                    name = outer.script.pop(0) if outer.script else "http500"
                status, payload, delay = ANSWERS[name]
                if delay:
                    outer.release.wait(delay)
                data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (the hang test)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    s = ChatServer()
    yield s
    s.close()


def advisor(server, timeout_s=10.0, api_key="sk-test"):
    return LLMAdvisor(LLMConfig(base_url=server.base_url, model="test-model", api_key=api_key, timeout_s=timeout_s))


def ask(server, *names, **kw) -> AdviceResult:
    server.script = list(names)
    return advisor(server, **kw).advise(CONTEXT)


def assert_failed(res: AdviceResult, *needles):
    assert res.candidates == []
    assert res.error is not None and "\n" not in res.error
    for n in needles:
        assert n in res.error, res.error


# ------------------------------------------------------------------------------------------ good answers

def test_good_answer_and_the_request_sent(server):
    res = ask(server, "good")
    assert res.error is None, res.error
    assert res.candidates == [({"tp": 4, "pp": 1, "recompute": "selective"},
                               "drop the pipeline: its bubble is a third of the step"),
                              ({"pp": 2, "vpp": 2, "schedule": "interleaved"}, "interleave to shrink the bubble")]
    assert res.narrative == "The pipeline bubble dominates."
    assert res.dropped == []
    assert len(server.requests) == 1
    path, headers, body = server.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    assert headers["Content-Type"] == "application/json"
    assert body["model"] == "test-model"
    assert body["temperature"] == 0
    assert body["response_format"] == {"type": "json_object", "schema": response_schema()}
    system, user = body["messages"]
    assert system["role"] == "system" and system["content"] == SYSTEM_PROMPT
    assert '"candidates"' in system["content"] and '"narrative"' in system["content"]
    for key in ("dp", "tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "recompute", "zero", "sp", "schedule",
                "dispatcher", "a2a_overlap", "layer_split"):
        assert key in system["content"]
    assert user["role"] == "user" and json.loads(user["content"]) == CONTEXT


def test_no_api_key_sends_no_authorization(server):
    res = ask(server, "good", api_key=None)
    assert res.error is None
    assert "Authorization" not in server.requests[0][1]


def test_trailing_slash_in_base_url(server):
    server.script = ["good"]
    res = LLMAdvisor(LLMConfig(base_url=server.base_url + "/", model="m", timeout_s=10)).advise(CONTEXT)
    assert res.error is None
    assert server.requests[0][0] == "/v1/chat/completions"


def test_fenced_json(server):
    res = ask(server, "fenced")
    assert res.error is None, res.error
    assert [s for s, _ in res.candidates] == [{"tp": 4, "pp": 1, "recompute": "selective"},
                                               {"pp": 2, "vpp": 2, "schedule": "interleaved"}]
    assert res.narrative == "The pipeline bubble dominates."


# --------------------------------------------------------------------------------- candidates dropped alone

def test_one_valid_one_invalid_value(server):
    res = ask(server, "one_bad")
    assert res.error is None
    assert res.candidates == [({"tp": 8, "mbs": 2}, "wider tensor parallelism")]
    assert len(res.dropped) == 1
    assert "candidate 1" in res.dropped[0] and "tp" in res.dropped[0] and ">= 1" in res.dropped[0]
    assert res.narrative == "n"


def test_one_unknown_key(server):
    res = ask(server, "unknown_key")
    assert res.error is None
    assert res.candidates == [({"cp": 2}, "context parallel")]
    assert len(res.dropped) == 1 and "warp_speed" in res.dropped[0] and "unknown key" in res.dropped[0]


# ------------------------------------------------------------------------------------------------ failures

@pytest.mark.parametrize("name, needles", [
    ("malformed", ("not valid JSON",)),
    ("schema", ("schema mismatch", "candidates")),
    ("refusal", ("refused", "content_filter")),
    ("refusal_text", ("no JSON object",)),
    ("http500", ("HTTP 500", "internal server error")),
    ("empty_choices", ("no choices",)),
    ("not_json_body", ("not JSON",)),
])
def test_failures_are_one_line_errors(server, name, needles):
    res = ask(server, name)
    assert_failed(res, *needles)
    assert res.narrative == ""
    assert len(server.requests) == 1


def test_hanging_endpoint_times_out(server):
    t0 = time.monotonic()
    res = ask(server, "hang", timeout_s=0.5)
    elapsed = time.monotonic() - t0
    # the handler answers (a good answer) only after HANG_S: an error means the client gave up first
    assert_failed(res, "timed out")
    assert elapsed < HANG_S - 0.5, elapsed


def test_trickling_endpoint_is_bounded_in_total():
    """Headers at once, then one body byte every 0.2 s: no single read times out, the whole exchange must."""
    stop = threading.Event()
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    port = lsock.getsockname()[1]

    def serve():
        conn, _ = lsock.accept()
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                while not stop.wait(0.2):
                    conn.sendall(b" ")
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        res = LLMAdvisor(LLMConfig(base_url=f"http://127.0.0.1:{port}", model="m", timeout_s=0.6)).advise(CONTEXT)
        elapsed = time.monotonic() - t0
        assert_failed(res, "timed out")
        assert elapsed < 3.0, elapsed
    finally:
        stop.set()
        lsock.close()
        t.join(5)


def test_connection_refused():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    res = LLMAdvisor(LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=5)).advise(CONTEXT)
    assert_failed(res, "cannot reach")


def test_non_http_base_url_is_refused(tmp_path):
    res = LLMAdvisor(LLMConfig(base_url=f"file://{tmp_path}", model="m")).advise(CONTEXT)
    assert_failed(res, "http")


def test_recorded_answers_in_order(server):
    """One server, one advisor, the recorded answers replayed in order."""
    names = ["good", "fenced", "malformed", "schema", "one_bad", "refusal", "http500", "good"]
    server.script = list(names)
    adv = advisor(server)
    results = [adv.advise(CONTEXT) for _ in names]
    assert [r.error is None for r in results] == [True, True, False, False, True, False, False, True]
    assert [len(r.candidates) for r in results] == [2, 2, 0, 0, 1, 0, 0, 2]
    assert [len(r.dropped) for r in results] == [0, 0, 0, 0, 1, 0, 0, 0]
    assert len(server.requests) == len(names)
    assert all(json.loads(b["messages"][1]["content"]) == CONTEXT for _, _, b in server.requests)


# ---------------------------------------------------------------------------------- schema and configuration

def test_schema_models():
    c = LLMCandidate.model_validate({"strategy": "tp=2,recompute=full", "rationale": "r"})
    assert c.parsed() == {"tp": 2, "recompute": "full"}
    for bad in ({"tp": 0}, {"foo": 1}, {"tp": True}, {"tp": 2.5}, {}, 7, ["tp=2"]):
        with pytest.raises(ValueError):
            LLMCandidate.model_validate({"strategy": bad, "rationale": "r"})
    with pytest.raises(ValueError):
        LLMCandidate.model_validate({"strategy": {"tp": 2}})  # no rationale
    with pytest.raises(ValueError):
        LLMAdvice(candidates=[LLMCandidate(strategy={"tp": 2}, rationale="r")] * (MAX_CANDIDATES + 1))
    assert LLMAdvice(candidates=[]).narrative == ""


def test_more_than_five_candidates_keeps_five():
    from asap.agents.llm import parse_advice
    payload = {"candidates": [{"strategy": {"mbs": m}, "rationale": str(m)} for m in range(1, 8)] +
               [{"strategy": {"mbs": 1}, "rationale": "again"}]}
    res = parse_advice(payload)
    assert [s["mbs"] for s, _ in res.candidates] == [1, 2, 3, 4, 5]
    assert len(res.dropped) == 3 and "repeats" in res.dropped[-1]


def test_config_from_env(monkeypatch):
    for v in ("ASAP_LLM_BASE_URL", "ASAP_LLM_MODEL", "ASAP_LLM_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(v, raising=False)
    assert LLMConfig.from_env() is None
    monkeypatch.setenv("OPENAI_BASE_URL", "http://openai.example/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    c = LLMConfig.from_env()
    assert (c.base_url, c.api_key, c.timeout_s) == ("http://openai.example/v1", "sk-openai", 20.0)
    monkeypatch.setenv("ASAP_LLM_BASE_URL", "http://asap.example/v1")
    monkeypatch.setenv("ASAP_LLM_MODEL", "qwen")
    monkeypatch.setenv("ASAP_LLM_API_KEY", "sk-asap")
    c = LLMConfig.from_env()
    assert (c.base_url, c.model, c.api_key) == ("http://asap.example/v1", "qwen", "sk-asap")
    c = LLMConfig.from_env(base_url="http://opt/v1", model="m", api_key="k")
    assert (c.base_url, c.model, c.api_key) == ("http://opt/v1", "m", "k")
    assert c.endpoint == "http://opt/v1/chat/completions"


def test_advise_never_raises_on_odd_input(server):
    server.script = ["good"]
    res = LLMAdvisor(LLMConfig(base_url=server.base_url, model="m", timeout_s=-1)).advise(CONTEXT)
    assert_failed(res, "timeout_s")
    # a context with values json cannot encode is sent with their str()
    server.script = ["good"]
    res = advisor(server).advise({"when": object()})
    assert res.error is None
