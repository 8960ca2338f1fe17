"""``asap schedule``: the text timeline, the JSON contract, a well-formed SVG, one-line errors."""

import json
import xml.etree.ElementTree as ET

import pytest

from conftest import assert_one_line_error

SVG_NS = "{http://www.w3.org/2000/svg}"


def test_text_timeline_draws_a_row_per_device(cli):
    p = cli("schedule", "--pp", "4", "--micro-batches", "8")
    assert p.returncode == 0, p.stderr
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("rank")]
    assert len(rows) == 4
    assert "F0" in rows[0] and "B7" in rows[0]
    assert rows[3].split()[2].startswith(".........F0")  # the last stage waits 3 forwards (3 chars each)
    assert "1f1b" in p.stdout and "step 33 s" in p.stdout and "37.50%" in p.stdout


def test_json_contract(cli):
    p = cli("schedule", "--pp", "4", "--vpp", "2", "--micro-batches", "8", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert {"schedule", "pp", "vpp", "micro_batches", "step_time_s", "bubble_fraction", "peak_in_flight",
            "timeline"} <= set(d)
    assert d["schedule"] == "interleaved" and (d["pp"], d["vpp"], d["micro_batches"]) == (4, 2, 8)
    assert d["step_time_s"] == pytest.approx(3.0 * 8 * (1 + 3 / 16))  # stage time 3 s, bubble (pp-1)/(vpp m)
    assert d["bubble_fraction"] == pytest.approx(3 / 16)
    assert d["peak_in_flight"][0] == (4 - 1) * 2 + (2 - 1) * 4 + 1
    assert len(d["timeline"]) == 2 * 4 * 2 * 8
    op = d["timeline"][0]
    assert set(op) == {"device", "kind", "micro_batch", "chunk", "start_s", "end_s"}
    assert op["kind"] == "F" and op["start_s"] == 0.0


def test_zb_json_has_weight_gradient_ops_and_a_smaller_bubble(cli):
    zb = json.loads(cli("schedule", "--pp", "4", "--micro-batches", "8", "--schedule", "zb", "--json").stdout)
    one = json.loads(cli("schedule", "--pp", "4", "--micro-batches", "8", "--schedule", "1f1b", "--json").stdout)
    assert {op["kind"] for op in zb["timeline"]} == {"F", "B", "W"}
    assert zb["bubble_fraction"] == pytest.approx(one["bubble_fraction"] / 3)


def test_svg_is_well_formed_and_json_stays_one_document(cli, tmp_path):
    out = tmp_path / "timeline.svg"
    p = cli("schedule", "--pp", "4", "--micro-batches", "8", "--schedule", "zb", "--forward-s", "1.5", "--backward-s", "3",
            "--svg", out, "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)  # exactly one JSON document even with --svg
    root = ET.parse(out).getroot()
    assert root.tag == f"{SVG_NS}svg"
    rects = root.findall(f"{SVG_NS}rect")
    # background, one lane per device, one per op, the legend swatches
    assert len(rects) >= len(d["timeline"]) + 4
    texts = [t.text for t in root.iter(f"{SVG_NS}text")]
    assert "time (s)" in texts and "rank 3" in texts and "0" in texts


def test_svg_without_json_draws_text_too(cli, tmp_path):
    out = tmp_path / "gpipe.svg"
    p = cli("schedule", "--pp", "2", "--micro-batches", "3", "--schedule", "gpipe", "--svg", out)
    assert p.returncode == 0, p.stderr
    assert "rank   1" in p.stdout and str(out) in p.stderr
    ET.parse(out)


@pytest.mark.parametrize("args, needles", [
    (["--pp", "4", "--vpp", "2", "--micro-batches", "6"], ["micro-batches", "multiple of pp"]),
    (["--pp", "4", "--micro-batches", "8", "--schedule", "interleaved"], ["vpp", "vpp > 1"]),
    (["--pp", "4", "--vpp", "2", "--micro-batches", "8", "--schedule", "1f1b"], ["vpp"]),
    (["--pp", "4", "--micro-batches", "8", "--schedule", "dualpipe"], ["schedule", "unknown"]),
    (["--pp", "0", "--micro-batches", "8"], ["pp", "positive"]),
    (["--pp", "4", "--micro-batches", "8", "--forward-s", "-1"], ["forward-s", "positive"]),
    (["--pp", "4", "--micro-batches", "8", "--svg", "/nonexistent-dir/x.svg"], ["svg", "cannot write"]),
    (["--pp", "4"], ["micro-batches"]),
])
def test_bad_input_is_one_line_exit_2(cli, args, needles):
    p = cli("schedule", *args)
    assert p.returncode == 2
    assert_one_line_error(p, *needles)
