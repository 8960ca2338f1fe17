"""Coverage of the 80% prediction intervals (``asap.cost.bands``): how often a run's published step lies inside.

    python benchmarks/coverage.py [--held-out FILE ...] [--write]

Three figures, each the fraction of runs whose published step time lies in the interval, with the median
relative width (high - low) / predicted beside it:

* **leave one source out** (the figure to quote): every shipped run's held-out residual (``error_bands.json``,
  from ``benchmarks/loso.py --write``: the run predicted with its family's constants refitted without its
  source) against an interval built from the residuals of the *other* sources only (the run's whole source set
  aside, so the run never shapes its own interval), widened as the shipped intervals are for what those
  other runs do not cover;
* **as shipped**: the same residuals against the intervals asap ships (built from every source, so in-sample
  for the quantiles);
* **held out**: each ``--held-out`` file (default ``../shared/reference/fp4_runs_2025.json``, runs no fit saw),
  priced with the catalog's constants as ``asap validate --cases`` does, against the shipped intervals.

``--write`` puts the tables into docs/accuracy.md between its ``<!-- coverage -->`` markers.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from asap.cost.bands import COVERAGE, error_bands, error_quantiles, quantiles_from
from asap.spec.framework import get_framework
from asap.spec.hardware import cluster_from_dict
from asap.spec.train import TrainSpec
from asap.validate import load_cases, validate_case

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "accuracy.md"
HELD_OUT = ROOT.parent / "shared" / "reference" / "fp4_runs_2025.json"


def relative_width(low: float, high: float) -> float:
    """(p / (1 + e_lo) - p / (1 + e_hi)) / p for error quantiles e_lo <= e_hi."""
    return 1.0 / (1.0 + low) - 1.0 / (1.0 + high)


def nested(records: list[dict], widening: dict[str, float]) -> list[tuple[dict, bool, float]]:
    """Each run against the interval of the other sources' residuals: (record, inside, relative width)."""
    out = []
    for r in records:
        rest = [x for x in records if x["source"] != r["source"]]
        q = quantiles_from(r["family"], r["stack"], r["precision"], rest, widening)
        out.append((r, q.low <= r["error"] <= q.high, relative_width(q.low, q.high)))
    return out


def shipped(records: list[dict], widening: dict[str, float]) -> list[tuple[dict, bool, float]]:
    out = []
    for r in records:
        q = quantiles_from(r["family"], r["stack"], r["precision"], records, widening)
        out.append((r, q.low <= r["error"] <= q.high, relative_width(q.low, q.high)))
    return out


def held_out(path: Path) -> list[tuple[dict, bool, float]]:
    """A file's runs priced with the catalog (``asap validate --cases``) against the intervals asap ships."""
    out = []
    for i, case in enumerate(load_cases(path)):
        res = validate_case(case, i)
        cluster, train = cluster_from_dict(case["cluster"]), TrainSpec.from_dict(case["train"])
        family = cluster.accelerator.family
        stack = get_framework(train.framework, family).name
        q = error_quantiles(family, stack, train.precision)
        rec = {"id": res.id, "family": family, "stack": stack, "precision": train.precision, "error": res.error}
        out.append((rec, q.low <= res.error <= q.high, relative_width(q.low, q.high)))
    return out


def line(label: str, rows: list) -> str:
    inside = sum(ok for _, ok, _ in rows)
    return (f"| {label} | {len(rows)} | {inside / len(rows):.0%} ({inside}) | "
            f"{statistics.median(w for _, _, w in rows):.0%} |")


def tables(runs: dict[str, list]) -> str:
    head = "| {} | runs | inside the 80% interval | median width |\n|---|---:|---:|---:|"
    out = [head.format("runs")]
    out += [line(label, rows) for label, rows in runs.items()]
    by_family = defaultdict(list)
    for r in runs["leave one source out"]:
        by_family[f"{r[0]['family']}/{r[0]['stack']}"].append(r)
    out += ["", head.format("leave one source out, by family/stack")]
    out += [line(k, v) for k, v in sorted(by_family.items())]
    return "\n".join(out)


def write_doc(body: str) -> None:
    text = DOC.read_text()
    pat = re.compile(r"(<!-- coverage -->\n)(?:.*?\n)?(<!-- /coverage -->)", re.S)
    if not pat.search(text):
        raise SystemExit(f"{DOC} has no <!-- coverage --> ... <!-- /coverage --> markers")
    DOC.write_text(pat.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text))
    print(f"wrote {DOC}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--held-out", action="append", type=Path, help="case files no fit saw (default: fp4 runs)")
    ap.add_argument("--write", action="store_true", help="write the tables into docs/accuracy.md")
    args = ap.parse_args()
    bands = error_bands()
    records, widening = bands["residuals"], {k: float(v["factor"]) for k, v in bands["widening"].items()}
    runs = {"leave one source out": nested(records, widening), "as shipped (in-sample quantiles)":
            shipped(records, widening)}
    for path in args.held_out or [HELD_OUT]:
        runs[f"held out: {path.name}"] = held_out(path)
    body = (f"documented coverage {COVERAGE:.0%}; widening for what the shipped runs do not cover: hardware "
            f"x{widening['hardware']:.2f}, stack x{widening['stack']:.2f}\n\n" + tables(runs))
    print(body)
    if args.write:
        write_doc(body)


if __name__ == "__main__":
    main()
