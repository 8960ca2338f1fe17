"""The topology derived once from a cluster: the scale-up domain a job gets (NVLink/NVSwitch domain, TPU ICI
slice, HCCS supernode), its torus shape, and the collectives priced over it. Every expected figure is derived
by hand in the comments from the catalog (hardware.py) and the family constants:
  hopper    net_efficiency 0.90, collective_latency_s 20e-6, hop_latency_s 5e-6
  blackwell net_efficiency 0.90, collective_latency_s 20e-6, hop_latency_s 5e-6
  tpu       net_efficiency 0.85, collective_latency_s 15e-6, hop_latency_s 5e-6
Ring collectives pay launch + (g-1) hops; tree all-reduce and all-to-all pay launch + 2 log2(g) hops."""

from __future__ import annotations

import numpy as np
import pytest

from asap.cost.collectives import (all_gather_s, all_reduce_s, all_to_all_s, bus_bandwidth_Bps, collective_latency_s,
                                   expert_dispatch_s, members_per_domain, p2p_s, reduce_scatter_s, spans_domains)
from asap.errors import AsapError
from asap.spec.hardware import cluster_from_dict, load_cluster
from asap.spec.topology import effective_domain_size, torus_shape
from asap.spec.job import Job

GIB = float(1 << 30)  # 1073741824 bytes


def small(size_bytes, g):
    """The share of the bus bandwidth a ring reaches when each step moves size/g bytes per rank: chunk / (chunk
    + 128 KiB) (collectives.HALF_BANDWIDTH_CHUNK_BYTES). 1 GiB over 64 ranks: 16 MiB chunks, 0.99225."""
    chunk = size_bytes / g
    return chunk / (chunk + 128 * 1024)


# ---------------------------------------------------------------------------------------------------------
# The effective domain and the torus shape
# ---------------------------------------------------------------------------------------------------------


def test_effective_domain_is_the_largest_host_multiple_that_divides_the_job():
    # GB200 trays of 4, NVL72 racks: multiples of 4 up to 72 that divide 256 are 4, 8, 16, 32, 64 -> 64
    assert effective_domain_size(256, 4, 72) == 64
    assert effective_domain_size(288, 4, 72) == 72  # 4 full racks
    # 100 GPUs = 25 trays; tray counts up to 18 that divide 25: 1, 5 -> 5 trays = 20 GPUs
    assert effective_domain_size(100, 4, 72) == 20
    assert effective_domain_size(64, 4, 8960) == 64  # 16 v5p hosts: one 64-chip slice
    assert effective_domain_size(2048, 4, 8960) == 2048
    assert effective_domain_size(512, 4, 256) == 256  # v5e: two 256-chip pods over DCN
    assert effective_domain_size(64, 8, 8) == 8  # HGX: the server
    # a domain smaller than the host (NVLink pairs in a PCIe server): the largest divisor of the host within it
    assert effective_domain_size(16, 8, 2) == 2
    assert effective_domain_size(16, 8, 3) == 2


def test_torus_shapes_of_tpu_slices():
    # the most balanced factorisation, ascending, innermost (fastest rank) axis last
    assert torus_shape(64, 3) == (4, 4, 4)
    assert torus_shape(128, 3) == (4, 4, 8)
    assert torus_shape(256, 3) == (4, 8, 8)
    assert torus_shape(2048, 3) == (8, 16, 16)
    assert torus_shape(4096, 3) == (16, 16, 16)
    assert torus_shape(8960, 3) == (16, 20, 28)  # the v5p pod
    assert torus_shape(256, 2) == (16, 16)
    assert torus_shape(64, 2) == (8, 8)


def test_torus_axes_covered_follow_row_major_coordinates():
    # v5p 256 chips = (4, 8, 8): rank r has coordinates (r // 64, (r // 8) % 8, r % 8)
    topo = load_cluster("v5p-512").topology
    assert topo.scale_up.torus_axes == (4, 8, 8) and topo.num_domains == 1
    assert topo.torus_axes_covered(8, 1) == 1  # ranks 0..7: only the innermost coordinate varies
    assert topo.torus_axes_covered(16, 1) == 2  # 0..15: innermost and the middle one (0, 1)
    assert topo.torus_axes_covered(8, 8) == 1  # 0, 8, ..., 56: the middle coordinate only
    assert topo.torus_axes_covered(64, 4) == 3  # 0, 4, ..., 252: (0..3, 0..7, {0, 4})
    np.testing.assert_array_equal(topo.torus_axes_covered(np.array([8, 16, 64]), np.array([1, 1, 4])), [1, 2, 3])
    # a switched fabric has one "axis": every group gets the catalog figure once
    assert load_cluster("dgx-h100-8").topology.torus_axes_covered(64, 1) == 1


