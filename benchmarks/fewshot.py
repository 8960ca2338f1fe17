"""Few-shot accuracy: what two measured runs of a source teach the cost model about its other runs.

    python benchmarks/fewshot.py [--cases FILE ...] [--maxiter 15] [--jobs N] [--cache FILE] [--write]

For every accelerator family and every source among its cases with at least three runs (a paper, a benchmark
table, an MLPerf round: ``asap.validate.source_of``), as ``benchmarks/loso.py`` does:

1. the family's fitted constants are refitted on the other sources only (``loso.refit``): the zero-shot model
   that never saw the source;
2. the source's two runs on the fewest devices (ties by id) go into a fresh Sharding Memory through
   ``asap learn --cases`` (``asap.learn.learn_cases``: the same completion, provenance and refusal as the CLI);
3. each of its other runs is predicted twice with the held-out constants: zero-shot, and with the terms those
   two runs correct (``asap.learn.fit_for``, the runs weighted for the predicted job by ``run_sigma``, as
   ``--memory`` does; the kernel priors narrowed where the *other* sources' runs fitted the family's constants).

It prints, per source and over all, the MAPE of the predicted runs zero-shot and few-shot. ``--write`` puts the
table into docs/accuracy.md between its ``<!-- fewshot -->`` / ``<!-- /fewshot -->`` markers.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import sys
import tempfile
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate  # noqa: E402
import loso  # noqa: E402

from asap.cost.bands import error_bands  # noqa: E402
from asap.learn import fit_for, learn_cases, runs_for  # noqa: E402
from asap.memory import Memory  # noqa: E402
from asap.spec import hardware  # noqa: E402
from asap.validate import load_all_packaged, load_cases, source_of, validate_case  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "accuracy.md"
LEARNED = 2  # runs per source given to asap learn
HEADER = ("| family: source | runs learned | runs predicted | zero-shot MAPE | few-shot MAPE | corrections |\n"
          "|---|---:|---:|---:|---:|---|")


def devices_of(case) -> int:
    c = case["cluster"]
    return int(c.get("devices_per_node", 1)) * int(c.get("nodes", 1))


def with_constants(job, constants):
    """The job on its cluster with the family's held-out constants (as ``validate_case(efficiency=...)``)."""
    acc = replace(job.cluster.accelerator, efficiency=constants)
    return replace(job, cluster=replace(job.cluster, accelerator=acc, written_accelerator=acc))


def held_out_constants(family: str, source: str, rest: list, maxiter: int, cache: str | None):
    """``loso.refit`` of the family without the source (None for a family loso does not fit), read from / kept in
    the ``--cache`` JSON file when one is named (the refits do not depend on what is learned)."""
    if family not in loso.FIT:
        return None
    key = f"{family}|{source}|{maxiter}"
    stored = json.loads(Path(cache).read_text()) if cache and Path(cache).exists() else {}
    if key in stored:
        return replace(hardware.FAMILIES[family], **stored[key])
    constants = loso.refit(family, rest, maxiter)
    if cache:
        stored = json.loads(Path(cache).read_text()) if Path(cache).exists() else {}
        stored[key] = {k: getattr(constants, k) for k in loso.FIT[family]}
        Path(cache).write_text(json.dumps(stored, indent=1))
    return constants


