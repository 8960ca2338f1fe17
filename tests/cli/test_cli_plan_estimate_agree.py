"""Every figure ``plan`` prints can be reproduced by ``estimate``: each candidate of ``asap plan --top 10 --json``,
run through ``asap estimate --strategy <its strategy_string> --json``, gives the same step time and peak memory.

Seven workloads cover the paths that used to disagree: a dense pipeline (where the stage ILP may replace the
default layer split), a dense pp = 1 model (the one stage holds the embedding and the head), MoE with expert
parallelism across nodes, a TPU v5p FSDP mesh written as hosts of 4 chips, a long-context CP run, and a small
batch where zero-bubble wins (its m < pp cases are priced by the simulator), and hybrid sharding (dp_replicate > 1)
over two TPU v5p slices. The CLI runs in-process.
"""

import json

import pytest
from typer.testing import CliRunner

from asap.cli import register_commands, app

TOP = 10
TPU_HOSTS = "accelerator: tpu-v5p\ndevices_per_node: 4\nnodes: 16\n"
TWO_SLICES = "accelerator: tpu-v5p\ndevices_per_node: 4\nnodes: 64\nscale_up_domain: 128\n"  # 2 slices of 128

WORKLOADS = {
    "dense_pipeline": ["-m", "llama3-70b", "-c", "dgx-h100-8", "-b", "64", "-s", "4096", "--fix", "pp=4"],
    "dense_pp1": ["-m", "llama3-8b", "-c", "dgx-h100-1", "-b", "32", "-s", "8192", "--fix", "pp=1"],
    "moe_ep_across_nodes": ["-m", "qwen3-30b-a3b", "-c", "h100-sxm", "--nodes", "4", "-b", "256", "-s", "4096",
                            "--fix", "ep=32"],
    "tpu_v5p_fsdp": ["-m", "llama3-8b", "-c", "{tpu}", "-b", "256", "-s", "8192", "--fix", "zero=3,pp=1"],
    "long_context_cp": ["-m", "llama3-8b", "-c", "dgx-h100-8", "-b", "8", "-s", "131072", "--fix", "cp=8"],
    # torchtitan runs torch's looped zero-bubble schedule (InterleavedZeroBubble: vpp > 1); Megatron-LM has none
    "small_batch_zb": ["-m", "llama3-70b", "-c", "dgx-h100-8", "-b", "16", "-s", "4096", "--framework", "torchtitan",
                       "--fix", "vpp=2"],
    # MaxText over two slices: the shard group within a slice, the replicas over DCN (dcn_data_parallelism)
    "hybrid_two_slices": ["-m", "llama3-8b", "-c", "{slices}", "-b", "256", "-s", "8192", "--framework", "maxtext",
                          "--fix", "pp=1"],
}


def invoke(*args) -> dict:
    register_commands()
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_every_plan_candidate_is_what_estimate_says(name, tmp_path):
    tpu = tmp_path / "tpu-v5p-hosts.yaml"
    tpu.write_text(TPU_HOSTS)
    slices = tmp_path / "tpu-v5p-2-slices.yaml"
    slices.write_text(TWO_SLICES)
    args = [a.replace("{tpu}", str(tpu)).replace("{slices}", str(slices)) for a in WORKLOADS[name]]
    plan = invoke("plan", *args, "--top", str(TOP), "--json")
    assert len(plan["candidates"]) == TOP
    job = [a for a in args[:args.index("--fix")]]
    schedules = set()
    for cand in plan["candidates"]:
        est = invoke("estimate", *job, "--strategy", cand["strategy_string"], "--json")
        assert est["strategy"] == cand["strategy"]
        assert est["step_time_s"] == pytest.approx(cand["step_time_s"], rel=1e-3)
        assert est["peak_memory_gb"] == pytest.approx(cand["peak_memory_gb"], rel=1e-3)
        schedules.add(cand["strategy"]["schedule"])
    if name == "small_batch_zb":
        assert plan["candidates"][0]["strategy"]["schedule"] == "zb"
    if name == "hybrid_two_slices":  # the planner offers the slices as replicas, and they win here
        assert plan["candidates"][0]["strategy"].get("dp_replicate") == 2
    if name == "dense_pp1":
        assert {c["strategy"]["pp"] for c in plan["candidates"]} == {1}
