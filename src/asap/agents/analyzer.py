"""The Analyzer: a run's profile (``asap diagnose``) or, without one, the cost model's breakdown -> a diagnosis
with its evidence, in the words of design.md (compute, memory, communication, host, pipeline_bubble,
imbalance).

From a cost-model estimate the bottleneck is the estimate's own (the largest exposed term, memory when
memory-bound kernels dominate compute), except that a strategy that does not fit, or fills more than
``HBM_PRESSURE`` of the device, is memory-bound in the published optimizer's sense (HBM-bound: capacity, the
case where model parallelism, sharding or recompute are the moves).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from asap.cost.estimate import Estimate
from asap.spec.hardware import Cluster

HBM_PRESSURE = 0.92  # a device this full has no room for a larger micro-batch or less sharding
# exposed communication this large a share of the step sets its pace even when compute is the larger term (the
# published optimizer's communication-bound meshes spent a third or more of the step in collectives)
COMM_BOUND_SHARE = 0.3
COMM_TERMS = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm")


@dataclass
class Diagnosis:
    bottleneck: str
    source: str  # "trace" | "cost model"
    step_time_s: float
    figures: dict[str, float] = field(default_factory=dict)  # shares of the step and other KPIs
    evidence: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def from_estimate(est: Estimate, cluster: Cluster) -> Diagnosis:
    """The cost model's view of one strategy: exposed shares of the step, memory pressure, its bottleneck."""
    step = max(est.step_time_s, 1e-12)
    exposed = est.exposed_s
    comm = sum(exposed.get(k, 0.0) for k in COMM_TERMS)
    figures = {"compute_share": exposed.get("compute", 0.0) / step, "communication_share": comm / step,
               "bubble_share": exposed.get("bubble", 0.0) / step, "host_share": exposed.get("host", 0.0) / step,
               "peak_memory_gb": est.peak_memory_gb, "hbm_gb": cluster.hbm_gb, "mfu": est.mfu}
    for k in COMM_TERMS:
        figures[f"{k}_share"] = exposed.get(k, 0.0) / step
    bottleneck = est.bottleneck
    evidence = list(est.evidence)
    if bottleneck == "compute" and figures["communication_share"] >= COMM_BOUND_SHARE:
        bottleneck = "communication"
        evidence.insert(0, f"exposed communication {figures['communication_share']:.0%} of the step (at least "
                           f"{COMM_BOUND_SHARE:.0%}: the interconnect sets the pace)")
    pressure = est.peak_memory_gb / cluster.hbm_gb
    if not est.fits or pressure > HBM_PRESSURE:
        bottleneck = "memory"
        evidence.insert(0, f"peak memory {est.peak_memory_gb:.1f} GiB reserved of {cluster.hbm_gb:g} GiB per device "
                           f"({pressure:.0%}){'' if est.fits else ': does not fit'}")
    return Diagnosis(bottleneck=bottleneck, source="cost model", step_time_s=est.step_time_s, figures=figures,
                     evidence=evidence)


def from_traces(traces: list[str | Path], accelerator: str | None = None) -> Diagnosis:
    """A profiled run's view (``asap.profile.diagnose``; traces of different jobs are refused there)."""
    from asap.profile.diagnose import diagnose

    d = diagnose(list(traces), accelerator=accelerator, fusion=True)
    step = max(d.step_time_s, 1e-12)
    fused_s = sum(r.saved_s for r in d.fusion or [])
    figures = {"compute_share": d.compute_s / step, "communication_share": d.exposed_communication_s / step,
               "idle_share": d.idle_s / step, "busy_fraction": d.busy_fraction, "imbalance_s": d.imbalance_s,
               "ranks": float(len(d.ranks)), "fusion_saved_s": fused_s}
    top = [f"{o.name}: {o.share:.0%} of device time, {o.bound}-bound" for o in d.top_ops[:3]]
    if d.fusion:  # what fused kernels (torch.compile, Transformer Engine) would save, on the roofline
        best = d.fusion[0]
        top.append(f"fusion: {len(d.fusion)} kinds of fusible chains would save {fused_s:.3g} s per step "
                   f"({fused_s / step:.1%}); the largest, {' > '.join(n.split('::')[-1] for n in best.ops[:8])}"
                   f"{' > ...' if len(best.ops) > 8 else ''}, {best.saved_bytes / 1e6:.3g} MB ({best.saved_s:.3g} s)")
    return Diagnosis(bottleneck=d.bottleneck, source="trace", step_time_s=d.step_time_s, figures=figures,
                     evidence=list(d.evidence) + top)


class Analyzer:
    """One job: traces when there are any, the cost model's breakdown of the strategy otherwise."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def analyze(self, estimate: Estimate, traces: list[str | Path] | None = None) -> Diagnosis:
        if traces:
            d = from_traces(traces, self.cluster.accelerator.name)
            model_view = from_estimate(estimate, self.cluster)
            if model_view.bottleneck == "memory" and model_view.figures["peak_memory_gb"] > self.cluster.hbm_gb:
                d.evidence.insert(0, model_view.evidence[0])
            return d
        return from_estimate(estimate, self.cluster)
