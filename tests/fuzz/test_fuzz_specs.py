"""Property-based fuzzing of every spec reader: native model files, HF configs, cluster files, strategy strings,
case files (validate --cases) and lengths files (asap.balance).

The rule for every generated input: a clean one-line ``AsapError`` naming a field, or an answer that holds up
(finite, positive, within the bounds the reader promises); never another exception. Inputs that once broke
a reader live in tests/fuzz_corpus/ and are replayed by tests/fuzz/test_fuzz_corpus.py through ``READERS``.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asap.balance import parse_samples, read_lengths
from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
from asap.errors import AsapError
from asap.spec.hardware import MAX_DEVICES, load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.model import ModelSpec
from asap.spec.strategy import KEYS, parse_strategy, resolve_strategy
from asap.spec.train import TrainSpec
from asap.validate import load_cases, validate_case

pytestmark = pytest.mark.fuzz

# ----------------------------------------------------------------------------------------------------------
# The rule
# ----------------------------------------------------------------------------------------------------------


def clean_call(fn: Callable[..., Any], *args) -> tuple[Any, AsapError | None]:
    """(result, None) or (None, the AsapError); any other exception fails the test, with the input shown."""
    try:
        return fn(*args), None
    except AsapError as e:
        text = str(e)
        assert text and "\n" not in text, f"AsapError is not one line: {text!r}"
        assert e.field or e.problem, text
        return None, e


def finite_positive(x: float, what: str) -> None:
    assert isinstance(x, (int, float)) and math.isfinite(x) and x > 0, f"{what} = {x!r}"


# ----------------------------------------------------------------------------------------------------------
# Generated values: what a hand-edited or corrupt YAML/JSON file can hold
# ----------------------------------------------------------------------------------------------------------

NASTY = [0, -1, 1, 2, 3, 7, 1e308, -1e308, 1.5, 2 ** 63, 2 ** 64 + 1, 10 ** 30, "", "8", "1e308", "nan", "inf",
         "名前", "\u202e", "x" * 300, True, False, None, [], {}, [1, 2], {"a": 1}]
scalars = (st.none() | st.booleans() | st.integers(min_value=-2 ** 70, max_value=2 ** 70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12) | st.sampled_from(NASTY))
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                                         max_size=3), max_leaves=6)


def mutated(base: dict, extra_keys: tuple[str, ...] = ()) -> st.SearchStrategy[dict]:
    """The base mapping with 1-3 of its fields (or of ``extra_keys``, or of a nested mapping) set to a generated
    value or removed."""
    keys = sorted(base) + list(extra_keys)

    def apply(edits: list[tuple[str, bool, Any]]) -> dict:
        d = json.loads(json.dumps(base))
        for key, remove, value in edits:
            target = d
            if "." in key:
                outer, key = key.split(".", 1)
                if not isinstance(d.get(outer), dict):
                    continue
                target = d[outer]
            if remove:
                target.pop(key, None)
            else:
                target[key] = value
        return d

    nested = [f"{k}.{n}" for k, v in base.items() if isinstance(v, dict) for n in v]
    edit = st.tuples(st.sampled_from(keys + nested), st.booleans(), json_values)
    return st.lists(edit, min_size=1, max_size=3).map(apply)


# examples per fuzz test: a few by default (the whole suite stays quick); the fuzz job sets ASAP_FUZZ_EXAMPLES
# (e.g. 1000: over 10,000 generated inputs across the readers)
FUZZ_EXAMPLES = int(os.environ.get("ASAP_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])

# ----------------------------------------------------------------------------------------------------------
# Readers: each takes one input and checks the rule (these are what the corpus replays)
# ----------------------------------------------------------------------------------------------------------

SMALL_CLUSTER = load_cluster("h100-sxm")  # 8 devices: a quick price of an accepted model
SMALL_TRAIN = TrainSpec(8, 2048)


def check_model(d: Any) -> None:
    """A native model mapping or an HF config.json: refused in one line, or a model that prices finitely."""
    m, err = clean_call(load_model, d)
    if err is not None:
        return
    assert isinstance(m, ModelSpec)
    finite_positive(m.num_params(), "num_params")
    assert m.num_active_params() <= m.num_params()
    est, err = clean_call(lambda model: estimate(Job.resolve(model, SMALL_CLUSTER, SMALL_TRAIN), "tp=1,pp=1"), m)
    if err is None:
        finite_positive(est.step_time_s, "step_time_s")
        finite_positive(est.peak_memory_gb, "peak_memory_gb")


def check_cluster(d: Any) -> None:
    c, err = clean_call(load_cluster, d)
    if err is not None:
        return
    assert 1 <= c.num_devices <= MAX_DEVICES
    finite_positive(c.hbm_gb, "hbm_gb")
    finite_positive(c.topology.domain_size, "scale_up_domain")


def check_strategy_text(text: Any) -> None:
    parsed, err = clean_call(parse_strategy, text)
    if err is not None:
        return
    assert set(parsed) <= set(KEYS)
    m = load_model("llama3-8b")
    s, err = clean_call(resolve_strategy, text, m, SMALL_TRAIN, 64)
    if err is None:
        assert s.dp * s.tp * s.pp * s.cp == 64
        # the strategy's own string reads back as the same strategy
        assert resolve_strategy(str(s), m, SMALL_TRAIN, 64) == s


def _write(text: str | bytes, name: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix="asap-fuzz-"))
    p = d / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    return p


def _cleanup(p: Path) -> None:
    p.unlink(missing_ok=True)
    p.parent.rmdir()


def check_cases_text(text: str) -> None:
    """A --cases file: refused in one line, or every case priced to a finite error (or refused in one line)."""
    p = _write(text, "cases.json")
    try:
        cases, err = clean_call(load_cases, p)
    finally:
        _cleanup(p)
    if err is not None:
        return
    assert isinstance(cases, list) and cases
    for i, case in enumerate(cases[:3]):
        if not isinstance(case, dict):
            continue
        r, err = clean_call(validate_case, case, i)
        if err is None:
            finite_positive(r.predicted_step_time_s, "predicted_step_time_s")
            assert math.isfinite(r.error)


def check_case(case: Any) -> None:
    check_cases_text(json.dumps([case]))


def check_lengths(data: Any, seq_len: Any = 4096) -> None:
    """A --lengths document: refused in one line, or samples each within seq_len tokens, every document kept."""
    out, err = clean_call(parse_samples, data, seq_len)
    if err is not None:
        return
    samples, packed = out
    assert samples and all(s and sum(s) <= seq_len and min(s) > 0 for s in samples)
    if packed:  # every token kept (a document longer than seq_len is split into whole samples and a rest)
        assert sum(x for s in samples for x in s) == sum(data)


def check_lengths_file(raw: bytes) -> None:
    p = _write(raw, "lengths.json")
    try:
        data, err = clean_call(read_lengths, p)
    finally:
        _cleanup(p)
    if err is None:
        check_lengths(data)


def check_model_file(raw: bytes, suffix: str = ".yaml") -> None:
    """A model file's bytes (YAML or JSON by suffix), through ``--model PATH``."""
    p = _write(raw, "model" + suffix)
    try:
        clean_call(load_model, str(p))
    finally:
        _cleanup(p)


