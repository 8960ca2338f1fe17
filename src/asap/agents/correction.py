"""The tune loop's per-run correction of the cost model: how much slower (or faster) than the catalog the machine
being tuned is, in three physical factors, fitted to the trials measured so far by the same mechanism that
learns from a user's measured runs (``asap.cost.learning``: one path, not two).

    compute    divides the compute efficiencies (GEMM, fp8 GEMM, attention, HBM) and multiplies the host and
               kernel-launch times: the machine's kernels against the family's constants;
    scale_up   divides the scale-up fabric's bandwidth (NVLink, ICI, HCCS): ``intra_node_gbps``;
    scale_out  divides the scale-out fabric's bandwidth (IB/RoCE NICs, DCN) and multiplies the collective, hop and
               sync latencies, which cross-node hops dominate: ``inter_node_gbps``.

These are ``asap.cost.learning.TUNE_TERMS`` (scale_out: its ``scale_out_latency`` row): the loop's trials are one job on one machine in one precision, so
the kernel classes ``asap learn`` tells apart (GEMM, fp8 GEMM, attention, memory-bound, host) move together here.
A factor is applied to the cost model's inputs, never to its outputs, so overlap is priced again on the corrected
machine: a slower fabric exposes communication that the catalog's machine hid behind compute, which a scale on
the catalog's exposed terms cannot express.

The fit (``asap.cost.learning.fit``) is the maximum a posteriori estimate of x = log(factors) under

    log(measured_i) = log(step_i(x)) + e_i,   e_i ~ N(0, MEASUREMENT_SIGMA^2)
    x_k ~ N(0, PRIOR_SIGMA_k^2)

by Gauss-Newton steps, each a weighted least-squares problem in log space. With fewer trials than factors the
prior decides the split the trials cannot: toward the factor a machine is most likely to be off by. The posterior
covariance, (J^T J / MEASUREMENT_SIGMA^2 + diag(PRIOR_SIGMA^-2))^-1 with J = d log(step) / d log(factor), gives
each factor's uncertainty and what the next trial would teach (``information_gain``): the coordinator runs, among
proposals the model cannot tell apart, the one that narrows the factors most (D-optimal design).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from asap.cost import learning
from asap.cost.learning import MEASUREMENT_SIGMA, TERMS, TUNE_TERMS, MeasuredRun
from asap.spec.hardware import Cluster
from asap.spec.job import Job

FACTORS = TUNE_TERMS
NAMES = ("compute", "scale_up", "scale_out")  # each factor's name in the loop's output
# How far (log) each factor of a real machine is from its family's catalog figures, one standard deviation
# (asap.cost.learning.TERMS, with their sources)
PRIOR_SIGMA = np.array([TERMS[t].prior_sigma for t in FACTORS])
LOG_BOUND = learning.LOG_BOUND
STEP = learning.STEP


@dataclass
class Correction:
    compute: float = 1.0
    scale_up: float = 1.0
    scale_out: float = 1.0
    trials: int = 0
    # one posterior standard deviation of each factor, as a ratio (1.10: +-10%); 0 when not fitted
    uncertainty: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def factors(self) -> np.ndarray:
        return np.array([self.compute, self.scale_up, self.scale_out])

    def apply(self, cluster: Cluster) -> Cluster:
        """The cluster with its constants corrected (a factor above 1: that part of the machine is slower)."""
        return corrected_cluster(cluster, self.factors)

    def to_dict(self) -> dict[str, Any]:
        return {"compute": self.compute, "scale_up": self.scale_up, "scale_out": self.scale_out,
                "trials": self.trials, "uncertainty": dict(zip(NAMES, self.uncertainty, strict=True))}

    def short(self) -> str:
        return f"{self.compute:.2f} / {self.scale_up:.2f} / {self.scale_out:.2f}"


def corrected_cluster(cluster: Cluster, factors) -> Cluster:
    """The three factors applied to the cluster (``asap.cost.learning.corrected_cluster``)."""
    return learning.corrected_cluster(cluster, dict(zip(FACTORS, (float(f) for f in factors), strict=True)))


def _runs(job: Job, strategies) -> list[MeasuredRun]:
    return [MeasuredRun(job, s, 1.0, MEASUREMENT_SIGMA) for s in strategies]


def log_steps(job: Job, strategies, x) -> np.ndarray:
    """log(predicted step time) of each strategy on the job's cluster corrected by exp(x)."""
    return learning.log_steps(_runs(job, strategies), FACTORS, np.asarray(x, dtype=float))


