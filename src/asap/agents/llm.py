"""An optional LLM advisor: asks any OpenAI-compatible chat-completions endpoint for up to five candidate
strategies (each with its rationale) and a short narrative.

The advisor only talks: it never runs anything, and it never raises. Every failure (no endpoint, timeout,
connection refused, an HTTP error status, an answer that is not JSON or does not have the schema, a refusal,
no choices) comes back as an ``AdviceResult`` with no candidates and ``error`` set to one line. Candidates
whose strategy is not a legal ``asap.spec.strategy`` mapping are dropped one by one, each with its reason in
``dropped``; the others are kept. What is kept is still only a suggestion: the Proposer prices each with the
cost model like any other candidate.

The whole exchange is bounded by ``LLMConfig.timeout_s`` (the request runs in a daemon thread that is
abandoned at the deadline; the socket timeout is the same, so an abandoned thread ends soon after).

Configuration (``LLMConfig.from_env``): ``ASAP_LLM_BASE_URL`` (else ``OPENAI_BASE_URL``), ``ASAP_LLM_MODEL``
(else ``DEFAULT_MODEL``), ``ASAP_LLM_API_KEY`` (else ``OPENAI_API_KEY``). Only the standard library speaks
HTTP (``urllib.request``).
"""

from __future__ import annotations

import contextlib

import json
import os
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from asap.errors import AsapError, from_validation, validated
from asap.spec.framework import DISPATCHERS
from asap.spec.strategy import SCHEDULES, parse_strategy
from asap.spec.knobs import RECOMPUTE, RECOMPUTE_MODULES

MAX_CANDIDATES = 5
# The longest answer the schema allows, in tokens: MAX_CANDIDATES x (a strategy of ~80 characters, a rationale
# of 400, ~40 of JSON) + a narrative of 600 + ~30 = 3,230 characters, ~3.5 characters a token: ~920, rounded up.
# A smaller cap (ASAP_LLM_MAX_TOKENS) bounds a slow local model's time; an answer it cuts short fails validation
# and is dropped with its reason, like any other.
DEFAULT_MAX_TOKENS = 1024
DEFAULT_MODEL = "gpt-4o-mini"  # used when neither the option nor ASAP_LLM_MODEL names one
MAX_RESPONSE_BYTES = 4 << 20  # a chat answer larger than this is not an answer
MAX_ERROR_CHARS = 300  # the one-line error is cut to this length
MAX_NARRATIVE_CHARS = 4000
# the example answer's placeholder texts (SYSTEM_PROMPT): a model that copies them has not answered (a small
# model under a grammar often does), so its candidate is dropped and the proposals fall back, saying so
PLACEHOLDERS = ("why this should be faster", "a few sentences explaining the situation and your suggestions")

SYSTEM_PROMPT = f"""You advise on parallel strategies for training a large language model.
The user message is a JSON object describing the model, the cluster, the training setup, the current
strategy, its diagnosis (bottleneck classes, each with the seconds removing it would save), the ids of the
knowledge entries retrieved for it, and the candidates already priced by the cost model. Naming one of those
candidates again replaces its rationale with yours; a new strategy is priced like any other.

Answer with ONLY a JSON object, no prose and no code fence, of exactly this form:
{{"candidates": [{{"strategy": {{"tp": 4, "pp": 2, "recompute": "selective"}},
                 "rationale": "why this should be faster"}}],
 "narrative": "a few sentences explaining the situation and your suggestions"}}

Rules:
- At most {MAX_CANDIDATES} candidates; an empty list is fine when you have nothing better to suggest.
- "strategy" holds only keys you want to set; omitted keys take their defaults. Allowed keys and values:
  dp, tp, pp, vpp, cp, ep, etp, mbs: integers >= 1 (dp is derived from the device count when omitted);
  zero: 0, 1, 2 or 3; sp: 0 or 1; a2a_overlap: 0 or 1;
  recompute: {", ".join(RECOMPUTE)}, or modules joined by "+" from: {", ".join(RECOMPUTE_MODULES)};
  schedule: {", ".join(SCHEDULES)};
  dispatcher: {", ".join(DISPATCHERS)};
  layer_split: layers per pipeline chunk as a string such as "5/4/4/3".
- No other keys. Every candidate must differ from the current strategy.
- "rationale" is one or two sentences per candidate.
"""


