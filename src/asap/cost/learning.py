"""What measured runs teach the cost model: a factor per named term of the machine, fitted to the runs' step times
and shrunk toward the catalog. One mechanism for both users of it: ``asap learn`` / ``--memory`` (the runs a user
measured, ``asap.learn``) and the tune loop's recalibration (its own trials, ``asap.agents.correction``).

A term is a part of the machine the cost model prices from a catalog constant (``TERMS``: one row each): the
bf16/fp16 GEMM rate, the fp8 GEMM rate, the attention kernels, the memory-bound kernels, the host's dispatch,
the scale-up fabric (NVLink, ICI, HCCS), the scale-out fabric (IB/RoCE, DCN) and, for the tune loop's one-machine
fit, all the compute constants together. A factor f_k > 1 says that part of the machine is slower than the
catalog: its efficiencies are divided by f_k, its bandwidths divided, its per-call times multiplied
(``corrected_cluster``). A factor is applied to the cost model's *inputs*, never to its outputs, so overlap,
the bubble and the critical path are priced again on the corrected machine.

The fit. With x_k = log f_k, run i's predicted step t_i(x), its measured step m_i and its scatter sigma_i:

    log m_i = log t_i(x) + e_i,        e_i ~ N(0, sigma_i^2)          (the runs)
    x_k ~ N(0, s_k^2)                                                  (the catalog: prior width s_k per term)

The maximum a posteriori x is found by Gauss-Newton: linearised at x, log t_i(x + d) ~ log t_i(x) + J_i d with
J_ik = d log t_i / d x_k (forward differences: the share of run i's step that term k carries, overlap included),
each step is the small weighted least-squares problem

    d = argmin  sum_i (r_i - J_i d)^2 / sigma_i^2 + sum_k (x_k + d_k)^2 / s_k^2,     r_i = log m_i - log t_i(x)
      = (J^T W J + P)^-1 (J^T W r - P x),      W = diag(1 / sigma_i^2),  P = diag(1 / s_k^2)

From x = 0 the first step is x = (J^T W J + P)^-1 J^T W r, by hand for one run and one term:

    x = (J r / sigma^2) / (J^2 / sigma^2 + 1 / s^2) = r / J * (J^2 s^2) / (J^2 s^2 + sigma^2)

so one run moves a term by the share of its error that term can carry, shrunk by J^2 s^2 / (J^2 s^2 + sigma^2)
(a little when the run's scatter is as large as the prior), n alike runs by n J^2 s^2 / (n J^2 s^2 + sigma^2)
(a lot). What that means:

- a term learns from the runs whose step it carries: J_ik is the term's share of run i's step, so the residual
  of a run that is mostly data-parallel traffic goes to the scale-out term (J ~ 0.7) and barely to the GEMM rate
  (J ~ 0.3, prior s 12x narrower: 0.3^2 s_gemm^2 / 0.7^2 s_out^2 ~ 0.1% of it);
- a term a run does not exercise has J_ik = 0 and keeps its catalog value: another precision's GEMMs (fp8 in a
  bf16 run), a fabric it never crossed (scale-out on one node);
- a run unlike the job (another cluster, a much larger or smaller model, another scale) weighs less: its sigma_i
  grows with the distance (``run_sigma``), so it teaches less;
- the posterior covariance (J^T W J + P)^-1 gives each factor's uncertainty (``Learned.uncertainty``).

How wide: the priors and the run scatters are measured on the shipped runs' leave-one-source-out residuals
(``benchmarks/learning_priors.py``: each run predicted with its family's constants refitted without its source,
what a new user's runs look like to the model). Two runs of one source share an offset the learning can carry,
and each has its own scatter it cannot. The shared part is small: alike runs of one source (one accelerator,
architecture and precision) covary by 0.0038 in log^2 (an offset of ~6%), while the kernel priors as a kernel
library ranges (GEMMs at 0.55-0.75 of peak: 1.25) imply 0.025, six times more; with those widths two runs of a
source moved the GEMM rate 10-18% and made the source's other runs worse (few-shot 8.8% against 7.9% zero-shot
on the shipped files; Google's tpu-recipes 9.9% -> 13.4%, two MoE runs on TPU7x -28% and -10% off moving the
dense runs on v6e and v5p). So the kernel terms' priors are those widths times ``FITTED_KERNEL_PRIOR`` (0.26, the
moment estimate) where the catalog's kernel constants are *fitted* to the family's published runs of the term's
precision class (``fitted_terms``): what is left of them for a new machine of the family is that small. Where no
shipped run fitted them (fp4 on Blackwell, a family without shipped runs) the catalog's figure is a published
number and the full width stays: the runs may move it far. The fabric and host priors keep their widths: the shipped
runs barely exercise them (they cannot measure them), and a user's fabric is where machines differ most (half the
NICs, a shared fabric); several alike runs still move any term a lot (n J^2 s^2 against sigma^2). The run scatter
(``run_sigma``) is a variogram of the same residuals, E[(e_a - e_b)^2] over one source's pairs: a run's own
scatter 0.08 (asap: 0.10 with the measurement), another accelerator 0.12 (0.15), MoE against dense 0.17 (0.15),
another precision 0.26 (``OTHER_PRECISION_SIGMA`` 0.25, the largest: a precision's recipe is other code). The
pairs find no growth with model size or scale (the shipped sources grow both together, as weak-scaling tables);
``SIZE_SIGMA`` and ``SCALE_SIGMA`` are kept for runs outside that span. With these: few-shot 7.7% against 7.9%
zero-shot over the same 51 runs, tpu-recipes 9.9% -> 9.9% (``benchmarks/fewshot.py --maxiter 1``).

Deterministic: no random start, no sampling; the same runs in any order give the same factors up to rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Collection, Mapping, Sequence

import numpy as np

from asap.spec.hardware import Cluster
from asap.spec.job import Job
from asap.spec.strategy import Strategy


@dataclass(frozen=True)
class Term:
    """One learnable part of the machine: the catalog constants a factor f scales (efficiencies divided by f,
    bandwidths divided by f, per-call times multiplied by f) and how far (log, one standard deviation) a real
    machine's figure is from the catalog's before any run is seen."""

    name: str
    what: str
    prior_sigma: float
    efficiencies: tuple[str, ...] = ()  # family constants that are fractions of peak: divided by f
    times: tuple[str, ...] = ()  # family constants that are seconds per call: multiplied by f
    bandwidths: tuple[str, ...] = ()  # accelerator fields in GB/s: divided by f
    # the precision class whose published runs the family's constant for it was fitted on ("any": every run of the
    # family; None: not a fitted kernel rate): where the family has such runs, the prior is FITTED_KERNEL_PRIOR x
    fitted_on: str | None = None


# The kernel rates' priors: the range a kernel library's rate takes (the widths in TERMS) times this, the share of
# that range a machine of a catalog family is still off by once the family's constants are fitted to published
# runs. Measured (module docstring, "How wide"): the shipped runs' held-out residuals covary between alike runs
# of one source by 0.0038 (log^2), of which the fabric and host priors imply 0.0022 and the raw kernel widths
# 0.025, so kappa^2 = (0.0038 - 0.0022) / 0.025, kappa = 0.26 (``benchmarks/learning_priors.py``). Only where the
# family's constants were fitted on runs of the term's precision class (``fitted_terms``).
FITTED_KERNEL_PRIOR = 0.26
_HOST_TIMES = ("host_op_s", "kernel_overhead_s")
_NET_TIMES = ("collective_latency_s", "hop_latency_s", "sync_s")
# The terms, one row each. Prior widths (the kernel rates' times FITTED_KERNEL_PRIOR where fitted): large GEMMs reach 0.55-0.75 of peak across libraries, clocks and shapes
# (1.25); fp8 GEMMs vary more with scaling recipes and shapes (1.3); attention kernels as GEMMs once the kernel
# (FlashAttention 2 or 3, cuDNN, splash) is the stack's (1.25: a term that carries a tenth of a step must not take
# a run's whole error); streaming kernels 1.2; host dispatch with the Python and launch stack (1.5);
# NVLink/ICI/HCCS deliver 0.6-0.9 of nominal to collectives (1.5); scale-out fabrics range from half the
# catalog's NICs per GPU to shared, unoptimised fabrics (2.0); launch and sync latencies with the library and
# its tuning (1.5).
TERMS: dict[str, Term] = {t.name: t for t in (
    Term("gemm", "bf16/fp16 GEMM rate", math.log(1.25), efficiencies=("gemm_efficiency",), fitted_on="16-bit"),
    Term("fp8_gemm", "fp8/fp4 GEMM rate", math.log(1.3), efficiencies=("fp8_gemm_efficiency",), fitted_on="low"),
    Term("attention", "attention kernels", math.log(1.25), efficiencies=("attention_efficiency",), fitted_on="any"),
    Term("memory_bound", "memory-bound kernels", math.log(1.2), efficiencies=("hbm_efficiency",), fitted_on="any"),
    Term("host", "host dispatch and launch", math.log(1.5), times=_HOST_TIMES),
    Term("scale_up", "scale-up fabric (NVLink, ICI, HCCS)", math.log(1.5), bandwidths=("intra_node_gbps",)),
    Term("scale_out", "scale-out fabric (IB/RoCE, DCN)", math.log(2.0), bandwidths=("inter_node_gbps",)),
    Term("latency", "collective launch, hop and sync latencies", math.log(1.5), times=_NET_TIMES),
    # the tune loop's fabric: the scale-out bandwidth with the latencies cross-node hops dominate
    Term("scale_out_latency", "scale-out fabric and its latencies", math.log(2.0), times=_NET_TIMES,
         bandwidths=("inter_node_gbps",)),
    # the tune loop's one machine and one precision: every compute constant at once
    Term("compute", "every compute kernel and the host", math.log(1.25),
         efficiencies=("gemm_efficiency", "attention_efficiency", "fp8_gemm_efficiency", "hbm_efficiency"),
         times=_HOST_TIMES),
)}
# what ``asap learn`` fits from a user's runs: each kernel class and fabric apart
LEARN_TERMS = ("gemm", "fp8_gemm", "attention", "memory_bound", "host", "scale_up", "scale_out", "latency")
# what the tune loop fits from its own trials (one machine, one precision: compute as one)
TUNE_TERMS = ("compute", "scale_up", "scale_out_latency")

LOG_BOUND = math.log(8.0)  # no factor outside [1/8, 8]: beyond that the runs are not the job the model prices
TUNE_STEPS = 4  # the tune loop's Gauss-Newton steps; the step is < 1e-3 in log after three on its trials
STEP = 1e-3  # finite-difference step in log(factor) for J
NOT_EXERCISED = 1e-4  # |J_ik| below this: the run does not exercise the term (rounding, not physics)


@dataclass(frozen=True)
class MeasuredRun:
    """One measured step time and the job and strategy that made it. ``sigma``: the run's scatter (log) against
    the job being predicted (``run_sigma``); ``id``: its name in ``learned_from`` (a Memory row id, a case id)."""

    job: Job
    strategy: Strategy
    measured_step_time_s: float
    sigma: float
    id: Any = None


@dataclass(frozen=True)
class Learned:
    """The fitted factors: ``log_factors[k]`` for ``terms[k]``, their posterior standard deviations (log), the
    runs they came from, and each run's predicted step on the catalog (``catalog_s``)."""

    terms: tuple[str, ...] = ()
    log_factors: tuple[float, ...] = ()
    log_sigma: tuple[float, ...] = ()
    learned_from: tuple[Any, ...] = ()
    catalog_s: tuple[float, ...] = ()
    # the relative residuals' standard deviation of the runs after the correction (linearised: r - J x), what the
    # prediction interval narrows toward with the runs (``asap.cost.bands``: learned_runs, learned_spread)
    residual_spread: float | None = None
    jacobian: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def factors(self) -> dict[str, float]:
        return {t: math.exp(x) for t, x in zip(self.terms, self.log_factors, strict=True)}

    def factor(self, term: str) -> float:
        return self.factors.get(term, 1.0)

    @property
    def uncertainty(self) -> dict[str, float]:
        """One posterior standard deviation of each factor as a ratio (1.10: +-10%); 1 before any run."""
        return {t: math.exp(s) for t, s in zip(self.terms, self.log_sigma, strict=True)}

    def corrections(self, threshold: float = 0.0005) -> dict[str, float]:
        """The factors that moved (more than ``threshold`` in log), rounded to 4 digits: the JSON's
        ``corrections``."""
        return {t: round(f, 4) for t, f in self.factors.items() if abs(math.log(f)) > threshold}

    def apply(self, cluster: Cluster) -> Cluster:
        return corrected_cluster(cluster, self.factors)

    def apply_job(self, job: Job) -> Job:
        """The job on its corrected cluster, carrying the runs' count and spread for its prediction interval."""
        if not self.learned_from:
            return job
        cluster = self.apply(job.cluster) if self.corrections() else job.cluster
        return replace(job, cluster=cluster, learned_runs=len(self.learned_from), learned_spread=self.residual_spread)