READERS: dict[str, Callable[..., None]] = {
    "model": check_model, "cluster": check_cluster, "strategy": check_strategy_text, "case": check_case,
    "cases_text": check_cases_text, "lengths": check_lengths, "lengths_file": check_lengths_file,
    "model_file": lambda raw, suffix=".yaml": check_model_file(raw.encode("utf-8", "surrogatepass")
                                                               if isinstance(raw, str) else raw, suffix),
}

# ----------------------------------------------------------------------------------------------------------
# Bases: real inputs the mutations start from
# ----------------------------------------------------------------------------------------------------------

NATIVE = {"name": "fuzz", "num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8,
          "num_kv_heads": 4, "vocab_size": 1000, "activation": "swiglu", "tie_embeddings": False,
          "moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 512, "shared_experts": 1,
                  "first_dense_layers": 1},
          "mla": {"q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                  "v_head_dim": 16}}
HF = {"model_type": "qwen3_moe", "num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 1024,
      "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32, "vocab_size": 1000,
      "hidden_act": "silu", "tie_word_embeddings": False, "num_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 512}
CLUSTER = {"accelerator": "h100-sxm", "devices_per_node": 8, "nodes": 2, "hbm_gb": 80, "intra_node_gbps": 450,
           "inter_node_gbps": 50, "scale_up_domain": 8}
CUSTOM_CLUSTER = {"accelerator": {"name": "x", "family": "hopper", "peak_tflops": {"bf16": 900, "fp8": 1800},
                                  "hbm_gb": 80, "hbm_gbps": 3000}, "devices_per_node": 4, "nodes": 1}
SMALL_CASE = min((c for c in load_cases()), key=lambda c: c["cluster"].get("nodes", 1) * 8)


@FUZZ
@given(mutated(NATIVE, ("mtp_layers", "head_dim", "extra")))
def test_native_model_fuzz(d):
    check_model(d)


@FUZZ
@given(mutated(HF, ("model_type", "n_layer", "q_lora_rank", "kv_lora_rank", "first_k_dense_replace")))
def test_hf_config_fuzz(d):
    check_model(d)


@FUZZ
@given(st.sampled_from(["gpt2", "gpt_neox", "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
                        "qwen3_moe", "deepseek_v2", "deepseek_v3"]).flatmap(
    lambda mt: mutated({**HF, "model_type": mt, "n_layer": 4, "n_embd": 256, "n_head": 8, "kv_lora_rank": 32,
                        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8})))
def test_hf_config_every_type_fuzz(d):
    check_model(d)


@FUZZ
@given(mutated(CLUSTER, ("efficiency", "measured", "name")) | mutated(CUSTOM_CLUSTER))
def test_cluster_fuzz(d):
    check_cluster(d)


STRATEGY_ATOMS = st.sampled_from(list(KEYS) + ["=", ",", "/", " ", "1", "2", "8", "0", "-1", "1e308", "full",
                                               "selective", "interleaved", "dedup", "x", "名", "5/4/4/3"])


@FUZZ
@given(st.lists(STRATEGY_ATOMS, max_size=12).map("".join) | st.text(max_size=30)
       | st.dictionaries(st.sampled_from(list(KEYS)), json_values, max_size=4))
def test_strategy_fuzz(text):
    check_strategy_text(text)


@FUZZ
@given(mutated(SMALL_CASE, ("published", "strategy")))
def test_case_fuzz(case):
    check_case(case)


@FUZZ
@given(st.text(max_size=60) | st.lists(json_values, max_size=3).map(json.dumps))
def test_cases_file_fuzz(text):
    check_cases_text(text)


lengths_items = st.integers(min_value=-5, max_value=5000) | st.sampled_from(NASTY)


@FUZZ
@given(st.lists(lengths_items, max_size=20) | st.lists(st.lists(lengths_items, max_size=5), max_size=8)
       | json_values, st.sampled_from([4096, 1, 0, -1, 4096.0, True, "4096"]))
def test_lengths_fuzz(data, seq_len):
    check_lengths(data, seq_len)


@FUZZ
@given(st.binary(max_size=40) | st.lists(lengths_items, max_size=10).map(lambda v: json.dumps(v).encode())
       | st.text(max_size=30).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_lengths_file_fuzz(raw):
    check_lengths_file(raw)


@FUZZ
@given(st.binary(max_size=60) | st.text(max_size=60).map(lambda t: t.encode("utf-8", "surrogatepass"))
       | mutated(NATIVE).map(lambda d: json.dumps(d).encode()), st.sampled_from([".yaml", ".json"]))
def test_model_file_fuzz(raw, suffix):
    check_model_file(raw, suffix)