def response_schema() -> dict[str, Any]:
    """The JSON schema of an answer (``SYSTEM_PROMPT``'s form), sent as ``response_format`` so that a server that
    constrains its decoding to a schema (llama-cpp-python's and llama.cpp's ``json_object`` with ``schema``, a
    grammar built from it) can only answer in it; the answer is still validated here (``parse_advice``)."""
    degree = {"type": "integer", "minimum": 1, "maximum": 1024}
    keys: dict[str, Any] = {k: degree for k in ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs")}
    keys.update(zero={"type": "integer", "enum": [0, 1, 2, 3]}, sp={"type": "integer", "enum": [0, 1]},
                recompute={"type": "string", "enum": list(RECOMPUTE)},
                schedule={"type": "string", "enum": list(SCHEDULES)})
    candidate = {"type": "object", "properties": {
        "strategy": {"type": "object", "properties": keys, "additionalProperties": False, "minProperties": 1},
        "rationale": {"type": "string", "maxLength": 400}}, "required": ["strategy", "rationale"]}
    return {"type": "object", "properties": {
        "candidates": {"type": "array", "items": candidate, "maxItems": MAX_CANDIDATES},
        "narrative": {"type": "string", "maxLength": 600}}, "required": ["candidates", "narrative"]}


# ---------------------------------------------------------------------------------------------- configuration

@dataclass
class LLMConfig:
    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 20.0
    max_tokens: int = DEFAULT_MAX_TOKENS

    @classmethod
    def from_env(cls, base_url: str | None = None, model: str | None = None,
                 api_key: str | None = None) -> LLMConfig | None:
        """The options where given, else ASAP_LLM_BASE_URL / ASAP_LLM_MODEL / ASAP_LLM_API_KEY, else
        OPENAI_BASE_URL / OPENAI_API_KEY; ``None`` when no base URL is known (the LLM is off)."""
        def env(*names: str) -> str | None:
            for n in names:
                v = os.environ.get(n, "").strip()
                if v:
                    return v
            return None

        url = (base_url or "").strip() or env("ASAP_LLM_BASE_URL", "OPENAI_BASE_URL")
        if not url:
            return None
        return cls(base_url=url, model=(model or "").strip() or env("ASAP_LLM_MODEL") or DEFAULT_MODEL,
                   api_key=(api_key or "").strip() or env("ASAP_LLM_API_KEY", "OPENAI_API_KEY"))

    @property
    def endpoint(self) -> str:
        return f"{self.base_url.rstrip('/')}/chat/completions"


class _Reachable(BaseModel):
    """What ``LLMAdvisor.advise`` checks of its config before it asks: a positive timeout, an http(s) URL."""

    timeout_s: Any
    base_url: Any

    @field_validator("timeout_s")
    @classmethod
    def _timeout(cls, v: Any) -> Any:
        if not float(v) > 0:
            raise ValueError(f"must be > 0, got {v!r}")
        return v

    @field_validator("base_url")
    @classmethod
    def _http(cls, v: Any) -> Any:
        scheme = urllib.parse.urlsplit(LLMConfig(v, "").endpoint).scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"must be an http(s) URL, got {v!r}")
        return v


# ---------------------------------------------------------------------------------------------------- schema

class LLMCandidate(BaseModel):
    """One suggested strategy: a mapping of strategy keys (or a ``key=value,...`` string) and why."""

    model_config = ConfigDict(extra="ignore")

    strategy: dict[str, int | str] | str
    rationale: str

    @field_validator("strategy", mode="before")
    @classmethod
    def _legal(cls, v: Any) -> Any:
        # parse_strategy on the raw value (before pydantic coerces, so true/2.5 are refused as written);
        # AsapError is a ValueError, which pydantic reports as a validation error
        if not isinstance(v, (dict, str)):
            raise ValueError(f"must be an object of strategy keys or a key=value string, got {type(v).__name__}")
        if not parse_strategy(v):
            raise ValueError("is empty (no strategy key set)")
        return v

    def parsed(self) -> dict[str, Any]:
        """The typed partial strategy (``asap.spec.strategy.parse_strategy``)."""
        return parse_strategy(self.strategy)


class LLMAdvice(BaseModel):
    model_config = ConfigDict(extra="ignore")

    candidates: list[LLMCandidate] = Field(max_length=MAX_CANDIDATES)
    narrative: str = ""


