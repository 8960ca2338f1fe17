"""`asap diagnose` on CPU traces recorded here from real two-process gloo runs (torch.distributed, the
PyTorch profiler with record_shapes and a schedule, so ProfilerStep#N markers exist): one built to be
compute-bound (big matmuls, a tiny all-reduce), one communication-bound (a big all-reduce, tiny compute)."""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from asap.profile import diagnose  # noqa: E402
from asap.profile.ops import op_cost  # noqa: E402

GLOO_JOB = r'''
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule


def step(mode, rank, a, b, grad, mm_per_step, extra_mm_per_rank, pending):
    if mode == "allreduce":  # data parallel: matmuls, then an all-reduce of the gradient
        for _ in range(mm_per_step + extra_mm_per_rank * rank):
            torch.relu(a @ b)
        dist.all_reduce(grad)
    elif mode == "allreduce_async":  # the same, the all-reduce left in flight: no rank ever waits on the other
        for _ in range(mm_per_step):
            torch.relu(a @ b)
        pending.append(dist.all_reduce(grad, async_op=True))
    else:  # two pipeline stages: stage 0 forward, send, stage 1 forward+backward, send back, stage 0 backward
        if rank == 0:
            for _ in range(mm_per_step):
                a @ b
            dist.send(grad, 1)
            dist.recv(grad, 1)
            for _ in range(mm_per_step):
                a @ b
        else:
            dist.recv(grad, 0)
            for _ in range(2 * mm_per_step):
                a @ b
            dist.send(grad, 0)


def work(rank, world, out, port, mode, n_mm, mm_per_step, extra_mm_per_rank, n_grad):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    a, b, grad = torch.randn(n_mm, n_mm), torch.randn(n_mm, n_mm), torch.randn(n_grad)
    dist.all_reduce(grad)  # connect before profiling
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(f"{out}/rank{rank}.json.gz")) as prof:
        pending = []
        for _ in range(4):
            step(mode, rank, a, b, grad, mm_per_step, extra_mm_per_rank, pending)
            prof.step()
    for w in pending:  # after the profiled steps: the waits are never in a trace
        w.wait()
    dist.barrier()
    dist.destroy_process_group()
    # The traces are written and the group is closed: leave without running C++ static destructors, where
    # gloo's and the profiler's threads can abort the process ("terminate called without an active exception").
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    out, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    n_mm, mm_per_step, extra_mm_per_rank, n_grad = map(int, sys.argv[4:8])
    mp.spawn(work, args=(2, out, port, mode, n_mm, mm_per_step, extra_mm_per_rank, n_grad), nprocs=2)
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record_gloo_job(out: Path, n_mm: int, mm_per_step: int, n_grad: int, mode: str = "allreduce",
                    extra_mm_per_rank: int = 0) -> list[Path]:
    script = out / "job.py"
    script.write_text(GLOO_JOB)
    for attempt in range(3):  # the free port can be taken by another process before the job binds it: retry
        p = subprocess.run([sys.executable, str(script), str(out), str(_free_port()), mode, str(n_mm),
                            str(mm_per_step), str(extra_mm_per_rank), str(n_grad)], timeout=180, capture_output=True,
                           text=True)
        if p.returncode == 0 or "address already in use" not in (p.stderr or "").lower() or attempt == 2:
            break
    assert p.returncode == 0, p.stderr[-2000:]
    return [out / "rank0.json.gz", out / "rank1.json.gz"]


@pytest.fixture(scope="module")
def compute_bound(tmp_path_factory) -> list[Path]:
    """Compute-bound by construction: each step's all-reduce is left in flight (waited on after the profiled
    steps), so a rank that the machine's load deschedules slows only its own matmuls, and no rank's trace holds
    a wait for the other (with a blocking all-reduce a loaded machine turned the verdict into imbalance)."""
    return record_gloo_job(tmp_path_factory.mktemp("compute"), n_mm=768, mm_per_step=2, n_grad=1024,
                           mode="allreduce_async")


@pytest.fixture(scope="module")
def communication_bound(tmp_path_factory) -> list[Path]:
    return record_gloo_job(tmp_path_factory.mktemp("comm"), n_mm=32, mm_per_step=1, n_grad=8 * 2**20)


def _steps(path: Path) -> list[float]:
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return [e["dur"] * 1e-6 for e in events if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#")]


def test_compute_bound_gloo_run(compute_bound):
    d = diagnose(compute_bound)
    assert d.bottleneck == "compute", d.evidence
    assert d.roofline.accelerator == "local-cpu"
    assert len(d.ranks) == 2 and all(r.steps_source == "ProfilerStep" for r in d.ranks)
    mm = next(op for op in d.top_ops if op.name == "aten::mm")
    assert mm.bound == "compute" and mm.bound_from == "shapes"
    assert mm.flops == pytest.approx(2 * 2 * 768**3)  # per step per rank: two 768^3 products
    assert d.top_ops[0].name == "aten::mm"
    assert d.compute_s > 0.5 * d.step_time_s
    # step time is the mean of the ProfilerStep windows of both ranks
    steps = _steps(compute_bound[0]) + _steps(compute_bound[1])
    assert d.step_time_s == pytest.approx(sum(steps) / len(steps), rel=0.05)


def test_communication_bound_gloo_run(communication_bound):
    d = diagnose(communication_bound)
    assert d.bottleneck == "communication", d.evidence
    assert d.exposed_communication_s > 0.5 * d.step_time_s
    comm_ops = [op for op in d.top_ops if op.bound == "communication"]
    assert comm_ops and comm_ops[0].name.startswith("gloo:")
    assert comm_ops[0].bytes == pytest.approx(8 * 2**20 * 4)  # the 32 MB all-reduce, once per step
    for rank in communication_bound:
        assert diagnose([rank]).bottleneck == "communication"


def test_cli_reports_both_ranks(compute_bound):
    proc = subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", "diagnose",
                           *map(str, compute_bound), "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["bottleneck"] == "compute"
    assert sorted(r["rank"] for r in out["ranks"]) == [0, 1]
    assert out["slowest_rank"]["label"] in ("rank 0", "rank 1")
    proc = subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", "diagnose",
                           *map(str, compute_bound)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "compute" in proc.stdout and "aten::mm" in proc.stdout


def test_pipeline_stages_waiting_on_each_other(tmp_path):
    """Two stages that send 16 MB activations and gradients to each other: each waits in recv while the other
    works or the tensor travels."""
    ranks = record_gloo_job(tmp_path, n_mm=512, mm_per_step=2, n_grad=4 * 2**20, mode="pipeline")
    d = diagnose(ranks)
    assert d.bottleneck == "pipeline_bubble", d.evidence
    assert d.exposed_p2p_s > 0.3 * d.step_time_s
    assert {op.name for op in d.top_ops if op.bound == "communication"} >= {"gloo:send", "gloo:recv"}


def test_uneven_ranks_name_the_slowest(tmp_path):
    """Rank 1 does ten times rank 0's matmuls before the all-reduce: rank 0 waits for it every step."""
    ranks = record_gloo_job(tmp_path, n_mm=512, mm_per_step=1, n_grad=1024, extra_mm_per_rank=9)
    d = diagnose(ranks, straggler_threshold=0.10)
    assert d.slowest_rank["rank"] == 1
    assert 1 in [s["rank"] for s in d.stragglers]
    fast, slow = sorted(d.ranks, key=lambda r: r.rank)
    assert slow.compute_s > 2 * fast.compute_s
    assert fast.exposed_communication_s > slow.exposed_communication_s
    assert d.imbalance_s == pytest.approx((slow.work_s - fast.work_s) / 2, rel=1e-6)
    assert d.scores_s["imbalance"] > d.scores_s["communication"]


FLOP_PROBE = r'''
import json, sys
import torch, torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode
torch.manual_seed(0)
a, b, w, bias = torch.randn(256, 512), torch.randn(512, 128), torch.randn(96, 512), torch.randn(96)
x, y, c = torch.randn(4, 64, 32), torch.randn(4, 32, 48), torch.randn(4, 64, 48)
img, k = torch.randn(2, 8, 32, 32), torch.randn(16, 8, 3, 3)
q, kk, v = torch.randn(2, 4, 128, 32), torch.randn(2, 4, 128, 32), torch.randn(2, 4, 128, 32)
def work():
    torch.mm(a, b); F.linear(a, w, bias); torch.bmm(x, y); torch.baddbmm(c, x, y)
    F.conv2d(img, k, stride=2, padding=1)
    F.scaled_dot_product_attention(q, kk, v); F.scaled_dot_product_attention(q, kk, v, is_causal=True)