def corrected_cluster(cluster: Cluster, factors: Mapping[str, float]) -> Cluster:
    """The cluster with each term's constants scaled by its factor (``Term``), applied to the accelerator as
    written: a calibrated CPU cluster derives its devices' share of the machine from that again
    (``Cluster.__post_init__``), so the share is not taken twice; any other cluster's accelerator as it prices
    (constants given to it, ``validate_case(efficiency=...)``, kept). Terms sharing a constant multiply."""
    written = cluster.written_accelerator if cluster.measured is not None else None
    acc = written or cluster.accelerator
    fam = acc.family_constants
    eff: dict[str, Any] = {}
    acc_fields: dict[str, Any] = {}
    for name, f in factors.items():
        term = TERMS[name]
        for k in term.efficiencies:
            eff[k] = eff.get(k, getattr(fam, k)) / f
        for k in term.times:
            eff[k] = eff.get(k, getattr(fam, k)) * f
        for k in term.bandwidths:
            acc_fields[k] = acc_fields.get(k, getattr(acc, k)) / f
    new = replace(acc, efficiency=replace(fam, **eff), **acc_fields)
    return replace(cluster, accelerator=new, written_accelerator=new)


def log_steps(runs: Sequence[MeasuredRun], terms: Sequence[str], x: np.ndarray) -> np.ndarray:
    """log(predicted step) of each run on its cluster corrected by exp(x)."""
    from asap.cost.estimate import estimate

    factors = dict(zip(terms, np.exp(x), strict=True))
    out = []
    for r in runs:
        job = replace(r.job, cluster=corrected_cluster(r.job.cluster, factors))
        out.append(math.log(estimate(job, r.strategy, classes=False).step_time_s))
    return np.array(out)