class _Envelope(BaseModel):
    """The answer's outer shape: candidates checked one by one afterwards, so one bad one drops alone."""

    model_config = ConfigDict(extra="ignore")

    candidates: list[Any]
    narrative: str | None = ""


# ---------------------------------------------------------------------------------------------------- result

@dataclass
class AdviceResult:
    candidates: list[tuple[dict, str]] = field(default_factory=list)  # (parsed strategy, rationale)
    narrative: str = ""
    error: str | None = None
    dropped: list[str] = field(default_factory=list)  # one line per candidate dropped, with the reason

    @property
    def ok(self) -> bool:
        return self.error is None

    def fallback(self) -> str | None:
        """What the proposals say when the LLM answered badly (an error, or no usable candidate): the proposals are
        the deterministic ones; None when it gave at least one candidate."""
        if self.error:
            return f"the LLM answered badly ({self.error}): these are the deterministic proposals"
        if not self.candidates:
            why = f" ({self.dropped[0]})" if self.dropped else ""
            return f"the LLM gave no usable candidate{why}: these are the deterministic proposals"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"candidates": [{"strategy": s, "rationale": r} for s, r in self.candidates],
                "narrative": self.narrative, "error": self.error, "dropped": list(self.dropped)}


def _one_line(text: Any, limit: int = MAX_ERROR_CHARS) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _failure(message: str) -> AdviceResult:
    return AdviceResult(candidates=[], narrative="", error=_one_line(f"llm: {message}"), dropped=[])


class _Failure(Exception):
    """Internal: a failure whose message is the result's error line."""


# ---------------------------------------------------------------------------------------------------- parsing

_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)


def extract_json(content: str) -> Any:
    """The JSON value in a chat answer: the whole text, else a fenced ```json block, else the outermost
    ``{...}``. Raises ``_Failure`` when there is none."""
    text = content.strip()
    attempts = [text] + [m.group(1).strip() for m in _FENCE.finditer(text)]
    first, last = text.find("{"), text.rfind("}")
    if 0 <= first < last:
        attempts.append(text[first:last + 1])
    for a in attempts:
        if not a:
            continue
        try:
            return json.loads(a)
        except ValueError:
            continue
    if "{" not in text:
        raise _Failure(f"the answer holds no JSON object (a refusal?): {text[:120]!r}")
    raise _Failure(f"the answer is not valid JSON: {text[:120]!r}")


def _validation_reason(err: ValidationError) -> str:
    """Every error of ``err``, ``location: message``, ``; ``-separated (``asap.errors.from_validation``)."""
    return str(from_validation(err, every=True))


def parse_advice(payload: Any) -> AdviceResult:
    """Check a decoded answer: the outer schema must hold (else the whole answer fails); each candidate is
    kept or dropped on its own (its strategy checked by ``parse_strategy``); the first ``MAX_CANDIDATES``
    valid ones are kept."""
    if not isinstance(payload, dict):
        raise _Failure(f"schema mismatch: the answer is a JSON {type(payload).__name__}, not an object")
    try:
        env = _Envelope.model_validate(payload)
    except ValidationError as e:
        raise _Failure(f"schema mismatch: {_validation_reason(e)}") from None
    kept: list[LLMCandidate] = []
    out: list[tuple[dict, str]] = []
    dropped: list[str] = []
    for i, raw in enumerate(env.candidates):
        try:
            cand = LLMCandidate.model_validate(raw)
            parsed = cand.parsed()
        except ValidationError as e:
            dropped.append(_one_line(f"candidate {i}: {_validation_reason(e)}"))
            continue
        except AsapError as e:  # not expected after validation; kept for safety
            dropped.append(_one_line(f"candidate {i}: {e}"))
            continue
        if parsed in [s for s, _ in out]:
            dropped.append(f"candidate {i}: repeats an earlier candidate")
            continue
        if cand.rationale.strip().lower() in PLACEHOLDERS:
            dropped.append(f"candidate {i}: copies the prompt's example (rationale {cand.rationale.strip()!r})")
            continue
        if len(kept) >= MAX_CANDIDATES:
            dropped.append(f"candidate {i}: more than {MAX_CANDIDATES} candidates")
            continue
        kept.append(cand)
        out.append((parsed, cand.rationale.strip()))
    narrative = (env.narrative or "").strip()[:MAX_NARRATIVE_CHARS]
    narrative = "" if narrative.lower() in PLACEHOLDERS else narrative
    LLMAdvice(candidates=kept, narrative=narrative)  # the checked answer has the public schema
    return AdviceResult(candidates=out, narrative=narrative, error=None, dropped=dropped)


