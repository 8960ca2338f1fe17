"""Held-out accuracy: the numbers to quote for runs, stacks and parts the cost model was not fitted on.

    python benchmarks/loso.py [--cases FILE ...] [--maxiter 15] [--only source,stack,hardware] [--jobs N] [--write]

The cases are both shipped files (``asap.validate.PACKAGED_FILES``: 89 runs) unless ``--cases`` names others.
Three tables, each row a group of runs predicted with constants that never saw them:

* leave one *source* out: for every accelerator family and every source among its cases (a paper, a benchmark
  table, an MLPerf round: ``asap.validate.source_of``), the family's fitted constants (FIT) are refitted on the
  other sources only, and the held-out source's runs are predicted with them; a family with a single source
  falls back to PRIOR;
* leave one *stack* out (``train.framework``: megatron, deepspeed, torchtitan, maxtext; a case that names none
  is "unstated"): every family with runs on that stack is refitted on its runs on the other stacks (PRIOR where
  none remain), and the stack's runs are predicted with those constants;
* leave one *hardware family* out (Ampere, Hopper, Blackwell, TPU, Ascend, AMD): the family's fitted constants
  go back to PRIOR (what the family had from published figures before any of its runs was fitted), and its runs
  are predicted with them; a family with nothing fitted is held out by construction.

``--write`` stores the leave-one-source-out residuals as ``asap/data/error_bands.json``: one record per run
(id, family, stack, precision, source, signed error; a family with nothing fitted, Ascend, held out by
construction), from which every estimate's 80% interval ``step_time_range_s`` is drawn (``asap.cost.bands``),
and the widening factors for what the shipped runs do not cover (``widening``: the central-80% spread of the
hardware-held-out and of the stack-held-out residuals over that of the source-held-out ones, at least 1); and it
writes the three tables into docs/accuracy.md between its ``<!-- loso:NAME -->`` / ``<!-- /loso:NAME -->``
markers. ``benchmarks/coverage.py`` then measures how often the intervals hold.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate  # noqa: E402  (the fit itself: Nelder-Mead on mean |error|)

from asap.spec import hardware  # noqa: E402
from asap.validate import load_all_packaged, load_cases, source_of  # noqa: E402

FIT = {"ampere": ("gemm_efficiency", "attention_efficiency", "hbm_efficiency"),
       "hopper": ("gemm_efficiency", "attention_efficiency", "fp8_gemm_efficiency"),
       "blackwell": ("fp8_gemm_efficiency",),
       "cdna3": ("fp8_gemm_efficiency",),
       "tpu": ("gemm_efficiency", "attention_efficiency", "tp_overlap")}
# what each fitted family's constants were before any of its runs was fitted: vendor and kernel-benchmark
# figures (cuBLAS on A100 0.7 of peak on large GEMMs, FlashAttention-2's 0.35 of H100 forward, the unfused
# attention of 2021-22 Megatron at 0.1; fp8 at 0.6 of its peak on Hopper; Blackwell as Hopper; hipBLASLt fp8 at
# 0.45 of the MI300X's fp8 peak (ROCm guides); TPU matmuls at 0.85, the middle of the 80-90% of peak that the JAX
# Pallas TPU matmul guide measures on large bf16 matmuls on a v5e (docs/pallas/tpu/matmul.md, "Bigger block sizes
# help a lot!"; XLA's own matmuls at least as fast), splash attention 0.40, no collective matmul). The catalog keeps TPU's constants from the two MaxText v5p runs: fitted on both files
# they absorb the host-offload time of MaxText's custom remat in the 2024-26 TPU runs (attention 0.30), which
# is not an efficiency; the refits here use every TPU run they may, as for every family. Ascend is in neither:
# its catalog constants (asap.spec.families) are all published figures (MindSpeed's GPT-3 175B MFU, mamf-finder
# and limulidae 910B benchmarks, MC2's tiling at TP8 shapes), none fitted on its runs, so its hardware row is
# held out as it stands.
PRIOR = {"ampere": {"gemm_efficiency": 0.70, "attention_efficiency": 0.10, "hbm_efficiency": 0.60},
         "hopper": {"gemm_efficiency": 0.65, "attention_efficiency": 0.35, "fp8_gemm_efficiency": 0.60},
         "blackwell": {"fp8_gemm_efficiency": 0.60},
         "cdna3": {"fp8_gemm_efficiency": 0.45},
         "tpu": {"gemm_efficiency": 0.85, "attention_efficiency": 0.40, "tp_overlap": 0.0}}
HARDWARE = {"ampere": "Ampere", "hopper": "Hopper", "blackwell": "Blackwell", "tpu": "TPU", "ascend": "Ascend",
            "cdna3": "AMD", "cdna4": "AMD", "cpu": "CPU"}
ROOT = Path(__file__).resolve().parents[1]
BANDS = ROOT / "src" / "asap" / "data" / "error_bands.json"
DOC = ROOT / "docs" / "accuracy.md"
MIN_RUNS = 3  # a family with fewer held-out runs than this takes the band pooled over the others as well
HEADER = "| {} | runs | in-sample MAPE | held-out MAPE | held-out error range |\n|---|---:|---:|---:|---|"


def stack_of(case) -> str:
    return str(case.get("train", {}).get("framework") or "unstated")


def prior(family: str) -> hardware.Family:
    return replace(hardware.FAMILIES[family], **PRIOR.get(family, {}))


def refit(family: str, rest: list, maxiter: int) -> hardware.Family:
    """The family's FIT constants fitted on ``rest``; PRIOR when nothing remains."""
    return calibrate.fit(family, rest, list(FIT[family]), maxiter=maxiter) if rest else prior(family)


