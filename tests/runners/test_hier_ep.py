"""Hierarchical expert parallelism (dispatcher=dedup) in the reference trainer, on real gloo runs.

``--devices-per-node 2`` makes the 4 CPU processes two "nodes". Under dispatcher=dedup each token goes once
to every remote node hosting one of its experts (to the rail peer there), is spread over that node by an
all-to-all inside it, and comes back the same way (``asap.runners.torch.model.MoE._dedup_dispatch_combine``).

* Loss: every run starts from the same weights and sees the same batches, so the first-step loss (a forward
  only) of the two-level exchange must equal the flat all-to-all's to float rounding (1e-5 relative, fp32);
  the second step's loss follows the gradients that came back through both levels, so it must agree too.
* Bytes: the cost model prices dedup's inter-node term as ``collectives.dedup_internode_bytes`` of the
  (token, remote node) pairs -- the expectation of those pairs under uniform routing in ``estimate``. The
  expectation is not what one run routes, so the test evaluates the same function on the run's own routing:
  the trainer counts the pairs from the router's choices (``dispatch_remote_domains``) and, separately, the
  bytes it actually handed to all-to-all for ranks of another node (``internode_dispatch_bytes``); they must
  agree exactly. Exact by construction, whatever the router picks.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")

from asap.cost import collectives  # noqa: E402
from asap.cost.roofline import act_bytes  # noqa: E402
from asap.spec.loader import load_model  # noqa: E402
from asap.spec.train import TrainSpec  # noqa: E402
from asap.runners.torch.launch import RunConfig, launch, resolve_run_strategy  # noqa: E402

GB, SEQ, STEPS = 8, 32, 2
# (strategy, devices per node)
JOBS = [("ep=4", 2), ("ep=4,dispatcher=dedup", 2), ("ep=4,dispatcher=dedup", 4), ("dp=4,ep=2,dispatcher=dedup", 1)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    spec = load_model("tiny-moe")
    train = TrainSpec(GB, SEQ, "fp32")
    configs = [RunConfig(spec, resolve_run_strategy(s, spec, train), GB, SEQ, steps=STEPS, devices_per_node=d)
               for s, d in JOBS]
    results = launch(configs, device="cpu", timeout_s=600, workdir=str(tmp_path_factory.mktemp("hier")))
    return dict(zip(JOBS, results, strict=True))


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def test_dedup_gives_the_flat_all_to_all_loss(runs):
    flat, hier = runs[("ep=4", 2)], runs[("ep=4,dispatcher=dedup", 2)]
    assert hier.strategy["dispatcher"] == "dedup" and flat.strategy["dispatcher"] == "alltoall"
    assert _rel(hier.losses[0], flat.losses[0]) <= 1e-5, (hier.losses, flat.losses)
    assert _rel(hier.losses[1], flat.losses[1]) <= 1e-5, (hier.losses, flat.losses)  # backward through both levels
    # one node: dedup is the flat exchange inside it, and nothing crosses
    one_node = runs[("ep=4,dispatcher=dedup", 4)]
    assert _rel(one_node.losses[0], flat.losses[0]) <= 1e-5
    assert one_node.internode_dispatch_bytes == 0 and one_node.dispatch_remote_domains == 0
    # every rank its own node (one ep rank per node: the node-level exchange has a single member)
    per_rank = runs[("dp=4,ep=2,dispatcher=dedup", 1)]
    assert _rel(per_rank.losses[0], flat.losses[0]) <= 1e-5
    assert per_rank.internode_dispatch_bytes > 0


def test_internode_bytes_equal_the_cost_model_term(runs):
    h = load_model("tiny-moe").hidden_size
    token_bytes = h * act_bytes("fp32")
    for job in [("ep=4,dispatcher=dedup", 2), ("dp=4,ep=2,dispatcher=dedup", 1)]:
        res = runs[job]
        assert res.dispatch_remote_domains > 0
        assert res.internode_dispatch_bytes == collectives.dedup_internode_bytes(res.dispatch_remote_domains,
                                                                                 token_bytes)
    # the flat exchange sends every routed copy on its own: at least one per (token, remote node)
    flat = runs[("ep=4", 2)]
    assert flat.internode_dispatch_bytes >= collectives.dedup_internode_bytes(flat.dispatch_remote_domains, token_bytes)


def test_estimate_prices_dedup_with_that_function(monkeypatch):
    """The estimate's inter-node dedup term goes through ``dedup_internode_bytes``: doubling what it returns
    doubles the term where the inter-node tier is the slower one (ep=64 over 8 nodes, top-8)."""
    from asap.spec.hardware import load_cluster

    cluster = load_cluster("h100-sxm", nodes=8)
    args = (cluster, np.array([4096.0]), 8, 7168 * 2, np.array([64]), np.array([1]))
    base = collectives.expert_dispatch_s(*args)["dedup"]
    real = collectives.dedup_internode_bytes
    monkeypatch.setattr(collectives, "dedup_internode_bytes", lambda n, b: 2 * real(n, b))
    doubled = collectives.expert_dispatch_s(*args)["dedup"]
    latency = 2 * collectives._latency_s(cluster, np.array([64]), np.array([True]), ring=False)
    assert doubled - latency == pytest.approx(2 * (base - latency), rel=1e-9)


def _cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", "from asap.cli import main; main()", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("k, strategy, batch", [("3", "ep=4,dispatcher=dedup", "8"), ("0", "ep=4", "8"),
                                                ("3", "dp=6,ep=2,dispatcher=dedup", "12")])
def test_bad_devices_per_node_is_refused_in_one_line(k, strategy, batch):
    """3 does not divide 4 processes; 0 is no node; 3 per node splits the ep groups {0,1}, {2,3}, {4,5} of
    dp=6 unevenly (one inside node 0, one across nodes 0 and 1)."""
    p = _cli("run", "--model", "tiny-moe", "--strategy", strategy, "--global-batch", batch, "--seq-len", "32",
             "--steps", "1", "--device", "cpu", "--devices-per-node", k, "--json")
    assert p.returncode == 2, p.stderr
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "devices-per-node" in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert p.stdout == ""
