"""What a user notices on first use: version, near-miss names, help without noise, readable headlines, one
MFU definition, no solver banner, and the next command when something does not fit."""

from __future__ import annotations

import json

import pytest

from asap import __version__
from conftest import assert_one_line_error, run_cli


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"asap {__version__}"


def test_bare_asap_prints_help_without_an_error():
    proc = run_cli()
    assert proc.returncode == 0
    assert "Usage" in proc.stdout and "error" not in proc.stderr


@pytest.mark.parametrize("args, field, suggestion", [
    (["-m", "llama3-70", "-c", "h100-sxm"], "model", "'llama3-70b'"),
    (["-m", "llama3-8b", "-c", "h100"], "cluster", "'h100-sxm'"),
    (["-m", "llama3-8b", "-c", "dgx-h100-8nodes"], "cluster", "'dgx-h100-8node'"),
])
def test_did_you_mean(args, field, suggestion):
    proc = run_cli("estimate", *args, "-b", "8", "-s", "1024")
    assert_one_line_error(proc, field, "did you mean", suggestion)
    assert not proc.stderr.startswith("\n")


def test_flags_show_no_bool_metavar():
    for command in ("run", "plan", "tune", "estimate"):
        proc = run_cli(command, "--help")
        assert proc.returncode == 0
        assert "<bool>" not in proc.stdout, command


def test_old_preset_names_still_load_and_new_ones_say_their_unit():
    old = json.loads(run_cli("estimate", "-m", "llama3-8b", "-c", "dgx-h100-8", "-b", "64", "-s", "1024",
                             "--json").stdout)
    new = json.loads(run_cli("estimate", "-m", "llama3-8b", "-c", "dgx-h100-8node", "-b", "64", "-s", "1024",
                             "--json").stdout)
    assert old["step_time_s"] == new["step_time_s"]


def test_presets_show_counts_topology_and_the_catalog():
    out = run_cli("presets").stdout
    assert "722K" in out  # tiny-dense's parameter count, not "0.00 B"
    assert "8 x 8" in out and "dgx-h100-8node" in out  # nodes x devices per node
    assert "NVIDIA H100 datasheet" in out and "accelerator catalog" in out


def test_mfu_has_one_denominator_the_bf16_peak():
    def est(precision):
        return json.loads(run_cli("estimate", "-m", "llama3-8b", "-c", "h100-sxm", "-b", "64", "-s", "4096",
                                  "-S", "tp=2", "--precision", precision, "--json").stdout)

    bf16_peak = 989e12  # H100 SXM dense bf16 (the catalog's datasheet figure)
    for precision, own_peak in (("fp32", bf16_peak / 2), ("fp8", 1979e12)):
        e = est(precision)
        assert e["mfu"] == pytest.approx(e["model_tflops_per_device"] * 1e12 / bf16_peak)
        assert e["precision_peak_utilization"] == pytest.approx(e["model_tflops_per_device"] * 1e12 / own_peak,
                                                                rel=1e-3)
    assert "precision_peak_utilization" not in est("bf16")


def test_estimate_headline_and_what_to_do_when_it_does_not_fit():
    proc = run_cli("estimate", "-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "64", "-s", "4096")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert "no --strategy: the defaults" in lines[0]
    assert lines[1].startswith("step ") and "tokens/s" in lines[1] and "MFU" in lines[1]  # one line, unwrapped
    assert "DOES NOT FIT" in lines[2]
    assert any(ln.startswith("does not fit: needs") and "largest terms: grads" in ln for ln in lines)
    assert any(ln.startswith("next: asap plan -m llama3-70b -c dgx-h100-8node -b 64 -s 4096") for ln in lines)


def test_plan_prints_no_solver_banner_and_no_blank_first_line():
    proc = run_cli("plan", "-m", "llama3.1-405b", "-c", "h800-256node", "-b", "2048", "-s", "4096", "--fix", "pp=8",
                   "--split-candidates", "2", "--top", "3")
    assert proc.returncode == 0, proc.stderr
    assert "Running HiGHS" not in proc.stdout + proc.stderr and "Copyright" not in proc.stdout + proc.stderr
    assert proc.stderr.strip() == "" and proc.stdout.startswith("llama3.1-405b")


def test_plan_rows_are_distinct_shapes_unless_all():
    base = ["plan", "-m", "llama3-8b", "-c", "dgx-h100-1node", "-b", "32", "-s", "4096", "--top", "8", "--json"]

    def shapes(out):
        return [tuple(c["strategy"][k] for k in ("tp", "pp", "cp", "ep")) for c in out["candidates"]]
    distinct = json.loads(run_cli(*base).stdout)
    every = json.loads(run_cli(*base, "--all").stdout)
    assert len(set(shapes(distinct))) == len(shapes(distinct))
    assert len(set(shapes(every))) < len(shapes(every))
    assert distinct["candidates"][0]["step_time_s"] == every["candidates"][0]["step_time_s"]


def test_plan_include_oom_has_a_fits_column():
    proc = run_cli("plan", "-m", "llama3-70b", "-c", "dgx-h100-1node", "-b", "16", "-s", "4096", "--include-oom")
    assert "fits" in proc.stdout.splitlines()[3] or " fits " in proc.stdout


def test_an_imported_model_shows_its_parameter_count(tmp_path):
    hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
          "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
          "vocab_size": 128256, "hidden_act": "silu", "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    out = run_cli("estimate", "-m", path, "-c", "dgx-h100-1node", "-b", "64", "-s", "4096", "-S", "tp=2").stdout
    assert "(8.03B parameters)" in out.splitlines()[0]  # Llama 3 8B's shape


def test_plan_shows_the_pareto_front():
    out = run_cli("plan", "-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "64", "-s", "4096").stdout
    front = json.loads(run_cli("plan", "-m", "llama3-70b", "-c", "dgx-h100-8node", "-b", "64", "-s", "4096",
                               "--json").stdout)["pareto"]
    assert "Pareto front: step time against peak memory" in out
    assert f"of {len(front)} shown" in out
