"""How well ``asap tune`` learns a machine that differs from the catalog (a benchmark, not a test).

    python benchmarks/tune_recovery.py [--budget 6]

Each row is a hidden machine: the catalog's 8 DGX H100 nodes with its compute (GEMM, attention, HBM
efficiencies), its scale-up fabric (NVLink bandwidth) and its scale-out fabric (NIC bandwidth) slowed by the
factors in the first columns. The sim executor "measures" every trial on that machine; the loop starts from the
catalog. Printed: the factors the loop fitted (with one posterior standard deviation), the number of measured
trials, the loop's best step time over the hidden machine's own best plan (1.000: it found the best), and the
mean error of its corrected predictions against the catalog's on the trials after the first.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from asap.agents.coordinator import Coordinator
from asap.agents.correction import corrected_cluster
from asap.memory import Memory
from asap.execute.sim import SimExecutor
from asap.search.planner import plan
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.job import Job
from asap.spec.train import TrainSpec

HIDDEN = [(1.0, 1.0, 1.0), (1.2, 1.0, 1.0), (1.0, 1.5, 1.0), (1.0, 1.0, 2.0), (1.2, 1.0, 2.0), (1.0, 1.5, 2.0),
          (1.2, 1.5, 2.0), (0.9, 1.0, 0.5)]


def mean_error(trials: list[dict], key: str) -> float:
    ok = [t for t in trials if t["status"] == "ok"][1:]
    return sum(abs(t[key] / t["measured_step_time_s"] - 1) for t in ok) / len(ok) if ok else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=6)
    args = ap.parse_args()
    m, c, t = load_model("llama3-70b"), load_cluster("dgx-h100-8node"), TrainSpec(256, 8192)
    print(f"llama3-70b on {c.num_devices} x {c.accelerator.name}, global batch 256 x 8192, budget {args.budget}")
    print(f"{'hidden c/up/out':>16} {'fitted compute':>15} {'scale-up':>13} {'scale-out':>13} {'trials':>6} "
          f"{'best/machine':>12} {'err corr':>8} {'err cat':>8} {'s':>5}")
    for hidden in HIDDEN:
        machine = corrected_cluster(c, hidden)
        machine_best = plan(Job.resolve(m, machine, t), top=1, split_candidates=0).candidates[0].step_time_s
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp, Memory.open(Path(tmp) / "m.sqlite") as mem:
            r = Coordinator(Job.resolve(m, c, t), SimExecutor(Job.resolve(m, machine, t)), mem, budget=args.budget).run()
        took = time.perf_counter() - start
        k, u = r["correction"], r["correction"]["uncertainty"]
        fitted = [f"{k[f]:.2f} ±{(u[f] - 1) * 100:3.0f}%" for f in ("compute", "scale_up", "scale_out")]
        measured = sum(x["status"] == "ok" for x in r["trials"])
        print(f"{'/'.join(f'{h:g}' for h in hidden):>16} {fitted[0]:>15} {fitted[1]:>13} {fitted[2]:>13} "
              f"{measured:>6} {r['best']['measured_step_time_s'] / machine_best:>12.3f} "
              f"{mean_error(r['trials'], 'predicted_step_time_s'):>8.1%} "
              f"{mean_error(r['trials'], 'catalog_step_time_s'):>8.1%} {took:>5.1f}")


if __name__ == "__main__":
    main()
