"""A cluster file's own accelerator reaches the trace diagnosis as an object, not as a name looked up again in
the catalog: a custom part (not in the catalog) is diagnosed on its own roofline, and a calibrated one keeps its
calibrated figures. Real GPU traces from ../shared/traces/hta."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from asap.agents.analyzer import Analyzer
from asap.cost.estimate import estimate_spelled as estimate
from asap.errors import AsapError
from asap.profile import diagnose
from asap.spec.hardware import cluster_from_dict, get_accelerator
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec

TRACE = Path(__file__).resolve().parents[3] / "shared" / "traces" / "hta" / "trace_diff_control_control.json.gz"
CUSTOM = {"name": "asap-test-gpu", "family": "hopper", "peak_tflops": {"bf16": 400, "fp16": 400, "fp32": 50},
          "hbm_gb": 64, "hbm_gbps": 1000}


def _trace() -> Path:
    if not TRACE.exists():
        pytest.skip(f"{TRACE} not present")
    return TRACE


def test_a_custom_accelerator_object_gives_its_own_roofline():
    """The object is priced as given (peaks and bandwidth); its name alone is unknown to the catalog."""
    acc = cluster_from_dict({"accelerator": CUSTOM, "devices_per_node": 8}).accelerator
    d = diagnose([_trace()], accelerator=acc)
    assert d.roofline.accelerator == "asap-test-gpu"
    assert d.roofline.peak("bf16") == pytest.approx(400e12)
    assert d.roofline.bytes_per_s == pytest.approx(1000e9)
    with pytest.raises(AsapError, match="unknown accelerator 'asap-test-gpu'"):
        diagnose([_trace()], accelerator="asap-test-gpu")


def test_a_calibrated_catalog_part_keeps_its_calibrated_figures():
    """An H100 whose memory bandwidth a calibration measured at half the datasheet: the ridge doubles, where a
    lookup by name would have priced the datasheet's."""
    h100 = get_accelerator("h100-sxm")
    slow = replace(h100, hbm_gbps=h100.hbm_gbps / 2)
    by_name = diagnose([_trace()], accelerator="h100-sxm").roofline
    by_object = diagnose([_trace()], accelerator=slow).roofline
    assert by_object.ridge("bf16") == pytest.approx(2 * by_name.ridge("bf16"))


def test_the_analyzer_diagnoses_traces_on_the_clusters_custom_accelerator():
    """``Analyzer.analyze`` with traces on a custom part: before, the name was looked up in the catalog and the
    run was refused as an unknown accelerator."""
    cluster = cluster_from_dict({"accelerator": CUSTOM, "devices_per_node": 8, "nodes": 1})
    train = TrainSpec(8, 1024)
    job = Job.resolve(load_model("llama3-8b"), cluster, train)
    d = Analyzer(cluster).analyze(estimate(job, "dp=1,tp=8"), traces=[_trace()])
    assert d.source == "trace" and d.step_time_s > 0 and d.evidence
