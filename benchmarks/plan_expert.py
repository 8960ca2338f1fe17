"""Does the planner rank as the experts chose? For every published run, the rank of the run's own (tp, pp)
among the planner's shapes when the run's other software knobs are kept (a benchmark, not a test).

    python benchmarks/plan_expert.py [--cases FILE] [--only SUBSTRING] [--margin GIB] [--top 5]

Per run: ``keep`` = the published strategy less the shape keys (tp, pp, dp, vpp, mbs, layer_split); the planner
ranks every fitting (tp, pp) under ``keep`` as ``asap plan`` does (the default headroom,
``search.planner.plan_headroom``, or ``--margin``); the expert's shape is priced under the same ``keep`` with its
tp and pp pinned against the whole device memory (it trained there, so it needs no headroom to count). Its
rank is 1 + the shapes predicted faster by more than ``TIE`` (1%, as tests/search/test_plan.py counts). Printed: the
rank, the expert's and the planner's best step (and whether the expert's shape also fits under the headroom:
the strict count), and the share of runs whose expert shape is among the ``--top``
best; and how many runs have a planner best predicted slower than the expert's shape (a plan that misses what
the expert ran). Default cases: ../shared/reference/published_runs_2024_2026.json where it exists, else the
packaged calibration runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from asap.errors import AsapError
from asap.search.planner import plan, plan_headroom
from asap.search.nofit import NoFitError
from asap.spec.hardware import cluster_from_dict
from asap.spec.job import Job
from asap.spec.model import model_from_dict
from asap.spec.strategy import parse_strategy
from asap.spec.train import TrainSpec
from asap.validate import load_cases

TIE = 0.01
SHAPE_KEYS = ("tp", "pp", "dp", "vpp", "mbs", "layer_split")
HELD_OUT = Path(__file__).resolve().parents[2] / "shared" / "reference" / "published_runs_2024_2026.json"


def shape_times(result) -> dict[tuple[int, int], float]:
    best: dict[tuple[int, int], float] = {}
    for e in result.candidates:
        best.setdefault((e.strategy.tp, e.strategy.pp), e.step_time_s)
    return best


def rank_case(case: dict, margin_gb: float | None):
    model = model_from_dict(case["model"], where=f"{case['id']}.model")
    cluster = cluster_from_dict(case["cluster"])
    train = TrainSpec.from_dict(case["train"])
    fixed = parse_strategy(case.get("strategy") or {}, field=f"{case['id']}.strategy")
    shape = (int(fixed.get("tp", 1)), int(fixed.get("pp", 1)))
    keep = {k: v for k, v in fixed.items() if k not in SHAPE_KEYS}
    job = Job.resolve(model, cluster, train)
    expert = plan(job, fixed={**keep, "tp": shape[0], "pp": shape[1]}, top=1).candidates[0]
    shapes = shape_times(plan(plan_headroom(job, margin_gb), fixed=keep, top=5000))
    strict = shape in shapes  # the expert's shape also fits under the headroom
    shapes[shape] = min(shapes.get(shape, expert.step_time_s), expert.step_time_s)
    rank = 1 + sum(t < shapes[shape] * (1 - TIE) for s, t in shapes.items() if s != shape)
    best_shape, best_t = min(shapes.items(), key=lambda kv: kv[1])
    return shape, rank, expert.step_time_s, best_shape, best_t, strict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=str(HELD_OUT) if HELD_OUT.exists() else None)
    ap.add_argument("--only", default="")
    ap.add_argument("--margin", type=float, default=None, help="GiB of headroom (default: the plan's default)")
    ap.add_argument("--top", type=int, default=5)
    args = ap.parse_args()
    cases = [c for c in (json.loads(Path(args.cases).read_text()) if args.cases else load_cases())
             if args.only in str(c.get("id", ""))]
    hits, slower, ranked, strict_hits = 0, [], 0, 0
    for case in cases:
        try:
            shape, rank, expert_t, best_shape, best_t, strict = rank_case(case, args.margin)
        except (AsapError, NoFitError, IndexError) as e:
            print(f"{case.get('id')}: not ranked ({str(e)[:100]})")
            continue
        ranked += 1
        hits += rank <= args.top
        strict_hits += rank <= args.top and strict
        if best_t > expert_t * (1 + 1e-9):
            slower.append(case["id"])
        print(f"{case['id']:<48} expert tp{shape[0]} pp{shape[1]} {expert_t:8.3f} s  rank {rank:>3}  "
              f"best tp{best_shape[0]} pp{best_shape[1]} {best_t:8.3f} s ({best_t / expert_t - 1:+.1%})"
              f"{'' if strict else '  (expert shape over the headroom)'}", flush=True)
    print(f"expert (tp, pp) among the {args.top} best shapes: {hits} of {ranked} ranked runs "
          f"({hits / max(ranked, 1):.0%}; {len(cases)} cases; {strict_hits} with the expert's shape also under the "
          f"headroom); planner best slower than the expert's: {len(slower)}"
          + (f" ({', '.join(slower)})" if slower else ""))


if __name__ == "__main__":
    main()