def parse_completion(body: bytes) -> AdviceResult:
    """A chat-completions response body to advice (raises ``_Failure``)."""
    try:
        resp = json.loads(body.decode("utf-8", errors="replace"))
    except ValueError:
        raise _Failure(f"the endpoint's response is not JSON: {body[:120]!r}") from None
    if not isinstance(resp, dict):
        raise _Failure("the endpoint's response is not a JSON object")
    if resp.get("error"):
        err = resp["error"]
        raise _Failure(f"the endpoint answered an error: {err.get('message', err) if isinstance(err, dict) else err}")
    choices = resp.get("choices")
    if not isinstance(choices, list) or not choices:
        raise _Failure("the response has no choices")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise _Failure("the response's first choice is not an object")
    finish = choice.get("finish_reason")
    raw_message = choice.get("message")
    message: dict[str, Any] = raw_message if isinstance(raw_message, dict) else {}
    if message.get("refusal"):
        raise _Failure(f"the model refused: {message['refusal']!r}")
    if finish == "content_filter":
        raise _Failure(f"the model refused (finish_reason content_filter): {str(message.get('content'))[:120]!r}")
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        raise _Failure(f"the answer has no content (finish_reason {finish!r})")
    return parse_advice(extract_json(content))


# ---------------------------------------------------------------------------------------------------- advisor

class LLMAdvisor:
    """Asks the endpoint of ``config`` for candidates and a narrative; ``advise`` never raises."""

    def __init__(self, config: LLMConfig):
        self.config = config

    def request_body(self, context: dict) -> dict[str, Any]:
        return {"model": self.config.model,
                "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                             {"role": "user", "content": json.dumps(context, default=str)}],
                "temperature": 0, "max_tokens": self.config.max_tokens,
                "response_format": {"type": "json_object", "schema": response_schema()}}

    def advise(self, context: dict) -> AdviceResult:
        try:
            timeout = float(self.config.timeout_s)
            validated(_Reachable, {"timeout_s": self.config.timeout_s, "base_url": self.config.base_url})
            url = self.config.endpoint
            data = json.dumps(self.request_body(context)).encode()
        except AsapError as e:  # the config's first problem: "timeout_s must be > 0, got 0"
            return _failure(f"{e.field} {e.problem}")
        except Exception as e:  # noqa: BLE001 - a bad config or context is a failure like any other
            return _failure(f"{type(e).__name__}: {e}")

        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["result"] = parse_completion(self._post(url, data, timeout))
            except _Failure as e:
                box["result"] = _failure(str(e))
            except BaseException as e:  # noqa: BLE001 - never raise out of the advisor
                box["result"] = _failure(self._describe(e, url, timeout))

        t = threading.Thread(target=work, name="asap-llm", daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive() or "result" not in box:
            return _failure(f"{url} did not answer within {timeout:g} s (timed out)")
        return box["result"]

    def _post(self, url: str, data: bytes, timeout: float) -> bytes:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        req = urllib.request.Request(url, data=data, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - scheme checked above
            body = resp.read(MAX_RESPONSE_BYTES + 1)
        if len(body) > MAX_RESPONSE_BYTES:
            raise _Failure(f"the response is larger than {MAX_RESPONSE_BYTES} bytes")
        return body

    @staticmethod
    def _describe(e: BaseException, url: str, timeout: float) -> str:
        if isinstance(e, urllib.error.HTTPError):
            detail = ""
            with contextlib.suppress(Exception):  # an unreadable error body: the status line alone
                raw = e.read(2000).decode("utf-8", errors="replace")
                try:
                    err = json.loads(raw).get("error", raw)
                    detail = err.get("message", err) if isinstance(err, dict) else err
                except (ValueError, AttributeError):
                    detail = raw
            return f"{url} answered HTTP {e.code} {e.reason}" + (f": {detail}" if detail else "")
        if isinstance(e, TimeoutError) or (isinstance(e, urllib.error.URLError)
                                           and isinstance(e.reason, TimeoutError)):
            return f"{url} did not answer within {timeout:g} s (timed out)"
        if isinstance(e, urllib.error.URLError):
            return f"cannot reach {url}: {e.reason}"
        return f"{url}: {type(e).__name__}: {e}"
