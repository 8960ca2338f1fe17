"""Fuzzing the trace readers with mutated real traces (Kineto from ../shared/traces, read in place; JAX recorded
here): truncated, reordered, fields missing, wrong types, huge numbers, NaN, negative durations, unicode names.

The rule: a one-line ``AsapError``, or a diagnosis whose figures are finite and within their ranges; a reordered
trace gives the same diagnosis as the original (the reader sorts, it does not trust the file's order).
"""

from __future__ import annotations

import gzip
import json
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import SHARED
from test_fuzz_specs import FUZZ, _cleanup, _write, clean_call

from asap.profile import diagnose

pytestmark = pytest.mark.fuzz

HTA = SHARED / "traces" / "hta"
TRACES = {name: json.loads(gzip.decompress((HTA / name).read_bytes()))
          for name in ("amd_trace_mi250_minitoy_train_ROCm6_2_kineto.json.gz", "trace_filter_sampled_rank-0.json.gz")}
FIELDS = ("ph", "cat", "name", "ts", "dur", "pid", "tid", "args")
NASTY = [None, -1, -1e12, 0, 1e308, float("nan"), float("inf"), "12", "名前\u202e", [], {}, True, 2 ** 70]


def check_diagnosis(d) -> None:
    """What a diagnosis presented as right must hold."""
    for key in ("step_time_s", "compute_s", "communication_s", "exposed_communication_s", "idle_s"):
        v = getattr(d, key)
        assert math.isfinite(v) and v >= 0, f"{key} = {v!r}"
    assert d.step_time_s > 0
    assert 0.0 <= d.busy_fraction <= 1.0 + 1e-9, d.busy_fraction
    for op in d.top_ops:
        assert math.isfinite(op.time_s) and op.time_s >= 0 and math.isfinite(op.share), op


def diagnose_doc(doc, raw: bytes | None = None):
    """Write the document (or raw bytes) to a temporary file, diagnose it; (diagnosis or None, error or None)."""
    data = raw if raw is not None else json.dumps(doc).encode()
    p = _write(data, "trace.json")
    try:
        d, err = clean_call(diagnose, [p])
    finally:
        _cleanup(p)
    if err is None:
        check_diagnosis(d)
    return d, err


def mutate(doc: dict, seed: int, n_edits: int, value) -> dict:
    """Set (or remove, when ``value`` is the sentinel "<del>") one field of ``n_edits`` random events."""
    rng = random.Random(seed)
    events = [dict(e) if isinstance(e, dict) else e for e in doc["traceEvents"]]
    for _ in range(n_edits):
        i = rng.randrange(len(events))
        if not isinstance(events[i], dict):
            continue
        key = rng.choice(FIELDS)
        if value == "<del>":
            events[i].pop(key, None)
        else:
            events[i][key] = value
    return {**doc, "traceEvents": events}


trace_names = st.sampled_from(sorted(TRACES))


@FUZZ
@given(trace_names, st.integers(0, 2 ** 32), st.integers(1, 50),
       st.sampled_from(NASTY + ["<del>"]) | st.text(max_size=8) | st.floats())
def test_kineto_fields_fuzz(name, seed, n_edits, value):
    diagnose_doc(mutate(TRACES[name], seed, n_edits, value))


@FUZZ
@given(trace_names, st.floats(0.0, 1.0))
def test_kineto_truncated_fuzz(name, fraction):
    raw = json.dumps(TRACES[name]).encode()
    cut = raw[:int(len(raw) * fraction)]
    d, err = diagnose_doc(None, cut if cut else b" ")
    if fraction < 0.999:
        assert err is not None  # a cut JSON document never parses: refused, not half-read


@FUZZ
@given(trace_names, st.integers(0, 2 ** 32))
def test_kineto_reordered_fuzz(name, seed):
    doc = TRACES[name]
    events = list(doc["traceEvents"])
    random.Random(seed).shuffle(events)
    base, _ = diagnose_doc(doc)
    d, err = diagnose_doc({**doc, "traceEvents": events})
    assert err is None
    assert d.step_time_s == pytest.approx(base.step_time_s, rel=1e-9)
    assert d.compute_s == pytest.approx(base.compute_s, rel=1e-6)
    assert d.communication_s == pytest.approx(base.communication_s, rel=1e-6)


@FUZZ
@given(st.binary(max_size=64) | st.sampled_from([b"[]", b"{}", b'{"traceEvents": 5}', b'{"traceEvents": [1, "x"]}',
                                                 b'[{"ph": "X"}]', b"\x1f\x8b\x08\x00", gzip.compress(b"[{")]))
def test_trace_bytes_fuzz(raw):
    d, err = diagnose_doc(None, raw or b" ")
    assert err is not None or d.step_time_s > 0
