"""Fit the efficiency constants of one accelerator family to the calibration cases that use it.

    python benchmarks/calibrate.py ampere hopper [--cases FILE] [--holdout 0.3]

The cases are both shipped files (89 runs) unless --cases names one.

Prints the fitted constants, the per-case errors, and (with --holdout) the error on cases left out of the fit,
so that the accuracy on runs the model never saw is visible. The constants in asap/spec/hardware.py are
rounded from this fit; nothing here names a model or a case.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import replace

import numpy as np
from scipy.optimize import minimize

from asap.spec import hardware
from asap.validate import load_all_packaged, load_cases, validate_case

PARAMS = ("gemm_efficiency", "gemm_half_dim", "attention_efficiency", "fp8_gemm_efficiency", "hbm_efficiency",
          "net_efficiency", "kernel_overhead_s", "tp_overlap", "overlap_tax")
BOUNDS = {"gemm_efficiency": (0.4, 0.95), "gemm_half_dim": (8.0, 1024.0), "attention_efficiency": (0.1, 0.85),
          "fp8_gemm_efficiency": (0.3, 0.9), "hbm_efficiency": (0.5, 0.95), "net_efficiency": (0.4, 1.0),
          "kernel_overhead_s": (1e-6, 4e-5), "tp_overlap": (0.0, 0.9), "overlap_tax": (0.0, 0.5)}


def family_of(case) -> str:
    acc = case["cluster"]["accelerator"]
    return acc.get("family", "hopper") if isinstance(acc, dict) else hardware.get_accelerator(acc).family


def errors(cases, constants: hardware.Family | None = None) -> np.ndarray:
    """Per-case errors, priced with ``constants`` for their family (the catalog's when None)."""
    override = {constants.name: constants} if constants is not None else None
    return np.array([validate_case(c, efficiency=override).error for c in cases])


def constants_at(x, family, params) -> hardware.Family:
    lo = np.array([BOUNDS[p][0] for p in params])
    hi = np.array([BOUNDS[p][1] for p in params])
    return replace(hardware.FAMILIES[family], **dict(zip(params, np.clip(x, lo, hi), strict=True)))


def objective(x, family, cases, params):
    e = np.abs(errors(cases, constants_at(x, family, params)))
    return e.mean() + 2.0 * np.maximum(e - 0.30, 0).sum() / len(e)


def fit(family, cases, params, maxiter: int = 600) -> hardware.Family:
    x0 = np.array([getattr(hardware.FAMILIES[family], p) for p in params])
    res = minimize(objective, x0, args=(family, cases, params), method="Nelder-Mead",
                   options={"maxiter": maxiter, "xatol": 1e-3, "fatol": 1e-4})
    return constants_at(res.x, family, params)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("families", nargs="+")
    ap.add_argument("--cases")
    ap.add_argument("--holdout", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--maxiter", type=int, default=600)
    ap.add_argument("--params", default=",".join(PARAMS), help="the constants to fit; the others keep their values")
    ap.add_argument("--bound", action="append", default=[], help="name=lo:hi to narrow a constant's range")
    args = ap.parse_args()
    for b in args.bound:
        name, rng = b.split("=")
        lo, hi = rng.split(":")
        BOUNDS[name] = (float(lo), float(hi))
    cases = load_cases(args.cases) if args.cases else [c for v in load_all_packaged().values() for c in v]
    for fam in args.families:
        mine = [c for c in cases if family_of(c) == fam]
        random.Random(args.seed).shuffle(mine)
        n_out = int(round(args.holdout * len(mine)))
        held, used = mine[:n_out], mine[n_out:]
        f = fit(fam, used, [p for p in args.params.split(",") if p], maxiter=args.maxiter)
        print(f"{fam}: " + ", ".join(f"{p}={getattr(f, p):.4g}" for p in PARAMS))
        for c, e in zip(used, errors(used, f), strict=True):
            print(f"  fit   {c['id']:55s} {e:+.1%}")
        if held:
            eh = errors(held, f)
            for c, e in zip(held, eh, strict=True):
                print(f"  held  {c['id']:55s} {e:+.1%}")
            print(f"  held-out MAPE {np.abs(eh).mean():.1%}")
        print(f"  fit MAPE {np.abs(errors(used, f)).mean():.1%}")


if __name__ == "__main__":
    main()