def held_errors(held: list, constants: dict) -> np.ndarray:
    """Errors of the held-out cases, each priced with its family's held-out constants (the catalog's where the
    family is not in ``constants``)."""
    return np.array([calibrate.errors([c], constants.get(calibrate.family_of(c)))[0] for c in held])


def row(label: str, held: list, constants: dict) -> tuple:
    e_held, e_in = held_errors(held, constants), calibrate.errors(held)
    print(f"  held out {label[:70]} ({len(held)} runs): {np.abs(e_held).mean():.1%}", file=sys.stderr)
    return (label, len(held), np.abs(e_in).mean(), np.abs(e_held).mean(), e_held.min(), e_held.max(), e_held,
            [record(c, float(e)) for c, e in zip(held, e_held, strict=True)])


def record(case: dict, error: float) -> dict:
    """One held-out residual with what makes runs comparable (``asap.cost.bands``): family, stack, precision."""
    return {"id": case.get("id", ""), "family": calibrate.family_of(case), "stack": stack_of(case),
            "precision": str(case.get("train", {}).get("precision", "bf16")), "source": source_of(case),
            "error": error}


def source_row(task: tuple) -> tuple:
    """One (family, source) row: the family refitted without the source, the source's runs predicted."""
    family, source, cases, maxiter = task
    rest = [c for c in cases if source_of(c) != source]
    held = [c for c in cases if source_of(c) == source]
    return (family,) + row(f"{family}: {source}", held, {family: refit(family, rest, maxiter)})


def source_rows(by_family: dict, maxiter: int, jobs: int = 1) -> list:
    tasks = [(family, source, by_family[family], maxiter) for family in sorted(f for f in by_family if f in FIT)
             for source in sorted({source_of(c) for c in by_family[family]})]
    # a family with nothing fitted (Ascend) is held out by construction: its runs' catalog residuals
    unfitted = [(family, source, by_family[family]) for family in sorted(f for f in by_family if f not in FIT)
                for source in sorted({source_of(c) for c in by_family[family]})]
    extra = [(family,) + row(f"{family}: {source}", [c for c in cases if source_of(c) == source], {})
             for family, source, cases in unfitted]
    if jobs <= 1:
        return [source_row(t) for t in tasks] + extra
    with multiprocessing.Pool(jobs) as pool:  # rows are independent fits; the order stays the tasks'
        return pool.map(source_row, tasks, chunksize=1) + extra


def stack_rows(by_family: dict, maxiter: int) -> list:
    cases = [c for v in by_family.values() for c in v]
    rows = []
    for stack in sorted({stack_of(c) for c in cases}):
        held = [c for c in cases if stack_of(c) == stack]
        constants = {f: refit(f, [c for c in by_family[f] if stack_of(c) != stack], maxiter)
                     for f in sorted({calibrate.family_of(c) for c in held}) if f in FIT}
        rows.append(row(stack, held, constants))
    return rows


def hardware_rows(by_family: dict) -> list:
    rows = []
    for name in sorted({HARDWARE.get(f, f) for f in by_family}):
        fams = [f for f in by_family if HARDWARE.get(f, f) == name]
        held = [c for f in fams for c in by_family[f]]
        rows.append(row(name, held, {f: prior(f) for f in fams if f in FIT}))
    return rows


def table(title: str, rows: list) -> str:
    lines = [HEADER.format(title)]
    lines += [f"| {r[0]} | {r[1]} | {r[2]:.1%} | {r[3]:.1%} | {r[4]:+.1%} .. {r[5]:+.1%} |" for r in rows]
    every = np.concatenate([r[6] for r in rows])
    lines.append(f"\nover all {len(every)} runs: held-out MAPE {np.abs(every).mean():.1%}; worst row "
                 f"{max(rows, key=lambda r: r[3])[0]} ({max(r[3] for r in rows):.1%})")
    return "\n".join(lines)


