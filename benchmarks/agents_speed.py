"""How long the agents take: one `propose` pass, and the loop's own overhead per trial (everything but the
executor's run), on the sim executor so that the run itself costs almost nothing.

    python benchmarks/agents_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from asap.agents.analyzer import Analyzer
from asap.agents.coordinator import Coordinator
from asap.memory import Memory
from asap.agents.proposer import Proposer, parse_current
from asap.cost.estimate import estimate
from asap.execute.sim import SimExecutor
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.job import Job
from asap.spec.train import TrainSpec

JOBS = [("llama3-8b on 64 TPU v5p", "llama3-8b", ("tpu-v5p", 64), TrainSpec(256, 8192), "dp=16,cp=4"),
        ("DeepSeek-V3 on 2048 H800", "deepseek-v3", ("h800", 2048), TrainSpec(15360, 4096),
         "tp=8,pp=1,ep=8,recompute=full")]


class TimedSim(SimExecutor):
    """The sim executor, timing its own runs so that the loop's overhead can be told apart."""

    spent_s = 0.0

    def _run(self, strategy):
        t0 = time.perf_counter()
        try:
            return super()._run(strategy)
        finally:
            self.spent_s += time.perf_counter() - t0


def propose_s(model, cluster, train, current) -> float:
    t0 = time.perf_counter()
    job = Job.resolve(model, cluster, train)
    s = parse_current(current, job)
    d = Analyzer(cluster).analyze(estimate(job, s))
    Proposer(job).propose(s, d)
    return time.perf_counter() - t0


def loop_overhead_s(model, cluster, train, current, budget=6) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp, Memory.open(Path(tmp) / "m.sqlite") as mem:
        ex = TimedSim(Job.resolve(model, cluster, train))
        t0 = time.perf_counter()
        r = Coordinator(Job.resolve(model, cluster, train), ex, mem, budget=budget, start=current).run()
        wall = time.perf_counter() - t0
    n = max(1, sum(t["status"] != "skipped" for t in r["trials"]))
    return (wall - ex.spent_s) / n, n


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    for label, name, (acc, devices), train, current in JOBS:
        model, cluster = load_model(name), load_cluster(acc, devices=devices)
        props = [propose_s(model, cluster, train, current) for _ in range(args.repeat)]
        over = [loop_overhead_s(model, cluster, train, current) for _ in range(max(1, args.repeat // 2))]
        print(f"{label}: propose median {statistics.median(props):.2f} s (max {max(props):.2f}); loop overhead "
              f"per trial median {statistics.median(o for o, _ in over):.2f} s over {over[0][1]} trials")


if __name__ == "__main__":
    main()