def sensitivities(job: Job, strategies, x) -> np.ndarray:
    """d log(step) / d log(factor), one row per strategy (forward differences)."""
    return learning.sensitivities(_runs(job, strategies), FACTORS, np.asarray(x, dtype=float))[1]


def fit_correction(job: Job, pairs: list[tuple[Any, float]]) -> Correction:
    """The MAP factors that make the catalog's (or calibrated) cluster reproduce the measured step times of
    ``pairs`` = [(strategy, measured step time s)]; no pairs: the catalog as it is."""
    if not pairs:
        return Correction()
    runs = [MeasuredRun(job, s, m, MEASUREMENT_SIGMA, i) for i, (s, m) in enumerate(pairs)]
    fitted = learning.fit(runs, FACTORS, steps=learning.TUNE_STEPS)
    a, u, o = (fitted.factor(t) for t in FACTORS)
    uncertainty = cast("tuple[float, float, float]", tuple(fitted.uncertainty[t] for t in FACTORS))
    return Correction(a, u, o, len(pairs), uncertainty)


def posterior_covariance(jacobian: np.ndarray) -> np.ndarray:
    """(J^T J / sigma_m^2 + diag(1 / sigma_prior^2))^-1 over log(factors), J = d log(step) / d log(factor)."""
    return learning.posterior_covariance(jacobian, np.full(len(jacobian), MEASUREMENT_SIGMA), FACTORS)


def information_gain(measured_jacobian: np.ndarray, candidate_row: np.ndarray) -> float:
    """How much measuring a strategy with sensitivities ``candidate_row`` would shrink the factors' posterior
    volume: log det(A + g g^T / sigma_m^2) - log det(A) = log(1 + g^T A^-1 g / sigma_m^2) (the matrix
    determinant lemma), A the information of the trials measured so far."""
    cov = posterior_covariance(measured_jacobian.reshape(-1, 3))
    g = np.asarray(candidate_row, dtype=float)
    return float(np.log1p(g @ cov @ g / MEASUREMENT_SIGMA ** 2))


def corrected_cluster_document(cluster: Cluster, correction: Correction) -> dict[str, Any]:
    """The corrected machine as a cluster file (design.md's schema), so that ``asap estimate -c FILE`` reproduces
    the loop's corrected predictions: the accelerator by its catalog name (or as a mapping when it is not in the
    catalog), the corrected bandwidths at the top level and every efficiency constant in ``efficiency``."""
    from dataclasses import asdict

    from asap.errors import AsapError
    from asap.spec.hardware import CATALOG, EFFICIENCY_KEYS

    if cluster.measured is not None:
        raise AsapError("write-cluster", "the cluster is an `asap calibrate` file; calibrate again on the machine "
                                         "instead of writing a corrected copy of it")
    machine = correction.apply(cluster)
    acc, fam = machine.accelerator, asdict(machine.accelerator.family_constants)
    too_fast = [k for k in EFFICIENCY_KEYS if k.endswith("efficiency") and fam[k] > 1]
    if too_fast:
        raise AsapError("write-cluster", f"the correction puts {too_fast[0]} at {fam[too_fast[0]]:.3g}, above peak: "
                                         f"the trials are not the job the model prices")
    if acc.name in CATALOG:
        accelerator: Any = acc.name
    else:
        accelerator = {"name": acc.name, "family": acc.family, "peak_tflops": dict(acc.peak_tflops),
                       "hbm_gb": acc.hbm_gb, "hbm_gbps": acc.hbm_gbps, "devices_per_node": acc.devices_per_node,
                       "scale_up_domain": acc.scale_up_domain, "interconnect": acc.interconnect}
    return {"name": f"{cluster.name or acc.name}-corrected", "accelerator": accelerator,
            "devices_per_node": cluster.devices_per_node, "nodes": cluster.nodes,
            # the device memory as the catalog gives it to the planner (the driver's total: 79.65 GiB on an H100),
            # so that the corrected machine fits exactly what the catalog's does
            "scale_up_domain": cluster.scale_up_domain, "hbm_gb": round(acc.usable_hbm_gb, 4),
            "intra_node_gbps": acc.intra_node_gbps, "inter_node_gbps": acc.inter_node_gbps,
            "efficiency": {k: fam[k] for k in EFFICIENCY_KEYS}}
