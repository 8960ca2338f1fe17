"""``asap balance`` on real document lengths: the whitespace word counts of text installed on this machine
(the licenses under /usr/share/common-licenses and the Python standard library's own .py files)."""

from __future__ import annotations

import json

import pytest

from asap.balance import (attention_cost_coefficients, balance, offline_document_lengths, pack, parse_samples,
                          sample_costs)
from asap.errors import AsapError
from conftest import assert_one_line_error

SEQ_LEN = 8192
DP, MB = 8, 4


@pytest.fixture(scope="module")
def corpus():
    lengths = offline_document_lengths(600)
    samples = pack(lengths, SEQ_LEN)
    k = len(samples) // (DP * MB)
    assert k >= 3, f"only {len(samples)} packed samples from this machine's files"
    return lengths, samples[: k * DP * MB]


def test_packing_is_first_fit_decreasing(corpus):
    lengths, _ = corpus
    samples = pack(lengths, SEQ_LEN)
    assert all(0 < sum(s) <= SEQ_LEN for s in samples)
    # every token is packed once: long documents split into seq_len chunks plus a remainder
    assert sum(map(sum, samples)) == sum(lengths)
    pieces = sorted((x for s in samples for x in s), reverse=True)
    expected = sorted([SEQ_LEN] * sum(n // SEQ_LEN for n in lengths) + [n % SEQ_LEN for n in lengths if n % SEQ_LEN],
                      reverse=True)
    assert pieces == expected
    # the same bins as a plain first-fit-decreasing scan over the open bins (the segment tree is only faster)
    bins, room = [], []
    for x in sorted((n % SEQ_LEN for n in lengths if n % SEQ_LEN), reverse=True):
        k = next((i for i, r in enumerate(room) if r >= x), None)
        if k is None:
            bins.append([x])
            room.append(SEQ_LEN - x)
        else:
            bins[k].append(x)
            room[k] -= x
    assert samples == [[SEQ_LEN]] * sum(n // SEQ_LEN for n in lengths) + bins


def test_balanced_beats_round_robin_on_real_lengths(corpus):
    _, samples = corpus
    coef = attention_cost_coefficients()
    assert coef.default and coef.model == "llama3-8b" and coef.a > 0 and coef.b > 0
    r = balance(samples, DP, MB, coef)
    before, after = r["before"], r["after"]
    assert after["max_over_mean"] <= 1.05
    assert before["max_over_mean"] > after["max_over_mean"]
    assert after["max_s"] < before["max_s"]
    assert r["predicted_gain"] == pytest.approx(1 - after["max_s"] / before["max_s"])
    assert r["predicted_gain"] > 0
    # the same total work, only moved
    assert after["mean_s"] == pytest.approx(before["mean_s"])
    a = r["assignment"]
    assert len(a) == DP * MB
    size = len(samples) // (DP * MB)
    assert r["micro_batch_size"] == size and all(len(s) == size for s in a)
    placed = sorted(i for s in a for i in s)
    assert placed == list(range(len(samples)))
    # the reported loads are what the assignment adds up to
    costs = sample_costs(samples, coef)
    ranks = [sum(costs[i] for k in range(MB) for i in a[rk * MB + k]) for rk in range(DP)]
    assert max(ranks) == pytest.approx(after["max_s"])
    # deterministic
    assert balance(samples, DP, MB, coef)["assignment"] == a


def test_cost_is_attention_quadratic_plus_linear():
    coef = attention_cost_coefficients()
    one, split = sample_costs([[SEQ_LEN], [SEQ_LEN // 2, SEQ_LEN // 2]], coef)
    # the same tokens: one long document costs a * L^2 / 2 more attention than two halves
    assert one - split == pytest.approx(coef.a * SEQ_LEN ** 2 / 2)
    # a bigger model costs more per token
    assert attention_cost_coefficients("llama3-70b").b > coef.b


def test_bad_inputs_in_the_api():
    for data, needle in (({"a": 1}, "list"), ([], "empty"), ([1, -2], "document 1"), ([1, 2.5], "document 1"),
                         ([[1], 2], "mixes"), ([[1], []], "sample 1"), ([[9000]], "more than"),
                         ([True], "document 0")):
        with pytest.raises(AsapError) as e:
            parse_samples(data, SEQ_LEN)
        assert e.value.field == "lengths" and needle in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(AsapError) as e:
        balance([[1]] * 33, DP, MB)
    assert e.value.field == "lengths" and "33" in str(e.value) and "32" in str(e.value)


def test_cli_json_contract(corpus, tmp_path, cli):
    lengths, samples = corpus
    f = tmp_path / "samples.json"
    f.write_text(json.dumps(samples))
    p = cli("balance", "--lengths", f, "--dp", DP, "--micro-batches", MB, "--seq-len", SEQ_LEN, "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert {"before", "after", "assignment", "coefficients", "predicted_gain"} <= set(out)
    assert out["before"]["max_over_mean"] > out["after"]["max_over_mean"]
    assert out["after"]["max_over_mean"] <= 1.05
    assert len(out["assignment"]) == DP * MB and len({len(s) for s in out["assignment"]}) == 1
    assert sorted(i for s in out["assignment"] for i in s) == list(range(len(samples)))
    assert out["coefficients"]["model"] == "llama3-8b" and out["coefficients"]["default"] is True
    # a flat list of documents is packed first; a named model says so
    docs = tmp_path / "docs.json"
    n_docs = [SEQ_LEN] * 16 + [SEQ_LEN // 2] * 32  # packs into exactly 32 samples
    docs.write_text(json.dumps(n_docs))
    p = cli("balance", "--lengths", docs, "--dp", 4, "--micro-batches", 2, "--seq-len", SEQ_LEN,
            "--model", "llama3-70b", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["packed"] is True and out["samples"] == 32 and out["coefficients"]["model"] == "llama3-70b"
    assert out["coefficients"]["default"] is False
    # human output: a table
    p = cli("balance", "--lengths", f, "--dp", DP, "--micro-batches", MB, "--seq-len", SEQ_LEN)
    assert p.returncode == 0, p.stderr
    assert "before" in p.stdout and "after" in p.stdout and "llama3-8b" in p.stdout


def test_cli_bad_inputs(tmp_path, cli):
    def run(content, *extra, dp=8, mb=4):
        f = tmp_path / "x.json"
        f.write_text(content if isinstance(content, str) else json.dumps(content))
        return cli("balance", "--lengths", f, "--dp", dp, "--micro-batches", mb, "--seq-len", SEQ_LEN, "--json",
                   *extra)

    assert_one_line_error(run({"samples": []}), "lengths")
    assert_one_line_error(run([]), "lengths", "empty")
    assert_one_line_error(run([5, 0, 3]), "lengths", "document 1")
    assert_one_line_error(run([5, "x"]), "lengths", "document 1")
    assert_one_line_error(run([[5], 3]), "lengths", "mixes")
    assert_one_line_error(run([[100]] * 33), "lengths", "33", "32")
    assert_one_line_error(run("[1, 2"), "lengths", "not JSON")
    assert_one_line_error(run([[100]] * 32, dp=0), "dp")
    assert_one_line_error(run([[100]] * 32, "--model", "no-such-model"), "model")
    assert_one_line_error(cli("balance", "--lengths", tmp_path / "missing.json", "--dp", 1, "--micro-batches", 1,
                              "--seq-len", 8, "--json"), "lengths", "no such file")
    assert_one_line_error(cli("balance", "--dp", 1, "--micro-batches", 1, "--seq-len", 8, "--json"), "lengths")
