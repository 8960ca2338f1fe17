"""How long ``plan`` takes on every calibration case shipped with the package (a benchmark, not a test).

    python benchmarks/plan_cases.py [--repeat 3] [--only SUBSTRING] [--cases FILE]

For each case of ``asap.validate.load_cases()`` two plans are timed, ``--repeat`` times each:

* published: the case's published knobs fixed, ``plan(Job.resolve(model, cluster, train), fixed=fixed, top=5)``, as ``asap validate``
  completes a case; when nothing fits it falls back to ``include_oom=True`` (as ``best_completion`` does), and
  the row is marked ``oom``;
* free: nothing fixed, ``plan(plan_headroom(Job.resolve(model, cluster, train)), top=5)`` as ``asap plan``
  plans it (the default headroom); if the planner refuses (``AsapError``) the one-line reason is printed instead
  of a time.

Per case: the id, the configurations searched and the median and max seconds of each plan; then the slowest
case of each kind against the target of ``TARGET_S`` seconds. The first call in a process also fills the
per-process caches (event simulations of unequal interleaved chunks), so the max of a case often is its first
call. ``--only`` keeps the cases whose id contains SUBSTRING. HiGHS (the pipeline-stage ILP) may print a banner
on stdout.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

from asap.errors import AsapError
from asap.search.planner import PlanResult, plan, plan_headroom
from asap.search.nofit import NoFitError
from asap.spec.hardware import cluster_from_dict
from asap.spec.model import model_from_dict
from asap.spec.strategy import parse_strategy
from asap.spec.job import Job
from asap.spec.train import TrainSpec
from asap.validate import load_cases

TARGET_S = 3.0  # issue 32: every published run planned in under 3 s


class Timing:
    """The times of one plan of one case, or the reason it has none."""

    def __init__(self, searched: int = 0, times: list[float] | None = None, oom: bool = False,
                 error: str | None = None):
        self.searched, self.times, self.oom, self.error = searched, times or [], oom, error

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def max(self) -> float:
        return max(self.times)


def time_plan(run: Callable[[], tuple[PlanResult, bool]], repeat: int) -> Timing:
    times, result, oom = [], None, False
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            result, oom = run()
        except AsapError as e:
            return Timing(error=str(e))
        times.append(time.perf_counter() - t0)
    return Timing(searched=result.searched, times=times, oom=oom)


def published_plan(model, cluster, train, fixed: dict[str, Any]) -> tuple[PlanResult, bool]:
    try:
        return plan(Job.resolve(model, cluster, train), fixed=fixed, top=5), False
    except NoFitError:
        return plan(Job.resolve(model, cluster, train), fixed=fixed, top=5, include_oom=True), True


def load(case: dict[str, Any], index: int):
    cid = str(case.get("id", f"cases[{index}]"))
    model = model_from_dict(case["model"], where=f"{cid}.model")
    cluster = cluster_from_dict(case["cluster"])
    train = TrainSpec.from_dict(case["train"])
    fixed = parse_strategy(case.get("strategy") or {}, field=f"{cid}.strategy")
    return cid, model, cluster, train, fixed


def cell(t: Timing) -> str:
    if t.error is not None:
        return f"{'-':>10} {'-':>8} {'-':>8}  "
    return f"{t.searched:>10,} {t.median:>8.2f} {t.max:>8.2f}{' oom' if t.oom else '    '}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="plans per case and kind (default 3)")
    ap.add_argument("--only", default="", metavar="SUBSTRING", help="only the cases whose id contains this")
    ap.add_argument("--cases", default=None, metavar="FILE",
                    help="a file of published runs (default: the packaged calibration runs), e.g. "
                         "../shared/reference/published_runs_2024_2026.json")
    args = ap.parse_args()
    cases = [(i, c) for i, c in enumerate(load_cases(args.cases)) if args.only in str(c.get("id", ""))]
    if not cases:
        raise SystemExit(f"no case id contains {args.only!r}")
    rows: list[tuple[str, Timing, Timing]] = []
    width = max(len(str(c.get("id", ""))) for _, c in cases)
    print(f"{'case':<{width}}  {'published':^32}  {'free':^32}")
    print(f"{'':<{width}}  {'searched':>10} {'median s':>8} {'max s':>8}      {'searched':>10} {'median s':>8} "
          f"{'max s':>8}")
    for i, case in cases:
        try:
            cid, model, cluster, train, fixed = load(case, i)
        except (AsapError, KeyError) as e:
            print(f"{str(case.get('id', i)):<{width}}  cannot load: {e}")
            continue
        pub = time_plan(lambda model=model, cluster=cluster, train=train, fixed=fixed:
                        published_plan(model, cluster, train, fixed), args.repeat)
        free = time_plan(lambda model=model, cluster=cluster, train=train: (plan(plan_headroom(Job.resolve(model, cluster, train)), top=5), False),
                         args.repeat)
        rows.append((cid, pub, free))
        line = f"{cid:<{width}}  {cell(pub)}  {cell(free)}"
        for kind, t in (("published", pub), ("free", free)):
            if t.error is not None:
                line += f"  [{kind}: {t.error}]"
        print(line, flush=True)
    for kind, k in (("published", 1), ("free", 2)):
        timed = [(r[0], r[k]) for r in rows if r[k].error is None]
        if not timed:
            print(f"slowest {kind}: none timed")
            continue
        cid, t = max(timed, key=lambda x: x[1].median)
        over = [c for c, tt in timed if tt.median > TARGET_S]
        verdict = f"under the {TARGET_S:g} s bar" if t.median <= TARGET_S else \
            f"OVER the {TARGET_S:g} s bar ({len(over)} case(s) over: {', '.join(over)})"
        print(f"slowest {kind}: {cid} median {t.median:.2f} s (max {t.max:.2f} s, {t.searched:,} configurations), "
              f"{verdict}; {len(timed)} of {len(rows)} timed")


if __name__ == "__main__":
    main()
