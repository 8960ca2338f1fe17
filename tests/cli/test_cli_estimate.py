"""The estimate/validate/presets CLI: the JSON contract and one-line errors for bad input."""

import json

import pytest

from conftest import DEEPSEEK_V3_CONFIG, SHARED, assert_one_line_error

DSV3_JOB = ["--cluster", "h800-256", "--global-batch", "15360", "--seq-len", "4096", "--precision", "fp8",
            "--strategy", "tp=1,pp=16,ep=64,mbs=1,recompute=full,zero=1"]


def test_estimate_json_contract(cli):
    p = cli("estimate", "--model", "llama3-8b", "--cluster", "dgx-h100-1", "--global-batch", "64", "--seq-len",
            "8192", "--strategy", "tp=2,recompute=selective", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["strategy"]["tp"] == 2 and d["strategy"]["dp"] == 4 and d["strategy"]["sp"] == 1
    assert d["step_time_s"] > 0 and isinstance(d["fits"], bool)


def test_deepseek_v3_preset_and_hf_config_give_the_same_estimate(cli, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    a = cli("estimate", "--model", "deepseek-v3", *DSV3_JOB, "--json")
    b = cli("estimate", "--model", str(cfg), *DSV3_JOB, "--json")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    da, db = json.loads(a.stdout), json.loads(b.stdout)
    for key in ("step_time_s", "peak_memory_gb", "mfu", "breakdown_s", "strategy", "bottleneck"):
        assert da[key] == db[key], key


@pytest.mark.parametrize("args, needles", [
    (["--model", "nope"], ["model", "neither a preset"]),
    (["--model", "llama3-8b", "--strategy", "tp=3"], ["strategy.dp", "not divisible"]),
    (["--model", "llama3-8b", "--strategy", "tp=8,pp=2,dp=1"], ["strategy.dp", "8 devices"]),
    (["--model", "llama3-8b", "--strategy", "sp=1"], ["strategy.sp", "tp > 1"]),
    (["--model", "llama3-8b", "--strategy", "zz=1"], ["strategy.zz", "unknown key"]),
    (["--model", "llama3-8b", "--cluster", "a100-80gb", "--precision", "fp8"], ["precision", "not supported"]),
    (["--model", "llama3-8b", "--precision", "int3"], ["precision"]),
    (["--model", "llama3-8b", "--cluster", "moon-base"], ["cluster", "neither a preset"]),
    (["--model", "llama3-8b", "--global-batch", "0"], ["global-batch", "positive"]),
])
def test_bad_inputs_fail_with_one_line(cli, args, needles):
    base = {"--cluster": "dgx-h100-1", "--global-batch": "64", "--seq-len": "4096"}
    full = list(args)
    for k, v in base.items():
        if k not in full:
            full += [k, v]
    assert_one_line_error(cli("estimate", *full), *needles)


@pytest.mark.parametrize("content, needles", [
    ("name: x\nnum_layers: [\n", ["model", "not valid YAML"]),
    ("name: x\nnum_layers: 2\nhidden_size: 64\n", ["model.ffn_hidden_size", "missing"]),
    ("name: x\nnum_layers: 2\nhidden_size: 64\nffn_hidden_size: 64\nnum_attention_heads: 4\nvocab_size: 10\n"
     "moe: {num_experts: 4, top_k: 9, expert_ffn_hidden_size: 8}\n", ["model.moe.top_k", "exceeds"]),
    ("- 1\n- 2\n", ["model", "mapping"]),
])
def test_malformed_model_files(cli, tmp_path, content, needles):
    f = tmp_path / "model.yaml"
    f.write_text(content)
    p = cli("estimate", "--model", str(f), "--cluster", "dgx-h100-1", "--global-batch", "8", "--seq-len", "1024")
    assert_one_line_error(p, *needles)


def test_truncated_json_model_file(cli, tmp_path):
    f = tmp_path / "config.json"
    f.write_text('{"model_type": "llama", "num_hidden_layers": 3')
    p = cli("estimate", "--model", str(f), "--cluster", "dgx-h100-1", "--global-batch", "8", "--seq-len", "1024")
    assert_one_line_error(p, "model", "not valid JSON")


def test_presets_lists_models_and_clusters(cli):
    p = cli("presets", "--json")
    d = json.loads(p.stdout)
    names = {m["name"] for m in d["models"]}
    assert {"gpt3-175b", "llama3-8b", "llama3-70b", "llama3.1-405b", "mixtral-8x7b", "mixtral-8x22b", "deepseek-v3",
            "qwen3-30b-a3b", "qwen3-235b-a22b", "telechat3-105b", "tiny-dense", "tiny-moe"} <= names
    accs = {a["name"] for a in d["accelerators"]}
    assert {"a100-40gb", "a100-80gb", "h100-sxm", "h800", "h200", "b200", "gb200", "gb300", "mi300x", "tpu-v4",
            "tpu-v5e", "tpu-v5p", "tpu-v6e", "ascend-910b", "ascend-910c", "local-cpu"} <= accs
    assert all(a["source"] for a in d["accelerators"])


def test_validate_meets_the_accuracy_bar(cli):
    """Without --cases both shipped files (89 runs), each reported apart: the calibration file at MAPE <= 8% and no
    case off by more than 30%; the 2024-2026 file at <= 18% (issue 30's bar is 8%, not met yet: the TPU runs'
    host offload is not priced, docs/accuracy.md "Known limits"), none off by more than 60%."""
    p = cli("validate", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["n"] == 89
    files = d["files"]
    assert [f["n"] for f in files.values()] == [44, 45]
    cal, pub = files["calibration_runs.json"], files["published_runs_2024_2026.json"]
    assert cal["mape"] <= 0.08 and cal["max_abs_error"] <= 0.30, cal
    assert pub["mape"] <= 0.18 and pub["max_abs_error"] <= 0.60, pub
    assert abs(d["mape"] - (44 * cal["mape"] + 45 * pub["mape"]) / 89) < 1e-12
    for case in d["cases"]:
        assert {"id", "published_step_time_s", "predicted_step_time_s", "error", "strategy", "file"} <= set(case)


def test_validate_one_file_reports_it_alone(cli, tmp_path):
    from asap.validate import load_packaged

    f = tmp_path / "cases.json"
    f.write_text(json.dumps(load_packaged()[:2]))
    d = json.loads(cli("validate", "--json", "--cases", str(f)).stdout)
    assert d["n"] == 2 and list(d["files"]) == [str(f)] and d["files"][str(f)]["n"] == 2


def test_shipped_cases_equal_the_shared_reference():
    from asap.validate import PACKAGED_FILES, load_cases, load_packaged

    for name in PACKAGED_FILES:
        ref = SHARED / "reference" / name
        if not ref.exists():
            pytest.skip("shared/reference not present")
        assert load_packaged(name) == load_cases(ref), name
    assert load_cases() == load_packaged(PACKAGED_FILES[0])


def test_validate_bad_case_file(cli, tmp_path):
    f = tmp_path / "cases.json"
    f.write_text("{not json")
    assert_one_line_error(cli("validate", "--cases", str(f)), "cases", "not valid JSON")
    f.write_text(json.dumps([{"id": "x", "model": {"name": "m"}, "cluster": {"accelerator": "h100-sxm"},
                              "train": {"global_batch": 8, "seq_len": 128}, "published": {"step_time_s": 1}}]))
    assert_one_line_error(cli("validate", "--cases", str(f)), "x.model.num_layers", "missing")


def test_memory_margin_decides_fit_against_the_reported_device_memory(cli):
    """An H100 reports 81559 MiB (79.65 GiB); a strategy fits when its peak is at most that less --memory-margin,
    on estimate and plan alike."""
    job = ["--model", "llama3-70b", "--cluster", "h100-sxm", "--nodes", "8", "--global-batch", "64", "--seq-len",
           "8192", "--json"]
    free = json.loads(cli("estimate", *job, "--strategy", "tp=8,pp=4,mbs=1").stdout)
    peak = free["peak_memory_gb"]
    assert free["fits"] and peak <= 81559 / 1024
    margin = 81559 / 1024 - peak + 0.5  # leaves less than the peak needs
    tight = json.loads(cli("estimate", *job, "--strategy", "tp=8,pp=4,mbs=1", "--memory-margin", margin).stdout)
    assert tight["peak_memory_gb"] == pytest.approx(peak) and not tight["fits"]
    p = cli("plan", *job, "--memory-margin", 20, "--top", 3)
    assert p.returncode == 0, p.stderr
    assert all(c["peak_memory_gb"] <= 81559 / 1024 - 20 for c in json.loads(p.stdout)["candidates"])


def test_memory_margin_bad_value_is_one_line(cli, tmp_path):
    case = tmp_path / "cases.json"
    model = dict(name="m", num_layers=2, hidden_size=256, ffn_hidden_size=1024, num_attention_heads=4, vocab_size=1000)
    case.write_text(json.dumps([{"id": "x", "model": model, "cluster": {"accelerator": "h100-sxm"},
                                 "train": {"global_batch": 8, "seq_len": 2048, "memory_margin_gb": -1},
                                 "published": {"step_time_s": 1.0}}]))
    assert_one_line_error(cli("validate", "--cases", case), "train.memory_margin_gb")
    assert_one_line_error(cli("estimate", "--model", "llama3-8b", "--cluster", "h100-sxm", "-b", 8, "-s", 2048,
                              "--memory-margin", "lots"), "memory-margin")
