"""Leave-one-source-out accuracy: the number to quote for runs the cost model never saw.

    python benchmarks/loso.py [--cases FILE] [--maxiter 120] [--write]

For every accelerator family and every source (a paper, a benchmark table) among that family's calibration
cases, the family's fitted constants (FIT below) are refitted on the other sources only, and the held-out
source's runs are predicted with them. A family with a single source has nothing to refit on: its held-out
prediction uses the constants it had before that source was fitted (PRIOR). Prints a Markdown table per source
(in-sample and held-out MAPE) and the held-out residuals per family; ``--write`` stores those residuals as
``asap/data/error_bands.json``, from which every estimate's ``step_time_range_s`` is drawn.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate  # noqa: E402  (the fit itself: Nelder-Mead on mean |error|)

from asap.spec import hardware  # noqa: E402
from asap.validate import load_cases, source_of  # noqa: E402

FIT = {"ampere": ("gemm_efficiency", "attention_efficiency", "hbm_efficiency"),
       "hopper": ("gemm_efficiency", "attention_efficiency", "fp8_gemm_efficiency"),
       "blackwell": ("fp8_gemm_efficiency",),
       "tpu": ("gemm_efficiency", "attention_efficiency", "tp_overlap")}
# the constants single-source families had before their one source was fitted (the first estimates, derived
# from Hopper's, for Blackwell; the first TPU estimates for TPU)
PRIOR = {"blackwell": {"fp8_gemm_efficiency": 0.60},
         "tpu": {"gemm_efficiency": 0.65, "attention_efficiency": 0.40, "tp_overlap": 0.0}}
BANDS = Path(__file__).resolve().parents[1] / "src" / "asap" / "data" / "error_bands.json"


def fit_without(family: str, cases: list, held_source: str, maxiter: int) -> hardware.Family:
    rest = [c for c in cases if source_of(c) != held_source]
    if not rest:
        return replace(hardware.FAMILIES[family], **PRIOR.get(family, {}))
    return calibrate.fit(family, rest, list(FIT[family]), maxiter=maxiter)


def family_rows(family: str, cases: list, maxiter: int):
    """(per-source rows, held-out residuals) of one family."""
    rows, residuals = [], []
    for source in sorted({source_of(c) for c in cases}):
        held = [c for c in cases if source_of(c) == source]
        constants = fit_without(family, cases, source, maxiter)
        e_held = calibrate.errors(held, constants)
        e_in = calibrate.errors(held)
        residuals.extend(e_held.tolist())
        rows.append((family, source, len(held), np.abs(e_in).mean(), np.abs(e_held).mean(), e_held.min(),
                     e_held.max()))
        print(f"  {family}: held out {source[:60]} ({len(held)} runs): {np.abs(e_held).mean():.1%}", file=sys.stderr)
    return rows, residuals


MIN_RUNS = 3  # a family with fewer held-out runs than this takes the band pooled over the others as well


def widen_thin_bands(bands: dict) -> tuple[dict, dict]:
    """The pooled band (over families with at least MIN_RUNS held-out runs), and every thinner family's band
    widened to cover it: two runs say little about the spread."""
    rich = [b for b in bands.values() if b["n"] >= MIN_RUNS] or list(bands.values())
    pooled = {"low": min(b["low"] for b in rich), "high": max(b["high"] for b in rich)}
    for b in bands.values():
        if b["n"] < MIN_RUNS:
            b["low"], b["high"] = min(b["low"], pooled["low"]), max(b["high"], pooled["high"])
    return bands, pooled


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases")
    ap.add_argument("--maxiter", type=int, default=120)
    ap.add_argument("--write", action="store_true", help="store the residuals as asap/data/error_bands.json")
    args = ap.parse_args()
    by_family = defaultdict(list)
    for c in load_cases(args.cases):
        by_family[calibrate.family_of(c)].append(c)
    table, bands = [], {}
    for family in sorted(by_family):
        if family not in FIT:
            continue
        rows, residuals = family_rows(family, by_family[family], args.maxiter)
        table += rows
        # a band always holds the prediction itself (e = 0)
        bands[family] = {"low": min(residuals + [0.0]), "high": max(residuals + [0.0]), "n": len(residuals),
                         "held_out_mape": float(np.abs(residuals).mean())}
    bands, pooled = widen_thin_bands(bands)
    print("| family | source | runs | in-sample MAPE | held-out MAPE | held-out error range |")
    print("|---|---|---:|---:|---:|---|")
    for fam, src, n, e_in, e_out, lo, hi in table:
        print(f"| {fam} | {src} | {n} | {e_in:.1%} | {e_out:.1%} | {lo:+.1%} .. {hi:+.1%} |")
    print(f"\npooled held-out range (families without runs): {pooled['low']:+.1%} .. {pooled['high']:+.1%}")
    if args.write:
        BANDS.write_text(json.dumps({"families": bands, "pooled": pooled,
                                     "made_by": "python benchmarks/loso.py --write"}, indent=2) + "\n")
        print(f"wrote {BANDS}")


if __name__ == "__main__":
    main()