# ---------------------------------------------------------------------------------------------------------
# (a) TPU v5p written as hosts of 4 is one ICI slice
# ---------------------------------------------------------------------------------------------------------


def test_tpu_hosts_of_four_are_one_slice():
    hosts = cluster_from_dict({"accelerator": "tpu-v5p", "devices_per_node": 4, "nodes": 16})
    slice_ = cluster_from_dict({"accelerator": "tpu-v5p", "devices_per_node": 64, "nodes": 1})
    assert hosts.num_devices == slice_.num_devices == 64
    assert hosts.topology.scale_up == slice_.topology.scale_up
    assert hosts.topology.scale_out == slice_.topology.scale_out
    assert hosts.topology.scale_up.torus_axes == (4, 4, 4) and hosts.topology.num_domains == 1
    # 64-way all-gather of 1 GiB at stride 1 covers all 3 axes of the 4x4x4 torus:
    # busbw = 0.85 * 180e9 B/s per axis * 3 axes = 459e9 B/s
    # t = 63/64 * 2^30 / 459e9 + (15e-6 + 63 * 5e-6) = 1056964608 / 459e9 + 330e-6 = 2.302755e-3 + 3.3e-4
    expected = 63 / 64 * GIB / (459e9 * small(GIB, 64)) + 15e-6 + 63 * 5e-6
    assert expected == pytest.approx(2.650745e-3, rel=1e-6)  # 2.302755e-3 / 0.99225 + 3.3e-4
    for c in (hosts, slice_):
        assert bus_bandwidth_Bps(c, 64, 1) == pytest.approx(459e9)
        assert all_gather_s(c, GIB, 64, 1) == pytest.approx(expected)
        assert reduce_scatter_s(c, GIB, 64, 1) == pytest.approx(expected)
        assert not spans_domains(c, 64, 1)


def test_tpu_host_sized_domain_is_the_old_reading_and_goes_over_dcn():
    # scale_up_domain 4 says what the old model assumed: each host its own ICI island, 16 islands over DCN.
    # A 64-way group then has k = 4 members per island (pieces of 4 consecutive ranks on a 1x2x2 torus, 2 axes):
    # busbw = 0.85 * min(180e9 * 2, 4 * 12.5e9) = 0.85 * 50e9 = 42.5e9 B/s
    islands = cluster_from_dict({"accelerator": "tpu-v5p", "devices_per_node": 4, "nodes": 16, "scale_up_domain": 4})
    assert islands.topology.num_domains == 16 and members_per_domain(islands, 64, 1) == 4
    assert bus_bandwidth_Bps(islands, 64, 1) == pytest.approx(42.5e9)
    slow = 63 / 64 * GIB / (42.5e9 * small(GIB, 64)) + 15e-6 + 63 * 5e-6  # 25.06e-3 + 3.3e-4 s
    assert all_gather_s(islands, GIB, 64, 1) == pytest.approx(slow)
    hosts = cluster_from_dict({"accelerator": "tpu-v5p", "devices_per_node": 4, "nodes": 16})
    assert all_gather_s(hosts, GIB, 64, 1) < all_gather_s(islands, GIB, 64, 1) / 9


def test_maxtext_mesh_counts_slices_not_hosts():
    from asap.search.mesh import tpu_mesh
    from asap.spec.strategy import Strategy

    one_slice = tpu_mesh(cluster_from_dict({"accelerator": "tpu-v5p", "devices_per_node": 4, "nodes": 16}),
                         Strategy(dp=16, tp=4))
    assert one_slice["dcn_fsdp_parallelism"] == 1 and one_slice["ici_fsdp_parallelism"] == 16
    two_pods = tpu_mesh(load_cluster("tpu-v5e-256", devices=512), Strategy(dp=64, tp=8))  # 2 x 256 chips
    assert two_pods["dcn_fsdp_parallelism"] == 2 and two_pods["ici_fsdp_parallelism"] == 32


# ---------------------------------------------------------------------------------------------------------
# (b) GB200 trays of 4 keep the NVL72 NVLink domain
# ---------------------------------------------------------------------------------------------------------