with FlopCounterMode(display=False) as counter:
    work()
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    work()
prof.export_chrome_trace(sys.argv[1])
print(json.dumps({str(op): n for op, n in counter.get_flop_counts()["Global"].items()}))
'''


def test_flops_match_torch_flop_counter(tmp_path):
    """FLOPs from recorded shapes agree with torch.utils.flop_counter on the same calls."""
    trace = tmp_path / "probe.json"
    probe = tmp_path / "probe.py"
    probe.write_text(FLOP_PROBE)
    proc = subprocess.run([sys.executable, str(probe), str(trace)], capture_output=True, text=True, timeout=120,
                          check=True)
    reference = json.loads(proc.stdout.strip().splitlines()[-1])
    ops = {}
    for e in json.loads(trace.read_text())["traceEvents"]:
        if e.get("cat") == "cpu_op":
            ops.setdefault(e["name"], []).append(op_cost(e["name"], e["args"])[0])
    assert ops["aten::mm"][0] == pytest.approx(reference["aten.mm"])
    assert ops["aten::addmm"][0] == pytest.approx(reference["aten.addmm"], rel=0.01)  # + the bias add
    assert ops["aten::bmm"][0] == pytest.approx(reference["aten.bmm"])
    assert ops["aten::baddbmm"][0] == pytest.approx(reference["aten.baddbmm"], rel=0.02)
    assert ops["aten::mkldnn_convolution"][0] == pytest.approx(reference["aten.convolution"])
    full, causal = ops["aten::_scaled_dot_product_flash_attention_for_cpu"]
    assert full == pytest.approx(4 * 2 * 4 * 128 * 128 * 32)  # 4 B H L S E
    assert causal == pytest.approx(full / 2)
    # the composite calls above them do not count the work again
    d = diagnose([trace], top=1000)
    counted = {op.name for op in d.top_ops if op.flops}
    assert {"aten::mm", "aten::addmm", "aten::mkldnn_convolution"} <= counted
    assert not counted & {"aten::linear", "aten::conv2d", "aten::convolution", "aten::scaled_dot_product_attention"}
    assert d.steps_source == "whole_trace"