def bands_of(rows: list) -> tuple[dict, dict]:
    """Per family: the held-out residuals' extremes, count and MAPE; a family with fewer than MIN_RUNS widened to
    the band pooled over the others (two runs say little about the spread)."""
    residuals = defaultdict(list)
    for r in rows:
        if r[0] in FIT:  # the legacy per-family figures (proposer's model error): the refitted families
            residuals[r[0]].extend(r[7].tolist())
    bands = {f: {"low": min(e + [0.0]), "high": max(e + [0.0]), "n": len(e),
                 "held_out_mape": float(np.abs(e).mean())} for f, e in residuals.items()}
    rich = [b for b in bands.values() if b["n"] >= MIN_RUNS] or list(bands.values())
    pooled = {"low": min(b["low"] for b in rich), "high": max(b["high"] for b in rich)}
    for b in bands.values():
        if b["n"] < MIN_RUNS:
            b["low"], b["high"] = min(b["low"], pooled["low"]), max(b["high"], pooled["high"])
    return bands, pooled


def spread80(errors: np.ndarray) -> float:
    """The width of the central 80% of signed residuals: q90 - q10."""
    return float(np.quantile(errors, 0.9) - np.quantile(errors, 0.1))


def widening_factors(kept: dict) -> dict:
    """How much wider the held-out residuals are where a whole hardware family (its constants back to PRIOR) or
    a whole stack was held out than where one source was: the ratio of their central 80% spreads over the same
    runs (at least 1). ``asap.cost.bands`` widens a prediction by them for a family, precision or stack the
    shipped runs do not cover."""
    source = np.concatenate([r[6] for r in kept["source"]])
    out = {}
    for name in ("hardware", "stack"):
        held = np.concatenate([r[6] for r in kept[name]])
        out[name] = {"factor": max(1.0, spread80(held) / spread80(source)), "spread80": spread80(held),
                     "source_spread80": spread80(source), "runs": int(held.size)}
    return out


def write_doc(sections: dict) -> None:
    text = DOC.read_text()
    for name, body in sections.items():
        pat = re.compile(rf"(<!-- loso:{name} -->\n)(?:.*?\n)?(<!-- /loso:{name} -->)", re.S)
        if not pat.search(text):
            raise SystemExit(f"{DOC} has no <!-- loso:{name} --> ... <!-- /loso:{name} --> markers")
        text = pat.sub(lambda m, body=body: m.group(1) + body.rstrip("\n") + "\n" + m.group(2), text)
    DOC.write_text(text)
    print(f"wrote {DOC}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", action="append", help="case files (default: both shipped files)")
    ap.add_argument("--maxiter", type=int, default=15,
                    help="Nelder-Mead iterations per refit (each starts at the catalog's fitted constants)")
    ap.add_argument("--only", default="source,stack,hardware")
    ap.add_argument("--jobs", type=int, default=1, help="processes for the leave-one-source-out refits")
    ap.add_argument("--write", action="store_true", help="store error_bands.json and the tables in docs/accuracy.md")
    args = ap.parse_args()
    files = {p: load_cases(p) for p in args.cases} if args.cases else load_all_packaged()
    by_family = defaultdict(list)
    for c in (c for v in files.values() for c in v):
        by_family[calibrate.family_of(c)].append(c)
    only, sections, kept = args.only.split(","), {}, {}
    if args.write and set(only) != {"source", "stack", "hardware"}:
        raise SystemExit("--write needs all three tables (the widening factors compare them)")
    if "hardware" in only:
        kept["hardware"] = hardware_rows(by_family)
        sections["hardware"] = table("hardware family held out", kept["hardware"])
    if "stack" in only:
        kept["stack"] = stack_rows(by_family, args.maxiter)
        sections["stack"] = table("stack held out", kept["stack"])
    if "source" in only:
        rows = source_rows(by_family, args.maxiter, args.jobs)
        kept["source"] = [r[1:] for r in rows]
        sections["source"] = table("family: source held out", kept["source"])
        bands, pooled = bands_of([(r[0],) + r[1:] for r in rows])
        sections["source"] += f"\n\npooled held-out range (families without runs): {pooled['low']:+.1%} .. " \
                              f"{pooled['high']:+.1%}"
        if args.write:
            residuals = sorted((x for r in kept["source"] for x in r[7]), key=lambda x: x["id"])
            factors = widening_factors(kept)
            BANDS.write_text(json.dumps({"residuals": residuals, "widening": factors, "families": bands,
                                         "pooled": pooled, "made_by": "python benchmarks/loso.py --write"},
                                        indent=2) + "\n")
            print(f"wrote {BANDS}")
    for body in sections.values():
        print(body + "\n")
    if args.write:
        write_doc(sections)


if __name__ == "__main__":
    main()