def test_gb200_trays_keep_expert_parallel_traffic_on_nvlink():
    trays = cluster_from_dict({"accelerator": "gb200", "devices_per_node": 4, "nodes": 64})  # 256 GPUs
    racks = cluster_from_dict({"accelerator": "gb200", "devices_per_node": 64, "nodes": 4})
    assert trays.topology.domain_size == racks.topology.domain_size == 64  # 256 GPUs spread over 4 racks
    assert trays.topology.scale_up == racks.topology.scale_up and trays.topology.scale_out == racks.topology.scale_out
    assert members_per_domain(trays, 64, 1) == 64 and not spans_domains(trays, 64, 1)
    # EP = 64 all-to-all of 1 GiB, k = g = 64: on = S (k-1)/g / (900e9 * 0.9), off = 0
    # t = 2^30 * 63/64 / 810e9 + (20e-6 + 2 * log2(64) * 5e-6) = 1.304894e-3 + 80e-6
    a2a = GIB * 63 / 64 / 810e9 + 20e-6 + 2 * 6 * 5e-6
    assert a2a == pytest.approx(1.384894e-3, rel=1e-6)
    # dispatch of 4096 tokens x top-8 x 7168 x 2 B = 469762048 B; one domain, so the flat exchange:
    # t = 469762048 * 63/64 / 810e9 + 80e-6 = 570.891e-6 + 80e-6
    tokens, top_k, token_bytes = 4096, 8, 7168 * 2
    dispatch = tokens * top_k * token_bytes * 63 / 64 / 810e9 + 80e-6
    assert dispatch == pytest.approx(650.891e-6, rel=1e-5)
    for c in (trays, racks):
        assert all_to_all_s(c, GIB, 64, 1) == pytest.approx(a2a)
        by = expert_dispatch_s(c, tokens, top_k, token_bytes, 64, 1)
        assert by["alltoall"] == pytest.approx(dispatch)
        # DeepEP inside one domain: a token goes once to each of the 64 (1 - (63/64)^8) = 7.57 ranks its experts
        # occupy, not 8 times: 469762048 * 7.57/8 * 63/64 / 810e9 + 80e-6
        ranks = 64 * (1 - (63 / 64) ** 8)
        assert by["dedup"] == pytest.approx(tokens * ranks * token_bytes * 63 / 64 / 810e9 + 80e-6)
    # read as the old model did (a tray is the domain): k = 4, S * 60/64 leaves on one NIC (45e9 B/s)
    tray_islands = cluster_from_dict({"accelerator": "gb200", "devices_per_node": 4, "nodes": 64,
                                      "scale_up_domain": 4})
    assert all_to_all_s(tray_islands, GIB, 64, 1) == pytest.approx(GIB * 60 / 64 / 45e9 + 80e-6)
    assert expert_dispatch_s(tray_islands, tokens, top_k, token_bytes, 64, 1)["alltoall"] > 10 * dispatch


def test_gb200_nvl72_preset_is_one_rack_of_trays():
    rack = load_cluster("gb200-nvl72")
    flat = cluster_from_dict({"accelerator": "gb200", "devices_per_node": 72, "nodes": 1})
    assert (rack.devices_per_node, rack.nodes, rack.topology.domain_size) == (4, 18, 72)
    assert rack.topology.scale_up == flat.topology.scale_up
    assert all_to_all_s(rack, GIB, 72, 1) == pytest.approx(all_to_all_s(flat, GIB, 72, 1))
    # --devices 256 on the rack preset: 64 trays, 4 racks of 64
    assert load_cluster("gb200-nvl72", devices=256).topology.domain_size == 64


# ---------------------------------------------------------------------------------------------------------
# (c) HGX H100 8-GPU nodes: unchanged
# ---------------------------------------------------------------------------------------------------------


