"""Measured kernel rates (issue 46.5): ``benchmarks/kernels.py`` times GEMMs, attention and streaming on this
machine's CPU and writes a table with its provenance; the constants it derives reproduce the measured rates through
the cost model's own curves, and a cluster that names the table prices with them (the family's elsewhere)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asap.cost.kernel_rates import measured_constants
from asap.cost.roofline import gemm_efficiency
from asap.errors import AsapError
from asap.spec.catalog import get_accelerator
from asap.spec.hardware import cluster_from_dict
from asap.spec.kernel_table import load_kernel_table, packaged_table

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def table_path(tmp_path_factory):
    out = tmp_path_factory.mktemp("kernels") / "kernels-local-cpu.json"
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernels.py"), "--quick", "--reps", "2", "--out",
                    str(out)], check=True, env=env, capture_output=True, text=True, timeout=900)
    return out


def test_the_table_carries_its_provenance_and_every_section(table_path):
    t = load_kernel_table(table_path)
    assert t["accelerator"] == "local-cpu" and t["device"] and t["driver"] and t["date"].endswith("+00:00")
    assert {r["dtype"] for r in t["gemm"]} == {"bf16"}  # no fp8 GEMM on a CPU
    assert {(r["head_dim"], r["causal"]) for r in t["attention"]} == {(64, True), (64, False), (128, True),
                                                                       (128, False)}
    assert t["stream"]["gbps"] > 0 and set(t["efficiency"]) == {"gemm_efficiency", "attention_efficiency",
                                                                 "hbm_efficiency"}


def test_the_constants_reproduce_the_measured_rates(table_path):
    t = load_kernel_table(table_path)
    acc = get_accelerator("local-cpu")
    c = measured_constants(acc, t)
    assert c == pytest.approx(t["efficiency"])
    big = max((r for r in t["gemm"] if r["dtype"] == "bf16"), key=lambda r: r["m"] * r["n"] * r["k"])
    priced = acc.peak_flops("bf16") * gemm_efficiency(
        cluster_from_dict({"accelerator": "local-cpu", "kernel_table": str(table_path)}).accelerator,
        big["m"], big["n"], big["k"])
    if c["gemm_efficiency"] < 1.0:
        assert priced == pytest.approx(big["tflops"] * 1e12, rel=1e-9)
    assert c["hbm_efficiency"] == pytest.approx(min(1.0, t["stream"]["gbps"] / acc.hbm_gbps))


def test_a_cluster_prices_with_the_table_and_the_family_elsewhere(table_path):
    plain = cluster_from_dict({"accelerator": "local-cpu"}).accelerator.family_constants
    measured = cluster_from_dict({"accelerator": "local-cpu", "kernel_table": str(table_path)}).accelerator
    t = json.loads(table_path.read_text())
    fam = measured.family_constants
    assert fam.hbm_efficiency == pytest.approx(t["efficiency"]["hbm_efficiency"])
    assert fam.gemm_half_dim == plain.gemm_half_dim and fam.net_efficiency == plain.net_efficiency
    # a file's own efficiency mapping still wins
    own = cluster_from_dict({"accelerator": "local-cpu", "kernel_table": str(table_path),
                             "efficiency": {"hbm_efficiency": 0.5}}).accelerator.family_constants
    assert own.hbm_efficiency == 0.5 and own.gemm_efficiency == fam.gemm_efficiency
    assert packaged_table("h100-sxm") is None  # none committed: the catalog parts keep their family's


def test_a_bad_table_is_one_line_naming_the_field(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"device": "x", "driver": "", "date": "", "gemm": [{"tflops": -1}], "attention": [],
                               "stream": {"gbps": 1}, "efficiency": {}}))
    with pytest.raises(AsapError, match=r"gemm\[0\]\.tflops: must be a positive number"):
        load_kernel_table(bad)
    with pytest.raises(AsapError, match="cluster.kernel_table: cannot read"):
        cluster_from_dict({"accelerator": "local-cpu", "kernel_table": str(tmp_path / "missing.json")})
