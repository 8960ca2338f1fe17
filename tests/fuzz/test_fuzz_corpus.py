"""Replay tests/fuzz_corpus/*.json: inputs that once broke a reader (a traceback, a hang, a memory blow-up), each
run through the same check the fuzz tests apply; entries with ``"cli"`` also go through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_cli
from test_fuzz_specs import READERS, SMALL_CASE, _cleanup, _write, check_case, clean_call

CORPUS = Path(__file__).parents[1] / "fuzz_corpus"
ENTRIES = sorted(CORPUS.glob("*.json"))


def _case_edit(edits):
    case = json.loads(json.dumps(SMALL_CASE))
    for key, remove, value in edits:
        target = case
        if "." in key:
            outer, key = key.split(".", 1)
            target = case[outer]
        target.pop(key, None) if remove else target.__setitem__(key, value)
    check_case(case)


REPLAY = {**READERS, "case_edit": _case_edit,
          "model_file_hex": lambda raw, suffix: READERS["model_file"](bytes.fromhex(raw), suffix),
          "cases_file_hex": lambda raw: _cases_bytes(bytes.fromhex(raw)), "trace_events": lambda ev: _trace_events(ev)}


def _trace_events(events) -> None:
    from test_fuzz_traces import diagnose_doc

    diagnose_doc({"schemaVersion": 1, "traceEvents": events})


def _cases_bytes(raw: bytes) -> None:
    from asap.validate import load_cases

    p = _write(raw, "cases.json")
    try:
        _, err = clean_call(load_cases, p)
    finally:
        _cleanup(p)
    assert err is not None


def test_corpus_is_not_empty():
    assert len(ENTRIES) >= 5


@pytest.mark.parametrize("path", ENTRIES, ids=[p.stem for p in ENTRIES])
def test_corpus_entry(path):
    entry = json.loads(path.read_text())
    if entry["reader"] not in REPLAY:
        pytest.skip(f"replayed by another file ({entry['reader']})")
    REPLAY[entry["reader"]](*entry["args"])


CLI_ENTRIES = [p for p in ENTRIES if "cli" in json.loads(p.read_text())]


@pytest.mark.parametrize("path", CLI_ENTRIES, ids=[p.stem for p in CLI_ENTRIES])
def test_corpus_entry_through_cli(path, tmp_path):
    """A cluster file that once hung ``plan`` is refused in one line, quickly, naming the field."""
    entry = json.loads(path.read_text())
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(entry["args"][0]))
    proc = run_cli("plan", "-m", "llama3-8b", "-c", cluster, "-b", 64, "-s", 2048, "--json", timeout=60)
    assert proc.returncode == 2
    assert_one_line_error(proc, "cluster.")