def sensitivities(runs: Sequence[MeasuredRun], terms: Sequence[str], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log steps at x, J): J[i, k] = d log(step_i) / d x_k by forward differences, entries below
    ``NOT_EXERCISED`` set to 0 (the run does not exercise the term)."""
    base = log_steps(runs, terms, x)
    eye = np.eye(len(terms))
    cols = [(log_steps(runs, terms, x + STEP * eye[k]) - base) / STEP for k in range(len(terms))]
    jac = np.stack(cols, axis=1) if cols else np.zeros((len(runs), 0))
    return base, np.where(np.abs(jac) < NOT_EXERCISED, 0.0, jac)


def prior_widths(terms: Sequence[str], fitted: Collection[str] = ()) -> np.ndarray:
    """s_k: the term's width, times ``FITTED_KERNEL_PRIOR`` for the terms in ``fitted`` (``fitted_terms``)."""
    return np.array([TERMS[t].prior_sigma * (FITTED_KERNEL_PRIOR if t in fitted else 1.0) for t in terms])


def prior_precision(terms: Sequence[str], fitted: Collection[str] = ()) -> np.ndarray:
    """P = diag(1 / s_k^2)."""
    return np.diag(prior_widths(terms, fitted) ** -2.0)


def fitted_terms(family: str, precision: str, records: Sequence[Mapping[str, Any]] | None = None) -> frozenset[str]:
    """The kernel terms whose catalog constant was fitted on published runs of ``family`` that a job in
    ``precision`` relies on: ``records`` (default: the shipped runs, ``asap.cost.bands.error_bands``) hold a run
    of the family in the term's precision class (the bf16 GEMM rate: a 16-bit run; the fp8/fp4 rate: a run in the
    job's low-precision class, fp8 for a 16-bit job; attention and streaming kernels: any run). An fp4 job on a
    family with no shipped fp4 run keeps the fp8/fp4 rate's full width: the catalog's fp4 rate is a published
    figure, not a fit, and the job's runs may move it far."""
    from asap.cost.bands import error_bands, precision_class

    rows = error_bands()["residuals"] if records is None else records
    classes = {precision_class(str(r["precision"])) for r in rows if r["family"] == family}
    job_class = precision_class(precision)
    need = {"16-bit": "16-bit", "low": job_class if job_class in ("fp8", "fp4") else "fp8"}
    return frozenset(t.name for t in TERMS.values() if t.fitted_on is not None and classes
                     and (t.fitted_on == "any" or need[t.fitted_on] in classes))