def test_h100_nodes_are_priced_as_before():
    c = load_cluster("h100-sxm", nodes=4)  # 32 GPUs, 4 NVLink domains of 8
    assert (c.scale_up_domain, c.topology.domain_size, c.topology.num_domains) == (8, 8, 4)
    assert c.topology.scale_up.name == "nvlink" and c.topology.scale_out.name == "ib"
    # tp = 8 inside a node: busbw = 0.9 * 450e9 = 405e9
    # all-reduce 1 GiB: 2 * 7/8 * 2^30 / 405e9 + (20e-6 + 2 * 3 * 5e-6) = 4.639625e-3 + 50e-6
    assert bus_bandwidth_Bps(c, 8, 1) == pytest.approx(405e9)
    assert all_reduce_s(c, GIB, 8, 1) == pytest.approx(2 * 7 / 8 * GIB / (405e9 * small(GIB, 8)) + 50e-6)
    # dp = 4 over tp = 8 (stride 8): one member per node, busbw = 0.9 * min(450e9, 1 * 50e9) = 45e9
    # all-reduce: 2 * 3/4 * 2^30 / 45e9 + (20e-6 + 2 * 2 * 5e-6) = 35.7914e-3 + 40e-6
    assert members_per_domain(c, 4, 8) == 1
    assert all_reduce_s(c, GIB, 4, 8) == pytest.approx(2 * 3 / 4 * GIB / (45e9 * small(GIB, 4)) + 40e-6)
    # dp = 32 at stride 1: 8 per node, busbw = 0.9 * min(450e9, 8 * 50e9) = 360e9
    # all-gather: 31/32 * 2^30 / 360e9 + (20e-6 + 31 * 5e-6) = 2.889409e-3 + 175e-6
    assert all_gather_s(c, GIB, 32, 1) == pytest.approx(31 / 32 * GIB / (360e9 * small(GIB, 32)) + 175e-6)
    # dp = 16 over tp = 2: 4 per node, busbw = 0.9 * min(450e9, 4 * 50e9) = 180e9
    np.testing.assert_allclose(bus_bandwidth_Bps(c, np.array([8, 4, 32, 16]), np.array([1, 8, 1, 2])),
                               [405e9, 45e9, 360e9, 180e9])
    # pipeline messages: on NVLink inside the node, on the NIC across; launch latency 20e-6
    assert p2p_s(c, 1e9, False) == pytest.approx(1e9 / 405e9 + 20e-6)
    assert p2p_s(c, 1e9, True) == pytest.approx(1e9 / 45e9 + 20e-6)
    assert collective_latency_s(c, 8) == pytest.approx(20e-6 + 7 * 5e-6)


# ---------------------------------------------------------------------------------------------------------
# (d) bad scale_up_domain
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, "x", 1e308, float("inf"), 2.5, True, [8]])
def test_bad_scale_up_domain_is_one_line_naming_the_field(bad):
    with pytest.raises(AsapError) as e:
        cluster_from_dict({"accelerator": "h100-sxm", "devices_per_node": 8, "nodes": 2, "scale_up_domain": bad})
    assert e.value.field == "cluster.scale_up_domain" and "\n" not in str(e.value)


def test_bad_scale_up_domain_in_a_cluster_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("accelerator: gb200\ndevices_per_node: 4\nnodes: 18\nscale_up_domain: 1e308\n")
    with pytest.raises(AsapError, match="^cluster.scale_up_domain: "):
        load_cluster(str(f))
    f.write_text("accelerator: gb200\ndevices_per_node: 4\nnodes: 18\nscale_up_domain: 36\n")
    assert load_cluster(str(f)).topology.domain_size == 36


def test_scale_up_domain_round_trips_through_to_dict():
    c = load_cluster("v5p-512", nodes=512)  # --nodes: 2048 chips in hosts of 4, one slice
    assert c.topology.domain_size == 2048 and c.topology.scale_up.torus_axes == (8, 16, 16)
    d = c.to_dict()
    assert d["scale_up_domain"] == 8960
    again = cluster_from_dict(d)
    assert again.topology == c.topology
    # a custom accelerator without a scale_up_domain keeps one host per domain (the old reading)
    custom = cluster_from_dict({"accelerator": {"peak_tflops": {"bf16": 100}, "hbm_gb": 24, "hbm_gbps": 900},
                                "devices_per_node": 4, "nodes": 2})
    assert custom.scale_up_domain == 4 and custom.topology.num_domains == 2


# ---------------------------------------------------------------------------------------------------------
# (e) groups that straddle a domain boundary still go over the NIC
# ---------------------------------------------------------------------------------------------------------


def test_straddling_groups_run_at_the_nic_rate():
    # tp = 3 on 8-GPU nodes: ranks 6, 7 | 8 share a group, one member on one side: busbw = 0.9 * 50e9
    h100 = load_cluster("h100-sxm", nodes=4)
    assert members_per_domain(h100, 3, 1) == 1 and spans_domains(h100, 3, 1)
    assert bus_bandwidth_Bps(h100, 3, 1) == pytest.approx(45e9)
    # tp = 3 on 256 GB200 in 64-GPU domains: 63 | 64, 65 straddles too (64 % 3 != 0)
    gb200 = load_cluster("gb200-nvl72", devices=256)
    assert members_per_domain(gb200, 3, 1) == 1 and bus_bandwidth_Bps(gb200, 3, 1) == pytest.approx(45e9)
    # tp = 4 tiles the 64-GPU domain and stays on NVLink (0.9 * 900e9)
    assert bus_bandwidth_Bps(gb200, 4, 1) == pytest.approx(810e9)


