"""Plans to diff between two trees: a speed change must leave every plan float-identical (a check, not a test).

    PYTHONPATH=src python benchmarks/plan_identical.py OUT.jsonl        # in each tree (a worktree of main, yours)
    cmp base.jsonl mine.jsonl

Each job of ``JOBS`` is planned as ``asap plan`` plans it (``plan_headroom``, top 5), with and without
``include_oom``; each line is the job and ``plan(...).to_dict()`` less the search's wall time (``search_time_s``),
keys sorted, so the files are byte-identical where the plans are. A plan the planner refuses is its one-line
error. The wall and CPU seconds of each plan go to stderr.
"""

from __future__ import annotations

import json
import sys
import time

from asap.errors import AsapError
from asap.search.planner import plan, plan_headroom
from asap.spec.hardware import load_cluster
from asap.spec.job import Job
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec

JOBS = [  # model, cluster, nodes (None: the preset's), global batch, sequence, framework (None: the default)
    ("deepseek-v3", "h800", 256, 15360, 4096, None),
    ("llama3.1-405b", "h100-sxm", 2048, 2048, 8192, None),
    ("llama3-70b", "dgx-h100-8node", None, 256, 8192, "megatron"),
    ("llama3-70b", "dgx-h100-8node", None, 256, 8192, "torchtitan"),
    ("mixtral-8x7b", "dgx-h100-8node", None, 256, 4096, None),
    ("mixtral-8x22b", "dgx-h100-64node", None, 1024, 4096, None),
    ("qwen3-30b-a3b", "dgx-h100-8node", None, 512, 4096, None),
    ("qwen3-235b-a22b", "dgx-h100-64node", None, 2048, 4096, None),
    ("gpt3-175b", "dgx-a100-8node", None, 1536, 2048, None),
    ("telechat3-105b", "ascend-910b-64node", None, 1024, 4096, None),
    ("deepseek-v3", "dgx-h100-64node", None, 4096, 4096, None),
]
VARYING = ("search_time_s",)


def without_timing(d):
    if isinstance(d, dict):
        return {k: without_timing(v) for k, v in d.items() if k not in VARYING}
    if isinstance(d, list):
        return [without_timing(v) for v in d]
    return d


def main() -> None:
    with open(sys.argv[1], "w") as out:
        for model, acc, nodes, gb, seq, fw in JOBS:
            job = plan_headroom(Job.resolve(load_model(model), load_cluster(acc, nodes=nodes),
                                            TrainSpec(gb, seq, framework=fw)))
            for oom in (False, True):
                t0, c0 = time.perf_counter(), time.process_time()
                try:
                    d = without_timing(plan(job, top=5, include_oom=oom).to_dict())
                except AsapError as e:
                    d = {"error": str(e)}
                print(f"{model} {acc} {nodes} {fw} include_oom={oom}: {time.perf_counter() - t0:.2f} s wall, "
                      f"{time.process_time() - c0:.2f} s CPU", file=sys.stderr, flush=True)
                out.write(json.dumps({"job": [model, acc, nodes, gb, seq, fw, oom], "plan": d}, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
