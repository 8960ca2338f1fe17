"""How long `asap propose` takes as a command (start-up included) on DeepSeek-V3 over 2048 H800: the median wall
time of N runs, and the in-process time of one proposal pass. The target is under 3 s.

    python benchmarks/propose_cli.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

ARGS = ["propose", "-m", "deepseek-v3", "-c", "h800", "--devices", "2048", "-b", "15360", "-s", "4096",
        "-S", "tp=1,pp=16,ep=64,recompute=full,dispatcher=alltoall", "--json"]


def command_s() -> float:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", "from asap.cli import main; main()", *ARGS], capture_output=True,
                       text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    return time.perf_counter() - t0


def in_process_s() -> float:
    from asap.agents.analyzer import Analyzer
    from asap.agents.proposer import Proposer, parse_current
    from asap.cost.estimate import estimate
    from asap.spec.hardware import load_cluster
    from asap.spec.loader import load_model
    from asap.spec.job import Job
    from asap.spec.train import TrainSpec

    m, c, t = load_model("deepseek-v3"), load_cluster("h800", devices=2048), TrainSpec(15360, 4096)
    t0 = time.perf_counter()
    job = Job.resolve(m, c, t)
    s = parse_current(ARGS[ARGS.index("-S") + 1], job)
    Proposer(job).propose(s, Analyzer(c).analyze(estimate(job, s)))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    n = ap.parse_args().repeat
    runs = [command_s() for _ in range(n)]
    inner = [in_process_s() for _ in range(n)]
    print(f"asap {' '.join(ARGS)}")
    print(f"command: median {statistics.median(runs):.2f} s over {n} runs (min {min(runs):.2f}, max {max(runs):.2f})")
    print(f"in process: median {statistics.median(inner):.2f} s (the proposal pass without start-up)")


if __name__ == "__main__":
    main()
