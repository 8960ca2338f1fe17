"""The tune loop's per-run correction of the cost model: how much slower (or faster) than the catalog the machine
being tuned is, in three physical factors, fitted to the trials measured so far.

    compute    divides the compute efficiencies (GEMM, fp8 GEMM, attention, HBM) and multiplies the host and
               kernel-launch times: the machine's kernels against the family's constants;
    scale_up   divides the scale-up fabric's bandwidth (NVLink, ICI, HCCS): ``intra_node_gbps``;
    scale_out  divides the scale-out fabric's bandwidth (IB/RoCE NICs, DCN) and multiplies the collective, hop and
               sync latencies, which cross-node hops dominate: ``inter_node_gbps``.

A factor is applied to the cost model's inputs, never to its outputs, so overlap is priced again on the corrected
machine: a slower fabric exposes communication that the catalog's machine hid behind compute, which a scale on
the catalog's exposed terms cannot express (a linear fit of measured = a x compute terms + b x exposed
communication on the quick start's three trials put b at 0.06 on a fabric twice as slow).

The fit is the maximum a posteriori estimate of x = log(factors) under

    log(measured_i) = log(step_i(x)) + e_i,   e_i ~ N(0, MEASUREMENT_SIGMA^2)
    x_k ~ N(0, PRIOR_SIGMA_k^2)

i.e. nonlinear least squares (scipy's ``least_squares``) on the residuals log(step_i(x) / measured_i) /
MEASUREMENT_SIGMA and x_k / PRIOR_SIGMA_k. With fewer trials than factors the prior decides the split the trials
cannot: toward the factor a machine is most likely to be off by (the prior widths below). The posterior
covariance, (J^T J + diag(PRIOR_SIGMA^-2))^-1 with J the residuals' Jacobian, gives each factor's uncertainty
and what the next trial would teach (``information_gain``): the coordinator runs, among proposals the model cannot
tell apart, the one that narrows the factors most (D-optimal design).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from asap.spec.hardware import Cluster
from asap.spec.job import Job

FACTORS = ("compute", "scale_up", "scale_out")
# One measured step time's scatter against the model's step time (log): a few per cent between runs of one job.
MEASUREMENT_SIGMA = 0.03
# How far (log) each factor of a real machine is from its family's catalog figures, one standard deviation:
PRIOR_SIGMA = np.log(np.array([
    1.25,  # compute: large GEMMs reach 0.55-0.75 of peak across libraries, clocks and shapes (the family's 0.615)
    1.5,  # scale-up: NVLink/ICI/HCCS deliver 0.6-0.9 of nominal to collectives (NCCL, XLA, HCCL benchmarks)
    2.0,  # scale-out: half the catalog's NICs per GPU (200 vs 400 Gb/s), no rail optimization, shared fabrics
]))
LOG_BOUND = np.log(8.0)  # no factor outside [1/8, 8]: beyond that the trials are not the job the model prices
MAX_EVALUATIONS = 60  # residual evaluations per fit (each prices every trial once)
STEP = 1e-3  # finite-difference step in log(factor) for the Jacobian


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
                "trials": self.trials, "uncertainty": dict(zip(FACTORS, self.uncertainty, strict=True))}

    def short(self) -> str:
        return f"{self.compute:.2f} / {self.scale_up:.2f} / {self.scale_out:.2f}"


def corrected_cluster(cluster: Cluster, factors) -> Cluster:
    """The factors applied to the accelerator as written: a calibrated CPU cluster derives its devices' share of
    the machine from that again (``Cluster.__post_init__``), so the share is not taken twice."""
    a, u, o = (float(f) for f in factors)
    acc = cluster.written_accelerator or cluster.accelerator
    f = acc.family_constants  # the efficiency, asserted set: a corrected cluster is one the cost model prices
    eff = replace(f, gemm_efficiency=f.gemm_efficiency / a, attention_efficiency=f.attention_efficiency / a,
                  fp8_gemm_efficiency=f.fp8_gemm_efficiency / a, hbm_efficiency=f.hbm_efficiency / a,
                  host_op_s=f.host_op_s * a, kernel_overhead_s=f.kernel_overhead_s * a,
                  collective_latency_s=f.collective_latency_s * o, hop_latency_s=f.hop_latency_s * o,
                  sync_s=f.sync_s * o)
    new = replace(acc, efficiency=eff, intra_node_gbps=acc.intra_node_gbps / u,
                  inter_node_gbps=acc.inter_node_gbps / o)
    return replace(cluster, accelerator=new, written_accelerator=new)


def log_steps(job: Job, strategies, x) -> np.ndarray:
    """log(predicted step time) of each strategy on the job's cluster corrected by exp(x)."""
    from asap.cost.estimate import estimate

    machine = replace(job, cluster=corrected_cluster(job.cluster, np.exp(x)))
    return np.log([estimate(machine, s).step_time_s for s in strategies])


def sensitivities(job: Job, strategies, x) -> np.ndarray:
    """d log(step) / d log(factor), one row per strategy (forward differences)."""
    base = log_steps(job, strategies, x)
    cols = [(log_steps(job, strategies, x + STEP * np.eye(3)[k]) - base) / STEP
            for k in range(3)]
    return np.stack(cols, axis=1)


def fit_correction(job: Job, pairs: list[tuple[Any, float]]) -> Correction:
    """The MAP factors that make the catalog's (or calibrated) cluster reproduce the measured step times of
    ``pairs`` = [(strategy, measured step time s)]; no pairs: the catalog as it is."""
    from scipy.optimize import least_squares

    if not pairs:
        return Correction()
    strategies = [s for s, _ in pairs]
    log_measured = np.log([m for _, m in pairs])

    def residuals(x):
        model_minus_measured = log_steps(job, strategies, x) - log_measured
        return np.concatenate([model_minus_measured / MEASUREMENT_SIGMA, x / PRIOR_SIGMA])

    sol = least_squares(residuals, np.zeros(3), bounds=(-LOG_BOUND, LOG_BOUND), diff_step=STEP,
                        max_nfev=MAX_EVALUATIONS)
    # the solver's Jacobian of the weighted residuals at the optimum is [J / sigma_m; diag(1 / sigma_prior)], so
    # its Gram matrix is already the posterior information (posterior_covariance, without pricing J again)
    sigma = np.sqrt(np.diag(np.linalg.inv(sol.jac.T @ sol.jac)))
    a, u, o = (float(v) for v in np.exp(sol.x))
    # sigma has one entry per factor (3): the solver fits np.zeros(3)
    uncertainty = cast("tuple[float, float, float]", tuple(float(v) for v in np.exp(sigma)))
    return Correction(a, u, o, len(pairs), uncertainty)


def posterior_covariance(jacobian: np.ndarray) -> np.ndarray:
    """(J^T J / sigma_m^2 + diag(1 / sigma_prior^2))^-1 over log(factors), J = d log(step) / d log(factor)."""
    info = jacobian.T @ jacobian / MEASUREMENT_SIGMA ** 2 + np.diag(PRIOR_SIGMA ** -2.0)
    return np.linalg.inv(info)


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
