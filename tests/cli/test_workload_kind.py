"""diagnose says what kind of workload a trace holds and gives the LLM knowledge only to LLM traces (issue 47): the
HTA recommendation-model traces (FBGEMM embedding lookups) and the CNN trace (cuDNN convolutions and batch norm)
get none; a transformer step recorded here (attention and matmul layers) gets it. A host-bound step is split
into Python dispatch, kernel launches and the data loader from the trace's CPU events."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from asap.profile.diagnose import diagnose
from asap.profile.workload import host_split, raw_events, workload_of
from conftest import SHARED, run_cli

HTA = SHARED / "traces" / "hta"
RECSYS = HTA / "trace_diff_control_control.json.gz"
CNN = HTA / "nccl_parser_config_nccl_data.json.gz"
JOB = ["-m", "llama3-8b", "-c", "dgx-a100-1node", "-b", "32", "-s", "2048", "-S", "dp=8"]

# one transformer block (attention and MLP) trained for three steps on this CPU, under the PyTorch profiler
TRANSFORMER = r'''
import sys, torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule
torch.manual_seed(0); torch.set_num_threads(1)
d, h, t = 64, 4, 128
qkv, out, up, down = (torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d), torch.nn.Linear(d, 4 * d),
                      torch.nn.Linear(4 * d, d))
params = [p for m in (qkv, out, up, down) for p in m.parameters()]
opt = torch.optim.SGD(params, lr=1e-3)
x = torch.randn(4, t, d)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=schedule(wait=0, warmup=1, active=2),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as prof:
    for _ in range(3):
        q, k, v = qkv(x).view(4, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(4, t, d)
        y = x + out(a)
        y = y + down(F.gelu(up(y)))
        y.square().mean().backward()
        opt.step(); opt.zero_grad()
        prof.step()
'''


@pytest.mark.parametrize("trace,kind", [(RECSYS, "recommendation"), (CNN, "cnn")])
def test_non_llm_traces_get_no_llm_parallelism_advice(trace, kind):
    for extra in ([], JOB):
        out = json.loads(run_cli("diagnose", str(trace), *extra, "--json").stdout)
        assert out["workload"]["kind"] == kind
        assert out["next_steps"]["knowledge"] == []
    human = run_cli("diagnose", str(trace)).stdout
    assert "no LLM parallelism advice" in human and "try (" not in human
    for word in ("tensor parallel", "micro-batch", "tp /2", "mbs x2"):
        assert word not in human


def test_the_host_bound_cnn_step_is_python_dispatch_not_launches():
    split = host_split(raw_events(CNN))
    assert split is not None and split.steps == 3
    # the CPU's forward and backward dispatch per step is some twenty times its kernel launches
    assert split.python_dispatch_s > 0.15 and 0.005 < split.kernel_launch_s < 0.012
    assert split.dominant == "Python and framework dispatch"
    d = diagnose([CNN])
    assert d.bottleneck == "host" and any("Python and framework dispatch" in e for e in d.evidence)


def test_a_transformer_trace_is_llm_and_gets_dense_advice(tmp_path):
    from asap.agents.knowledge import load_knowledge
    from asap.cli.diagnose import next_steps

    trace = tmp_path / "block.json"
    p = subprocess.run([sys.executable, "-c", TRANSFORMER, str(trace)], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    w = workload_of(raw_events(trace))
    assert w is not None and w.kind.value == "llm" and w.shares["attention"] > 0 and w.shares["matmul"] > 0
    moves = next_steps(diagnose([trace]))["knowledge"]
    kinds = {e.id: e.model_kinds for e in load_knowledge()}
    assert moves and all(kinds[m["id"]] == ["any"] or "dense" in kinds[m["id"]] for m in moves)
