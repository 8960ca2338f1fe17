"""The Analyzer: a run's profile (``asap diagnose``) or, without one, the cost model's breakdown -> a diagnosis
with its evidence, in the words of design.md (compute, memory, communication, host, pipeline_bubble,
imbalance).

From a cost-model estimate the classes are the estimate's own (``asap.cost.classes``: each class with the
seconds removing it would save, memory capacity first where the strategy does not fit or fills more than the
usable share of HBM, compute only when the step is mostly useful compute at a healthy MFU), so ``asap
estimate``'s bottleneck line and ``asap propose`` say the same. From traces, ``asap diagnose``'s classes, with
the collectives a trace cannot assign to an axis split by the cost model's axis terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asap.cost.classes import COMM_CLASSES
from asap.cost.estimate import Estimate
from asap.spec.hardware import Cluster
from asap.spec.words import Bottleneck, BottleneckClass, ClassSaving

if TYPE_CHECKING:  # the trace diagnosis is imported when traces are read
    from asap.profile.diagnose import AcceleratorHint

COMM_TERMS = tuple(COMM_CLASSES)  # the cost model's exposed communication terms, one per axis
MIN_CLASS_SHARE = 0.02  # a class that would save less than this share of the step is not attacked


@dataclass
class Analysis:
    """The Analyzer's view of one job, from its traces or from the cost model: the bottleneck and what can be won.
    (The trace diagnosis it reads is ``asap.profile.diagnose.Diagnosis``.)"""

    bottleneck: Bottleneck
    source: str  # "trace" | "cost model"
    step_time_s: float
    figures: dict[str, float] = field(default_factory=dict)  # shares of the step and other KPIs
    evidence: list[str] = field(default_factory=list)
    # what can be won, verdict first (asap.cost.classes; JSON: {class, bottleneck, saving_s, figure})
    classes: list[ClassSaving] = field(default_factory=list)

    @property
    def bottleneck_class(self) -> str:
        return self.classes[0].cls.value if self.classes else self.bottleneck

    def targets(self) -> list[ClassSaving]:
        """The classes worth attacking, verdict first: memory capacity when it binds, then every class saving
        at least ``MIN_CLASS_SHARE`` of the step (compute only when it is the verdict)."""
        step = max(self.step_time_s, 1e-12)
        return [c for i, c in enumerate(self.classes)
                if c.cls == BottleneckClass.MEMORY_CAPACITY or (c.cls == BottleneckClass.COMPUTE and i == 0)
                or c.saving_s >= MIN_CLASS_SHARE * step]

    def to_dict(self) -> dict[str, Any]:
        """The JSON edge: the classes as mappings."""
        return {"bottleneck": str(self.bottleneck), "source": self.source, "step_time_s": self.step_time_s,
                "figures": dict(self.figures), "evidence": list(self.evidence),
                "classes": [c.to_dict() for c in self.classes], "bottleneck_class": self.bottleneck_class}


def from_estimate(est: Estimate, cluster: Cluster) -> Analysis:
    """The cost model's view of one strategy: its classes (``Estimate.classes``, the same as ``asap estimate``
    prints), exposed shares of the step, memory pressure."""
    step = max(est.step_time_s, 1e-12)
    exposed = est.exposed_s
    comm = sum(exposed.get(k, 0.0) for k in COMM_TERMS)
    figures = {"compute_share": exposed.get("compute", 0.0) / step, "communication_share": comm / step,
               "bubble_share": exposed.get("bubble", 0.0) / step, "host_share": exposed.get("host", 0.0) / step,
               "peak_memory_gb": est.peak_memory_gb, "hbm_gb": cluster.hbm_gb, "mfu": est.mfu}
    for k in COMM_TERMS:
        figures[f"{k}_share"] = exposed.get(k, 0.0) / step
    evidence = [c.figure for c in est.classes[:4]]
    return Analysis(bottleneck=Bottleneck(est.bottleneck), source="cost model", step_time_s=est.step_time_s,
                     figures=figures, evidence=evidence, classes=list(est.classes))


def resplit_collectives(classes: list[ClassSaving], est: Estimate) -> list[ClassSaving]:
    """A trace's dp_comm (collectives a trace cannot assign to an axis) split over tp, cp and dp in proportion
    to the cost model's exposed terms of the strategy that ran."""
    weights = {k: est.exposed_s.get(k, 0.0) for k in (BottleneckClass.TP_COMM, BottleneckClass.CP_COMM,
                                                      BottleneckClass.DP_COMM)}
    total = sum(weights.values())
    out = []
    for c in classes:
        if c.cls != BottleneckClass.DP_COMM or total <= 0:
            out.append(c)
            continue
        for k, w in weights.items():
            if w > 0:
                v = c.saving_s * w / total
                out.append(replace(c, cls=k, saving_s=v,
                                   figure=f"{k} exposed {v:.3g} s (the trace's collectives split by the cost model)"))
    head, rest = out[:1], sorted(out[1:], key=lambda c: -c.saving_s)
    return head + rest


def from_traces(traces: list[str | Path], accelerator: AcceleratorHint = None) -> Analysis:
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
    return Analysis(bottleneck=d.bottleneck, source="trace", step_time_s=d.step_time_s, figures=figures,
                     evidence=list(d.evidence) + top, classes=list(d.classes))


class Analyzer:
    """One job: traces when there are any, the cost model's breakdown of the strategy otherwise."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def analyze(self, estimate: Estimate, traces: list[str | Path] | None = None) -> Analysis:
        if traces:
            d = from_traces(traces, self.cluster.accelerator)  # the object: a custom or calibrated part's own figures
            d.classes = resplit_collectives(d.classes, estimate)
            if not estimate.fits:  # the strategy as priced here does not fit: that comes first
                d.classes.insert(0, estimate.classes[0])
                d.evidence.insert(0, estimate.classes[0].figure)
            return d
        return from_estimate(estimate, self.cluster)