def fit(runs: Sequence[MeasuredRun], terms: Sequence[str] = LEARN_TERMS, steps: int = 1,
        fitted: Collection[str] = ()) -> Learned:
    """The MAP factors of ``terms`` given ``runs`` (module docstring) after ``steps`` Gauss-Newton steps from the
    catalog: 1 is the weighted least-squares problem linearised at the catalog (``asap learn``: each run priced
    len(terms) + 1 times); the tune loop iterates (``TUNE_STEPS``), its factors being larger. ``fitted``: the
    terms whose prior is narrowed to ``FITTED_KERNEL_PRIOR`` (``fitted_terms`` of the job). No runs: every
    factor 1."""
    terms = tuple(terms)
    if not runs:
        return Learned(terms, (0.0,) * len(terms), tuple(float(v) for v in prior_widths(terms, fitted)))
    log_m = np.log([r.measured_step_time_s for r in runs])
    w = np.array([r.sigma ** -2.0 for r in runs])
    p = prior_precision(terms, fitted)
    x = np.zeros(len(terms))
    base, jac = sensitivities(runs, terms, x)
    catalog = np.exp(base)
    d = np.zeros(len(terms))
    for i in range(max(steps, 1)):
        if i:
            base, jac = sensitivities(runs, terms, x)
        d = np.linalg.solve(jac.T @ (w[:, None] * jac) + p, jac.T @ (w * (log_m - base)) - p @ x)
        x = np.clip(x + d, -LOG_BOUND, LOG_BOUND)
        if np.max(np.abs(d)) < 1e-4:
            break
    cov = np.linalg.inv(jac.T @ (w[:, None] * jac) + p)
    left = log_m - base - jac @ d  # what the corrected model still misses (linearised at the last step's start)
    spread = float(np.sqrt(np.mean(np.expm1(left) ** 2))) if len(runs) > 1 else None
    return Learned(terms, tuple(float(v) for v in x), tuple(float(v) for v in np.sqrt(np.diag(cov))),
                   tuple(r.id for r in runs), tuple(float(v) for v in catalog), spread, jacobian=jac)


