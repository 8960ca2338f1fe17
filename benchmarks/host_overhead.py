"""Measured against predicted step times on this machine: the eight small CPU runs of the host-overhead issue.

    python benchmarks/host_overhead.py [--cluster local-cpu | --cluster CALIBRATION.yaml] [--steps 8]

Each strategy is trained for real by the reference trainer (``asap run``: gloo, fp32, global batch 8, 64
tokens) and priced by ``estimate`` on the given cluster with as many devices as the run has processes. Prints
both per strategy, their ratio, the Spearman rank correlation of the two orders, and the median of |predicted /
measured - 1|. Run ``asap calibrate --cluster local-cpu --devices 4 --out cal.yaml`` first to compare a
calibrated cluster file against the catalog's ``local-cpu``.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from asap.cost.estimate import estimate
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.job import Job
from asap.spec.train import TrainSpec
from asap.runners.torch.launch import resolve_run_strategy, run

GLOBAL_BATCH, SEQ_LEN, PRECISION = 8, 64, "fp32"
CASES = [("tiny-dense", "dp=4"), ("tiny-dense", "dp=2,tp=2"), ("tiny-dense", "pp=2,dp=2"),
         ("tiny-dense", "zero=3,dp=4"), ("tiny-dense", "pp=2,vpp=2,tp=2"), ("tiny-moe", "dp=4"),
         ("tiny-moe", "ep=2,dp=2"), ("tiny-moe", "ep=4,dp=4")]


def spearman(a, b) -> float:
    """Spearman's rho of two equal-length sequences (average ranks for ties)."""
    def ranks(x):
        x = np.asarray(x, dtype=float)
        order = np.argsort(x, kind="mergesort")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for v in np.unique(x):  # ties share their mean rank
            r[x == v] = r[x == v].mean()
        return r
    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


def measure_and_predict(cluster_spec: str, steps: int) -> list[dict]:
    train = TrainSpec(GLOBAL_BATCH, SEQ_LEN, PRECISION)
    rows = []
    for name, text in CASES:
        model = load_model(name)
        s = resolve_run_strategy(text, model, train)
        measured = run(model, s, GLOBAL_BATCH, SEQ_LEN, steps=steps, precision=PRECISION)
        cluster = load_cluster(cluster_spec, devices=s.devices)
        predicted = estimate(Job.resolve(model, cluster, train), s)
        rows.append(dict(model=name, strategy=text, nproc=s.devices, measured_s=measured.step_time_s,
                         predicted_s=predicted.step_time_s, host_s=predicted.exposed_s.get("host", 0.0)))
        print(f"  {name} {text}: measured {measured.step_time_s:.4f} s, predicted {predicted.step_time_s:.4f} s",
              file=sys.stderr, flush=True)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="local-cpu")
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args(argv)
    rows = measure_and_predict(args.cluster, args.steps)
    print("| model | strategy | procs | measured s/step | predicted s/step | of which host | ratio |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['strategy']} | {r['nproc']} | {r['measured_s']:.4f} | {r['predicted_s']:.4f} | "
              f"{r['host_s']:.4f} | {r['predicted_s'] / r['measured_s']:.2f}x |")
    rho = spearman([r["measured_s"] for r in rows], [r["predicted_s"] for r in rows])
    err = statistics.median(abs(r["predicted_s"] / r["measured_s"] - 1) for r in rows)
    print(f"\ncluster {args.cluster}: Spearman {rho:.2f}, median |predicted/measured - 1| {100 * err:.0f}%")


if __name__ == "__main__":
    main()
