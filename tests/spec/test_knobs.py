"""The knob table (``asap.spec.knobs.KNOBS``) is the one place a strategy key is declared: ``Strategy``'s
fields, every key list, the batch columns and their codes, the compact notation and the README's key list
follow from it."""

from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from asap.spec.batch import StrategyBatch
from asap.spec.knobs import (COLUMNS, INT_KEYS, KEYS, KNOB, KNOBS, OFF_BY_DEFAULT, PRINTED_UNLESS, SWITCH_KEYS,
                             KnobKind, keys_markdown, strategy_columns)
from asap.spec.strategy import Strategy, format_compact, parse_strategy, resolve_strategy
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec

README = Path(__file__).resolve().parents[2] / "README.md"


def test_strategy_fields_are_the_table():
    assert [f.name for f in fields(Strategy)] == [k.name for k in KNOBS]
    assert list(KEYS) == [k.name for k in KNOBS]
    assert set(INT_KEYS) == {k.name for k in KNOBS if k.kind in (KnobKind.DEGREE, KnobKind.COUNT, KnobKind.LEVEL,
                                                                 KnobKind.SWITCH)}
    assert set(SWITCH_KEYS) <= set(INT_KEYS) and set(OFF_BY_DEFAULT) <= set(KEYS) and set(PRINTED_UNLESS) <= set(KEYS)


def test_readme_lists_every_key_as_the_table_does():
    text = README.read_text()
    start = text.index("<!-- strategy-keys: generated from asap.spec.knobs.KNOBS -->\n")
    block = text[text.index("\n", start) + 1:text.index("<!-- /strategy-keys -->")].strip()
    assert block == keys_markdown()
    for name in ("dp_replicate", "grad_bf16", "offload_act", "offload_opt", "offload_layers", "fp8_param", "cp_comm"):
        assert f"`{name}`" in block


@pytest.mark.parametrize("text", ["tp=8,pp=2,vpp=2,recompute=layernorm+moe_act,zero=1,dispatcher=dedup,a2a_overlap=1",
                                  "tp=2,cp=2,cp_comm=a2a,dp_replicate=2,grad_bf16=1,offload_opt=1",
                                  "pp=4,layer_split=5/4/4/3,offload_act=1,offload_layers=3,schedule=zb,vpp=1"])
def test_batch_codes_round_trip_every_knob(text):
    """Each knob's batch code (``Knob.code``) decodes to the value, for a batch and for the rules' one row."""
    s = Strategy(**{"dp": 4, **parse_strategy(text)})
    S = StrategyBatch.from_strategies([s, s])
    assert tuple(S.keys()) == COLUMNS and len(S) == 2
    assert S.strategy(1) == s
    single = strategy_columns(s)
    for k in KNOBS:
        if k.kind is not KnobKind.SPLIT:
            assert single[k.column][0] == S[k.column][0] == k.code(getattr(s, k.name))
            assert k.decode(k.code(getattr(s, k.name))) == getattr(s, k.name)


def test_a_batch_without_a_column_holds_the_default_code():
    S = StrategyBatch(dp=np.array([8]), tp=np.array([2]))
    s = S.strategy(0)
    assert s == Strategy(dp=8, tp=2)
    assert S.cp_comm[0] == KNOB["cp_comm"].default_code == 0 and S.dp_replicate[0] == 1


def test_compact_notation_reads_what_it_prints():
    model, train = load_model("llama3-70b"), TrainSpec(256, 8192)
    s = resolve_strategy("tp8 pp2 vpp2 rc:sel gradbf1 dprep2", model, train, 64)
    text = format_compact(s, 64)
    assert "gradbf1" in text and "dprep2" in text and "rc:sel" in text
    assert resolve_strategy(text, model, train, 64) == s