def posterior_covariance(jacobian: np.ndarray, sigmas: np.ndarray, terms: Sequence[str]) -> np.ndarray:
    """(J^T W J + P)^-1 over log(factors)."""
    w = np.asarray(sigmas, dtype=float) ** -2.0
    return np.linalg.inv(jacobian.T @ (w[:, None] * jacobian) + prior_precision(terms))


# --------------------------------------------------------------------------------------------------------
# How much a run says about another job: its scatter against it
# --------------------------------------------------------------------------------------------------------

MEASUREMENT_SIGMA = 0.03  # one measured step time's scatter between runs of one job: a few per cent
# The cost model's own run-to-run scatter within one stack and family once its terms are right (what is left of
# the held-out residuals after a source's common offset: the shipped files' within-source spread, ~5-10%)
MODEL_SIGMA = 0.10
OTHER_CLUSTER_SIGMA = 0.05  # another cluster of the same accelerator: other clocks, NICs, software versions
# another accelerator of the family (v5e against v6e, H100 against H200): other generations' kernels and fabrics
OTHER_ACCELERATOR_SIGMA = 0.15
# a dense run for an MoE job or the other way: grouped expert GEMMs, dispatch and their host work are other kernels
OTHER_ARCHITECTURE_SIGMA = 0.15
# another precision (bf16 against fp8 or fp4): its GEMMs are another term (J), but the recipe's casts, scales and
# amax reductions and the kernels' shapes are other code; the held-out residuals of a source's runs differ most
# across precisions (0.26 fitted on within-source pairs; ``benchmarks/learning_priors.py``)
OTHER_PRECISION_SIGMA = 0.25
SIZE_SIGMA = 0.15  # per e-fold of model size between the run and the job: other shapes, other kernels
SCALE_SIGMA = 0.04  # per e-fold of device count: other collectives' sizes, another share of the fabric


