"""How big the search space is and how long ``plan`` takes on two large jobs (a benchmark, not a test).

    python benchmarks/plan_speed.py [--repeat 3]

Target (issue 3): under 2 s each on a 2-core machine, including the pipeline-stage ILP for the best candidates.
The first call also fills the per-process caches (the event simulations of unequal interleaved chunks), so
it is reported apart from the median.
"""

from __future__ import annotations

import argparse
import statistics
import time

from asap.search.planner import plan
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.job import Job
from asap.spec.train import TrainSpec

JOBS = [
    ("DeepSeek-V3 on 2048 H800", "deepseek-v3", "h800", 256, 15360, 4096),
    ("Llama 3.1 405B on 16384 H100", "llama3.1-405b", "h100-sxm", 2048, 2048, 8192),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for title, model, acc, nodes, gb, seq in JOBS:
        m, c, t = load_model(model), load_cluster(acc, nodes=nodes), TrainSpec(gb, seq)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = plan(Job.resolve(m, c, t), {}, top=5)
            times.append(time.perf_counter() - t0)
        best = r.candidates[0]
        print(f"{title}: space {r.searched:,} configurations ({r.fitting:,} fit); plan first call {times[0]:.2f} s, "
              f"median {statistics.median(times):.2f} s (min {min(times):.2f} s); best {best.strategy} "
              f"{best.step_time_s:.2f} s/step, MFU {best.mfu:.1%}")


if __name__ == "__main__":
    main()
