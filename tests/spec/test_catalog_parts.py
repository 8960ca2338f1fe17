"""New catalog parts and the block-scaled 4-bit precisions: figures as their datasheets give them."""

import pytest

from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
from asap.errors import AsapError
from asap.spec.hardware import get_accelerator, load_cluster
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec
from asap.spec.job import Job
from conftest import assert_one_line_error


def test_fp4_runs_on_blackwell_faster_than_fp8_and_is_refused_on_hopper(cli):
    m = load_model("llama3-70b")
    c = load_cluster("b300", nodes=8)
    fp8, nv, mx = (estimate(Job.resolve(m, c, TrainSpec(256, 8192, p)), "tp=4,pp=2") for p in ("fp8", "nvfp4", "mxfp4"))
    assert nv.step_time_s < fp8.step_time_s and mx.step_time_s < fp8.step_time_s
    # Transformer Engine keeps a rowwise and a columnwise copy of an fp4 weight (device_memory.quantised_weight_copies),
    # one of a tensor-scaled fp8 weight on Blackwell: bf16 2 B + 1 B (fp8) < 2 B + 2 x 0.53125 (MXFP4, a scale per 32)
    # < 2 B + 2 x 0.5625 (NVFP4, a scale per 16) per parameter, the same completion (tp4 pp2 dp8 zero1) for all three
    assert fp8.strategy == nv.strategy == mx.strategy
    assert fp8.memory_gb["weights"] < mx.memory_gb["weights"] < nv.memory_gb["weights"]
    assert (nv.memory_gb["weights"] - mx.memory_gb["weights"]) / (mx.memory_gb["weights"] - fp8.memory_gb["weights"]) \
        == pytest.approx((2 * 0.5625 - 2 * 0.53125) / (2 * 0.53125 - 1.0), rel=0.02)
    with pytest.raises(AsapError, match="nvfp4 is not supported by h100-sxm"):
        estimate(Job.resolve(m, load_cluster("h100-sxm", nodes=8), TrainSpec(256, 8192, "nvfp4")), "tp=4,pp=2")
    assert_one_line_error(cli("estimate", "-m", "llama3-8b", "-c", "h100-sxm", "-b", 8, "-s", 2048, "--precision",
                              "mxfp4"), "precision", "mxfp4")


def test_ironwood_is_two_devices_per_chip():
    """TPU7x: 4614 TF fp8, 192 GB at 7.37 TB/s per chip, two devices per chip."""
    a = get_accelerator("tpu7x")
    assert 2 * a.peak_tflops["fp8"] == pytest.approx(4614, rel=0.01)
    assert 2 * a.hbm_gb == 192 and 2 * a.hbm_gbps == pytest.approx(7380, rel=0.01)
    assert a.devices_per_node == 8  # 4 chips per host


def test_new_parts_and_bins_by_name():
    assert get_accelerator("ascend-910b2").peak_tflops["bf16"] > get_accelerator("ascend-910b3").peak_tflops["bf16"]
    assert get_accelerator("ascend-910b").peak_tflops == get_accelerator("ascend-910b2").peak_tflops
    for name, fp4 in (("mi350x", 9228), ("mi355x", 10066), ("b300", 13500)):
        assert get_accelerator(name).peak_flops("mxfp4") == fp4 * 1e12
    assert get_accelerator("mi325x").hbm_gb == 256
    assert get_accelerator("gh200").host_link_gbps > 5 * get_accelerator("h100-sxm").host_link_gbps


def test_ascend_910c_is_two_devices_per_npu_and_cloudmatrix384_one_supernode():
    """CloudMatrix384 paper (arXiv:2506.12708): 752 TF bf16, 128 GB at 3.2 TB/s and 392 GB/s of UB per 910C,
    two dies each; 48 servers of 8 NPUs in one Unified Bus domain, RoCE (400 Gb/s per NPU) beyond it."""
    a = get_accelerator("ascend-910c")
    # 752 TF is the package's total (Cube + vector); a die's Cube peak is the 910B2's (Huawei torchtitan-npu)
    assert a.peak_tflops["bf16"] == get_accelerator("ascend-910b2").peak_tflops["bf16"] < 752 / 2
    assert 2 * a.hbm_gb == 128 and 2 * a.hbm_gbps == 3200
    assert 2 * a.intra_node_gbps == 392 and 2 * a.inter_node_gbps * 8 == 400  # GB/s; Gb/s per NPU
    assert a.devices_per_node == 16 and a.interconnect == "ub"
    c = load_cluster("cloudmatrix384")
    assert c.num_devices == 768 and c.topology.domain_size == 768 and c.topology.scale_out.name == "roce"
    assert load_cluster("ascend-910c-384npu").num_devices == 768
    two = load_cluster("ascend-910c", nodes=96)  # two supernodes
    assert two.topology.num_domains == 2


def test_ascend_peaks_are_the_cube_peaks():
    """Huawei torchtitan-npu (torchtitan_npu/patches/tools/metrics.py): the bf16 Cube peak is AI cores x 16^3 MACs
    x 2 FLOPs x 1.8 GHz: 24 cores (910B2) 353.89 TF, 20 cores (910B3) 294.91 TF."""
    cube_tflops = 16 ** 3 * 2 * 1.8e9 / 1e12
    assert get_accelerator("ascend-910b2").peak_tflops["bf16"] == pytest.approx(24 * cube_tflops, abs=0.1)
    assert get_accelerator("ascend-910b3").peak_tflops["bf16"] == pytest.approx(20 * cube_tflops, abs=0.1)
