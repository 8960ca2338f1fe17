"""CPU seconds per phase of ``plan`` on the two headline jobs (a benchmark, not a test): less noisy than wall
time on a shared machine, and what decides the time under a CPU hog.

    PYTHONPATH=src python benchmarks/plan_cpu.py [--repeat 5]

Per job, after one warm-up call: the process CPU per plan and the median wall time, and the thread CPU of
the pricing threads (``search.pricing.price_chunk``), of the main thread while the space is priced (block
enumeration, merging: ``search_space``) and of the serial tail (the layer-split search,
``search.planner.adopt_stage_splits``). Compare two trees by running it in each, interleaved.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import asap.search.planner as planner
import asap.search.pricing as pricing
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec

JOBS = [("deepseek-v3", "h800", 256, 15360, 4096), ("llama3.1-405b", "h100-sxm", 2048, 2048, 8192)]
spent: dict[str, float] = {}
lock = threading.Lock()


def timed(module, name: str, phase: str) -> None:
    """Wrap ``module.name`` so that its thread CPU adds to ``spent[phase]``."""
    f = getattr(module, name)

    def wrapper(*args, **kwargs):
        t0 = time.thread_time()
        try:
            return f(*args, **kwargs)
        finally:
            with lock:
                spent[phase] = spent.get(phase, 0.0) + time.thread_time() - t0

    setattr(module, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    n = ap.parse_args().repeat
    timed(pricing, "price_chunk", "pricing threads")
    timed(planner, "search_space", "main thread while pricing")
    timed(planner, "adopt_stage_splits", "layer-split tail")
    for model, acc, nodes, gb, seq in JOBS:
        job = planner.plan_headroom(Job.resolve(load_model(model), load_cluster(acc, nodes=nodes), TrainSpec(gb, seq)))
        planner.plan(job, top=5)
        spent.clear()
        cpu, walls = 0.0, []
        for _ in range(n):
            c0, w0 = time.process_time(), time.perf_counter()
            planner.plan(job, top=5)
            cpu += time.process_time() - c0
            walls.append(time.perf_counter() - w0)
        print(f"{model}: process CPU {cpu / n:.3f} s per plan, wall median {statistics.median(walls):.3f} s; "
              + ", ".join(f"{k} {v / n:.3f} s" for k, v in spent.items()), flush=True)


if __name__ == "__main__":
    main()
