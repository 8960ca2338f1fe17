"""A cluster's ``hbm_gbps`` override: a catalog part with other memory stacks runs them at the rate given."""

import pytest

from asap.cost.roofline import elementwise_time_s
from asap.errors import AsapError
from asap.spec.hardware import cluster_from_dict


def test_hbm_gbps_override_sets_the_rate_and_round_trips():
    # torchtitan's Grand Teton H100s: 96 GB of HBM2e at 2.4 TB/s (torchtitan docs/performance.md)
    c = cluster_from_dict({"accelerator": "h100-sxm", "nodes": 2, "hbm_gb": 96, "hbm_gbps": 2400})
    assert c.accelerator.hbm_gbps == 2400 and c.accelerator.hbm_gb == 96
    assert cluster_from_dict(c.to_dict()).accelerator.hbm_gbps == 2400
    assert cluster_from_dict({"accelerator": "h100-sxm"}).accelerator.hbm_gbps == 3350  # the catalog's HBM3


def test_memory_bound_kernels_read_the_overridden_rate():
    # 1 GB moved: bytes / (rate x hbm_efficiency) + one launch; the ratio of the byte terms is 3350 / 2400
    base = cluster_from_dict({"accelerator": "h100-sxm"}).accelerator
    slow = cluster_from_dict({"accelerator": "h100-sxm", "hbm_gbps": 2400}).accelerator
    launch = base.family_constants.kernel_overhead_s
    ratio = (elementwise_time_s(slow, 1e9) - launch) / (elementwise_time_s(base, 1e9) - launch)
    assert ratio == pytest.approx(3350 / 2400)


def test_hbm_gbps_override_must_be_positive():
    with pytest.raises(AsapError, match="cluster.hbm_gbps"):
        cluster_from_dict({"accelerator": "h100-sxm", "hbm_gbps": 0})


def test_an_h100_sxm_with_96_gb_is_metas_custom_part():
    # the only H100 SXM sold with 96 GB: HBM2e at 2.4 TB/s, 500 W default limit (torchtitan docs/performance.md),
    # its peak interpolated between the datasheet's NVL (835 TF at 400 W) and SXM (989 TF at 700 W) points
    a = cluster_from_dict({"accelerator": "h100-sxm", "hbm_gb": 96}).accelerator
    assert a.name == "h100-sxm-96gb" and a.hbm_gbps == 2400
    assert a.peak_tflops["bf16"] == pytest.approx(835 + (500 - 400) / (700 - 400) * (989 - 835), abs=0.5)
    # a rate given beside it still wins; other sizes keep the catalog part with the size overridden
    assert cluster_from_dict({"accelerator": "h100-sxm", "hbm_gb": 96, "hbm_gbps": 2000}).accelerator.hbm_gbps == 2000
    other = cluster_from_dict({"accelerator": "h100-sxm", "hbm_gb": 64}).accelerator
    assert other.name == "h100-sxm" and other.hbm_gb == 64 and other.peak_tflops["bf16"] == 989
