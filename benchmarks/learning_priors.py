"""Where ``asap.cost.learning``'s prior widths and run scatters come from: the held-out residuals of the shipped runs.

    python benchmarks/learning_priors.py

Input: every shipped run's leave-one-source-out residual e = log(predicted / published) (``error_bands.json``,
from ``benchmarks/loso.py --write``: its family's constants refitted without its source) and its Jacobian J
(d log step / d log factor of each of ``LEARN_TERMS`` on the catalog, ``learning.sensitivities``). Two runs a, b
of one source share what the learning can carry from a to b; what they do not share is each run's own scatter.

1. **Prior widths** (empirical Bayes, moment estimate). Under the learning's model e = J x + eps with x ~ N(0, S)
   (S = diag(s_k^2), the terms' priors) and eps independent between runs, two runs of one source have
   E[e_a e_b] = J_a S J_b. Over the pairs of alike runs (one source, one accelerator, one architecture, one
   precision: what run_sigma does not already widen), sum(e_a e_b) against sum(J_a S J_b), split into the kernel
   terms' part and the fabric/host terms' part, gives the factor kappa^2 by which the kernel terms' prior
   variances would have to be scaled to match (fabric and host kept: the shipped runs barely exercise them, so
   they cannot measure them). Printed: kappa against the terms' widths (``learning.FITTED_KERNEL_PRIOR`` is that
   figure; the shipped runs cover every family's 16-bit and fp8 classes they hold, so every pair is "fitted").
2. **Run scatter** (a variogram). E[(e_a - e_b)^2] over one source's pairs, regressed without negative
   coefficients on 1, [another accelerator], [MoE against dense], [another precision], ln(P_a/P_b)^2,
   ln(devices_a/devices_b)^2: twice a run's own scatter and the square of each ``run_sigma`` constant.
"""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np
from scipy.optimize import nnls

from asap.cost import learning
from asap.cost.bands import error_bands
from asap.cost.learning import LEARN_TERMS, MeasuredRun, sensitivities
from asap.learn import strategy_of
from asap.validate import load_all_packaged, validate_case

KERNEL_TERMS = ("gemm", "fp8_gemm", "attention", "memory_bound")
_KEPT: dict = {}


def _keep(job, case_id):
    """``validate_case``'s corrector that changes nothing and keeps the job it priced."""
    _KEPT["job"] = job
    return job, {}


def runs() -> list[dict]:
    """Each shipped run with its held-out log residual, its J on the catalog and what run_sigma reads."""
    residual = {r["id"]: r for r in error_bands()["residuals"]}
    out = []
    for cases in load_all_packaged().values():
        for i, case in enumerate(cases):
            rec = residual.get(str(case["id"]))
            if rec is None:
                continue
            result = validate_case(case, i, correct=_keep)
            job = _KEPT["job"]
            run = MeasuredRun(job, strategy_of(job, result.strategy), result.published_step_time_s, 1.0)
            _, jac = sensitivities([run], LEARN_TERMS, np.zeros(len(LEARN_TERMS)))
            out.append({"e": math.log(1 + rec["error"]), "J": jac[0], "source": (rec["family"], rec["source"]),
                        "acc": job.cluster.accelerator.name, "moe": job.model.moe is not None,
                        "precision": job.train.precision, "params": job.model.num_params(), "devices": job.devices})
    return out


def prior_scale(rows: list[dict]) -> None:
    prior = np.array([learning.TERMS[t].prior_sigma ** 2 for t in LEARN_TERMS])
    kernel = np.array([t in KERNEL_TERMS for t in LEARN_TERMS])
    emp = ker = rest = 0.0
    n = 0
    for a, b in itertools.combinations(rows, 2):
        if (a["source"], a["acc"], a["moe"], a["precision"]) != (b["source"], b["acc"], b["moe"], b["precision"]):
            continue
        emp += a["e"] * b["e"]
        ker += float(np.sum(a["J"] * b["J"] * prior * kernel))
        rest += float(np.sum(a["J"] * b["J"] * prior * ~kernel))
        n += 1
    kappa2 = max(emp - rest, 0.0) / ker
    print(f"alike pairs of one source: {n}; mean e_a e_b {emp / n:.4f}; the widths imply {(ker + rest) / n:.4f} "
          f"(kernel terms {ker / n:.4f}, fabric and host {rest / n:.4f})")
    print(f"kernel priors' kappa = sqrt(({emp / n:.4f} - {rest / n:.4f}) / {ker / n:.4f}) = {math.sqrt(kappa2):.2f} "
          f"(asap: FITTED_KERNEL_PRIOR {learning.FITTED_KERNEL_PRIOR})")


def variogram(rows: list[dict]) -> None:
    x, y = [], []
    for a, b in itertools.combinations(rows, 2):
        if a["source"] != b["source"]:
            continue
        x.append([1.0, float(a["acc"] != b["acc"]), float(a["moe"] != b["moe"]),
                  float(a["precision"] != b["precision"]), math.log(a["params"] / b["params"]) ** 2,
                  math.log(a["devices"] / b["devices"]) ** 2])
        y.append((a["e"] - b["e"]) ** 2)
    coef, _ = nnls(np.array(x), np.array(y))
    print(f"pairs of one source: {len(y)}; rms difference {math.sqrt(np.mean(y)):.3f}")
    names = ("a run's own scatter (MEASUREMENT, MODEL)", "OTHER_ACCELERATOR", "OTHER_ARCHITECTURE", "OTHER_PRECISION",
             "SIZE (per e-fold)", "SCALE (per e-fold)")
    now = (math.hypot(learning.MEASUREMENT_SIGMA, learning.MODEL_SIGMA), learning.OTHER_ACCELERATOR_SIGMA,
           learning.OTHER_ARCHITECTURE_SIGMA, learning.OTHER_PRECISION_SIGMA, learning.SIZE_SIGMA,
           learning.SCALE_SIGMA)
    for i, (name, c, cur) in enumerate(zip(names, coef, now, strict=True)):
        fitted = math.sqrt(c / 2) if i == 0 else math.sqrt(c)
        print(f"  {name}: fitted {fitted:.3f}, asap {cur:.3f}")


def main() -> None:
    rows = runs()
    print(f"{len(rows)} shipped runs with a held-out residual", file=sys.stderr)
    prior_scale(rows)
    variogram(rows)


if __name__ == "__main__":
    main()