def source_row(task: tuple) -> tuple:
    """One (family, source): zero-shot and few-shot errors of its runs other than the two learned."""
    family, source, cases, maxiter, cache = task
    rest = [c for c in cases if source_of(c) != source]
    held = sorted((c for c in cases if source_of(c) == source), key=lambda c: (devices_of(c), str(c["id"])))
    constants = held_out_constants(family, source, rest, maxiter, cache)
    learned, predicted = held[:LEARNED], held[LEARNED:]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "learned.json"
        path.write_text(json.dumps(learned))
        with Memory.open(Path(tmp) / "memory.sqlite") as mem:
            learn_cases(mem, path)
            rows = mem.measured_runs()
    efficiency = {family: constants} if constants is not None else None
    # the kernel priors narrowed where the catalog was fitted on the family's runs: here, the other sources' runs
    records = [r for r in error_bands()["residuals"] if r["source"] != source]
    corrections: dict[str, list[float]] = defaultdict(list)

    def correct(job, case_id):
        runs = runs_for(rows, job)
        if constants is not None:
            runs = [replace(r, job=with_constants(r.job, constants)) for r in runs]
        result = fit_for(job, runs, records=records)
        for term, f in result.corrections().items():
            corrections[term].append(f)
        return result.apply_job(job), {}

    zero = np.array([validate_case(c, i, efficiency).error for i, c in enumerate(predicted)])
    few = np.array([validate_case(c, i, efficiency, correct=correct).error for i, c in enumerate(predicted)])
    moved = {t: float(np.exp(np.mean(np.log(v)))) for t, v in corrections.items()}
    print(f"  {family}: {source[:60]} ({len(predicted)} predicted): zero-shot {np.abs(zero).mean():.1%}, "
          f"few-shot {np.abs(few).mean():.1%}", file=sys.stderr)
    return (f"{family}: {source}", len(learned), len(predicted), zero, few, moved)


def rows_of(by_family: dict, maxiter: int, jobs: int, cache: str | None = None) -> list:
    tasks = [(family, source, by_family[family], maxiter, cache) for family in sorted(by_family)
             for source in sorted({source_of(c) for c in by_family[family]})
             if sum(source_of(c) == source for c in by_family[family]) > LEARNED]
    if jobs <= 1:
        return [source_row(t) for t in tasks]
    with multiprocessing.Pool(jobs) as pool:
        return pool.map(source_row, tasks, chunksize=1)


def table(rows: list) -> str:
    lines = [HEADER]
    for label, n_learned, n_pred, zero, few, moved in rows:
        text = ", ".join(f"{t} x{f:.2f}" for t, f in sorted(moved.items()) if abs(np.log(f)) > 0.01) or "-"
        lines.append(f"| {label} | {n_learned} | {n_pred} | {np.abs(zero).mean():.1%} | {np.abs(few).mean():.1%} "
                     f"| {text} |")
    zero = np.concatenate([r[3] for r in rows])
    few = np.concatenate([r[4] for r in rows])
    lines.append(f"\nover all {len(zero)} predicted runs of {len(rows)} sources: zero-shot (leave-one-source-out) "
                 f"MAPE {np.abs(zero).mean():.2%}, few-shot {np.abs(few).mean():.2%}; sources where few-shot is "
                 f"better: {sum(np.abs(r[4]).mean() < np.abs(r[3]).mean() for r in rows)} of {len(rows)}")
    return "\n".join(lines)


def write_doc(body: str) -> None:
    text = DOC.read_text()
    pat = re.compile(r"(<!-- fewshot -->\n)(?:.*?\n)?(<!-- /fewshot -->)", re.S)
    if not pat.search(text):
        raise SystemExit(f"{DOC} has no <!-- fewshot --> ... <!-- /fewshot --> markers")
    DOC.write_text(pat.sub(lambda m: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text))
    print(f"wrote {DOC}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", action="append", help="case files (default: both shipped files)")
    ap.add_argument("--maxiter", type=int, default=15, help="Nelder-Mead iterations per leave-one-source-out refit")
    ap.add_argument("--jobs", type=int, default=1, help="processes for the sources")
    ap.add_argument("--write", action="store_true", help="write the table into docs/accuracy.md")
    ap.add_argument("--cache", help="a JSON file keeping the leave-one-source-out constants between runs")
    args = ap.parse_args()
    files = {p: load_cases(p) for p in args.cases} if args.cases else load_all_packaged()
    by_family = defaultdict(list)
    for c in (c for v in files.values() for c in v):
        by_family[calibrate.family_of(c)].append(c)
    body = table(rows_of(by_family, args.maxiter, args.jobs, args.cache))
    print(body)
    if args.write:
        write_doc(body)


if __name__ == "__main__":
    main()