# ---------------------------------------------------------------------------------------------------------
# Whole estimates: the same job written two ways prices the same
# ---------------------------------------------------------------------------------------------------------


def test_tpu_v5p_hosts_and_slice_give_the_same_fsdp_estimate():
    """Llama 3 8B, 64-way FSDP (zero=3) on 64 v5p chips, as 16 hosts of 4 and as one 64-chip node: the same
    step. The data-parallel traffic by hand (one micro-batch, m = 64 / 64): P = 8,030,261,248 parameters on the
    one stage; ICI bus bandwidth over the (4,4,4) torus = 0.85 * 180e9 * 3 axes = 459e9 B/s; a ring over 64
    chips pays 15e-6 + 63 * 5e-6 = 330e-6 s of latency, once per layer (32 layers, so 31 more than the
    bucketed case). Gradients: reduce-scatter of 4 P bytes; weights: all-gathered for forward and for backward
    (2 P bytes each)."""
    from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
    from asap.spec.loader import load_model
    from asap.spec.train import TrainSpec

    model, train = load_model("llama3-8b"), TrainSpec(64, 8192)
    hosts = cluster_from_dict({"accelerator": "tpu-v5p", "devices_per_node": 4, "nodes": 16})
    slice_ = cluster_from_dict({"accelerator": "tpu-v5p", "devices_per_node": 64, "nodes": 1})
    a, b = (estimate(Job.resolve(model, c, train), "dp=64,tp=1,pp=1,zero=3") for c in (hosts, slice_))
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert a.breakdown_s == pytest.approx(b.breakdown_s, rel=1e-12)
    P, bw, ring_latency = 8_030_261_248, 0.85 * 180e9 * 3, 15e-6 + 63 * 5e-6
    per_layer_extra = 31 * ring_latency
    grad = 63 / 64 * 4 * P / (bw * small(4 * P / 32, 64)) + ring_latency + per_layer_extra  # 32 per-layer chunks
    gathers = 2 * (63 / 64 * 2 * P / (bw * small(2 * P / 32, 64)) + ring_latency + per_layer_extra)
    assert a.breakdown_s["dp_comm"] == pytest.approx(grad + gathers, rel=1e-9)


def test_gb200_trays_and_racks_give_the_same_expert_parallel_estimate():
    """DeepSeek-V3 with ep=64 on 256 GB200s, as 64 trays of 4 and as 4 racks (hosts of 64, NVL72 domains):
    the same step, and every expert all-to-all on NVLink. By hand, per MoE layer and micro-batch (tp=1, so
    T_sp = 4096 tokens; etp=1, no expert-TP gather): dispatch and combine, forward and backward, each the flat
    exchange of 4096 * 8 * 7168 * 2 = 469,762,048 bytes over one 64-GPU domain, 63/64 of it at 0.9 * 900e9
    B/s, plus 20e-6 + 2 log2(64) 5e-6 s, then the receive-side reorder by local expert (4 per rank: the
    flat all-to-all copies the received bytes once more, read and written at the HBM roofline, one kernel); 58
    MoE layers and one MTP module, one micro-batch (global batch 256)."""
    from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
    from asap.spec.loader import load_model
    from asap.spec.train import TrainSpec

    model, train = load_model("deepseek-v3"), TrainSpec(256, 4096)
    trays = cluster_from_dict({"accelerator": "gb200", "devices_per_node": 4, "nodes": 64})
    racks = cluster_from_dict({"accelerator": "gb200", "devices_per_node": 64, "nodes": 4})
    a, b = (estimate(Job.resolve(model, c, train), "dp=256,tp=1,pp=1,ep=64,etp=1") for c in (trays, racks))
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    acc = trays.accelerator
    fam = acc.family_constants
    sort = 2 * 469_762_048 / (acc.hbm_gbps * 1e9 * fam.hbm_efficiency) + fam.kernel_overhead_s
    a2a = 469_762_048 * 63 / 64 / 810e9 + 20e-6 + 2 * 6 * 5e-6 + sort
    assert a.breakdown_s["ep_comm"] == pytest.approx((58 + 1) * 2 * 2 * a2a, rel=1e-9)