def run_sigma(run_job: Job, job: Job, same_job: bool = False) -> float:
    """sigma_i: how far (log, one standard deviation) a run's measured step may sit from the model's once the
    terms are right, for predicting ``job``: the measurement alone for a trial of the same job (``same_job``),
    else sqrt(MEASUREMENT^2 + MODEL^2 + OTHER_CLUSTER^2 [another cluster] + OTHER_ACCELERATOR^2 [another
    accelerator of the family] + OTHER_ARCHITECTURE^2 [MoE against dense] + OTHER_PRECISION^2 [another
    precision] + (SIZE ln(P_run / P_job))^2
    + (SCALE ln(devices_run / devices_job))^2)."""
    if same_job:
        return MEASUREMENT_SIGMA
    var = MEASUREMENT_SIGMA ** 2 + MODEL_SIGMA ** 2
    if not same_cluster(run_job.cluster, job.cluster):
        var += OTHER_CLUSTER_SIGMA ** 2
    if run_job.cluster.accelerator.name != job.cluster.accelerator.name:
        var += OTHER_ACCELERATOR_SIGMA ** 2
    if (run_job.model.moe is None) != (job.model.moe is None):
        var += OTHER_ARCHITECTURE_SIGMA ** 2
    if run_job.train.precision != job.train.precision:
        var += OTHER_PRECISION_SIGMA ** 2
    size = math.log(run_job.model.num_params() / job.model.num_params())
    scale = math.log(run_job.devices / job.devices)
    return math.sqrt(var + (SIZE_SIGMA * size) ** 2 + (SCALE_SIGMA * scale) ** 2)


def same_cluster(a: Cluster, b: Cluster) -> bool:
    """The same machine by its name where both have one, else by the accelerator and the node shape."""
    if a.name and b.name:
        return a.name == b.name
    return (a.accelerator.name, a.devices_per_node, a.scale_up_domain) == \
        (b.accelerator.name, b.devices_per_node, b.scale_up_domain)
