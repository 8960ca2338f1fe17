"""Peak RSS and time of ``plan`` on a big space (a benchmark, not a test).

    python benchmarks/plan_memory.py [--heads 192 --experts 384 --layers 240 --devices 20160] [--time-limit 60]

The default job is DeepSeek-V3 reshaped (192 heads, 384 experts, 240 layers) on 20,160 GB200 devices at 128K
tokens: about 1.6e7 legal configurations. Prints the space, the configurations priced, whether the time limit
stopped the search, the wall time and the peak resident memory (ru_maxrss) of this process.

On a shared 2-core machine, the default job: 3,560 MB and 26.1 s when ``plan`` materialised the whole space
before pricing; 264 MB and 18.0 s block by block (``Space.blocks``: only the rows a result can show are kept).
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import time

from asap.search.planner import plan
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.job import Job
from asap.spec.train import TrainSpec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("heads", 192), ("experts", 384), ("layers", 240), ("devices", 20160),
                          ("global-batch", 20160), ("seq-len", 131072)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--time-limit", type=float, default=60.0)
    a = ap.parse_args()
    base = load_model("deepseek-v3")
    model = dataclasses.replace(base, num_layers=a.layers, num_attention_heads=a.heads,
                                moe=dataclasses.replace(base.moe, num_experts=a.experts))
    t0 = time.perf_counter()
    r = plan(Job.resolve(model, load_cluster("gb200", devices=a.devices), TrainSpec(a.global_batch, a.seq_len)),
             time_limit_s=a.time_limit)
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"space {r.space:,} configurations, priced {r.searched:,} ({r.fitting:,} fit); stopped early: "
          f"{r.stopped_early}{' (' + r.stop_reason + ')' if r.stop_reason else ''}; {wall:.1f} s; peak RSS "
          f"{peak_mb:,.0f} MB")


if __name__ == "__main__":
    main()
