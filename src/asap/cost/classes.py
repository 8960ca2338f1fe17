"""What can be won: a priced step split into bottleneck classes (``asap.spec.words.BottleneckClass``), each with
its figure, the seconds per step that removing it would save.

From the cost model's terms: each exposed collective by axis (tp, cp, ep, pp, dp), the pipeline bubble, the
host's launch and Python time, the heaviest stage's excess over the mean (stage imbalance), the memory-bound
kernels' time (what fusion attacks), and, from counterfactual pricings of the same strategy
(``asap.cost.estimate.estimate`` does them), the recomputed forward passes (the step with ``recompute=none``),
the busiest expert rank's excess (routing balanced) and packed documents' uneven attention (every rank
the mean).
Memory capacity is a class of its own: a strategy that does not fit, or fills more than ``USABLE_HBM`` of the
device, must be fixed before any time is won.

The named class (the verdict) is memory capacity when it binds; else compute only when the step is mostly
useful compute (``COMPUTE_BOUND_SHARE``) at a healthy MFU (``HEALTHY_MFU``); else the class that would save the
most. The same classes come out of a trace (``asap.profile.diagnose``), so a predicted and a measured verdict
compare.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asap.cost.device_memory import HEADROOM_SHARE
from asap.spec.words import BottleneckClass as C

# the share of HBM a step may use and still leave room for the allocator's fragmentation and NCCL's buffers:
# what a plan admits by default (``asap.cost.device_memory.HEADROOM_SHARE``, with its sources)
USABLE_HBM = 1.0 - HEADROOM_SHARE
# "compute-bound" means nothing large is left to remove: the published large runs sit at 38-55% MFU (Megatron-LM
# 3D parallelism, arXiv:2104.04473 Table 1: 44-52% of A100 peak; Llama 3, arXiv:2407.21783 Table 4: 38-43% on
# H100; MaxText's published TPU v5p runs 55-65%), so below 0.35 a step still wastes a third of what it could do
HEALTHY_MFU = 0.35
COMPUTE_BOUND_SHARE = 0.7  # useful compute at least this share of the step
# a term under this share of the step is no class to win: it is below the cost model's resolution (the
# narrowest prediction band, asap.cost.bands, is several percent wide), and a proposal aimed at it would promise
# nothing (the step-boundary exposure of data-parallel traffic leaves a few milliseconds on almost every step)
NEGLIGIBLE_SHARE = 0.01
# each axis's exposed communication term of the cost model is spelled as its class
COMM_CLASSES = {c.value: c for c in (C.TP_COMM, C.CP_COMM, C.EP_COMM, C.PP_COMM, C.DP_COMM)}


@dataclass(frozen=True)
class Opportunity:
    cls: C
    saving_s: float  # seconds per step removing it would save (0 for memory capacity: it is a constraint)
    figure: str  # "tp_comm exposed 4.1 s of 36.8 s"

    def to_dict(self) -> dict[str, Any]:
        return {"class": self.cls.value, "bottleneck": self.cls.bottleneck.value, "saving_s": self.saving_s,
                "figure": self.figure}


@dataclass(frozen=True)
class Counterfactuals:
    """Seconds the strategy's own counterfactual pricings save (0 where they do not apply)."""

    recompute_s: float = 0.0  # step - step with recompute=none
    expert_imbalance_s: float = 0.0  # step - step with balanced routing
    sequence_imbalance_s: float = 0.0  # step - step with every rank at the mean attention work


def _s(x: float) -> str:
    return f"{x:.3g} s"


def time_classes(exposed: dict[str, float], step_s: float, memory_bound_s: float, stage_imbalance_s: float,
                 cf: Counterfactuals) -> list[Opportunity]:
    """Every class that costs time, with its saving, largest first (compute last: it is what remains)."""
    of = f" of {_s(step_s)}"
    out = [Opportunity(cls, exposed.get(term, 0.0), f"{term} exposed {_s(exposed.get(term, 0.0))}{of}")
           for term, cls in COMM_CLASSES.items()]
    out += [Opportunity(C.PIPELINE_BUBBLE, exposed.get("bubble", 0.0),
                        f"pipeline bubble {_s(exposed.get('bubble', 0.0))}{of}"),
            Opportunity(C.HOST, exposed.get("host", 0.0), f"host and launch {_s(exposed.get('host', 0.0))}{of}"),
            Opportunity(C.RECOMPUTE, cf.recompute_s, f"recompute {_s(cf.recompute_s)}{of}"),
            Opportunity(C.STAGE_IMBALANCE, stage_imbalance_s,
                        f"heaviest stage over the mean {_s(stage_imbalance_s)}{of}"),
            Opportunity(C.EXPERT_IMBALANCE, cf.expert_imbalance_s,
                        f"busiest expert rank over the mean {_s(cf.expert_imbalance_s)}{of}"),
            Opportunity(C.SEQUENCE_IMBALANCE, cf.sequence_imbalance_s,
                        f"uneven packed attention {_s(cf.sequence_imbalance_s)}{of}"),
            Opportunity(C.MEMORY_BANDWIDTH, memory_bound_s, f"memory-bound kernels {_s(memory_bound_s)}{of}")]
    out = sorted((o for o in out if o.saving_s > NEGLIGIBLE_SHARE * step_s), key=lambda o: (-o.saving_s, o.cls.value))
    useful = useful_compute_s(exposed, memory_bound_s, stage_imbalance_s, cf)
    return out + [Opportunity(C.COMPUTE, 0.0, f"useful compute {_s(useful)}{of} ({useful / max(step_s, 1e-12):.0%})")]


def useful_compute_s(exposed: dict[str, float], memory_bound_s: float, stage_imbalance_s: float,
                     cf: Counterfactuals) -> float:
    compute = exposed.get("compute", 0.0) + exposed.get("optimizer", 0.0)
    waste = memory_bound_s + stage_imbalance_s + cf.recompute_s + cf.expert_imbalance_s + cf.sequence_imbalance_s
    return max(compute - waste, 0.0)


def memory_class(peak_gb: float, hbm_gb: float, fits: bool) -> Opportunity | None:
    """Memory capacity when it binds: does not fit, or above the usable share of HBM."""
    if fits and peak_gb <= USABLE_HBM * hbm_gb:
        return None
    what = "does not fit" if not fits else (f"fits the device but not its {USABLE_HBM:.0%} under the default "
                                            f"headroom a plan keeps (fits_with_headroom false)")
    return Opportunity(C.MEMORY_CAPACITY, 0.0, f"peak memory {peak_gb:.1f} GiB reserved of {hbm_gb:g} GiB per device "
                                               f"({peak_gb / hbm_gb:.0%}): {what}")


def classify(exposed: dict[str, float], step_s: float, mfu: float | None, peak_gb: float, hbm_gb: float,
             fits: bool, memory_bound_s: float, stage_imbalance_s: float,
             cf: Counterfactuals = Counterfactuals()) -> list[Opportunity]:
    """The classes in verdict order: the first is the named one (see the module's doc)."""
    times = time_classes(exposed, step_s, memory_bound_s, stage_imbalance_s, cf)
    mem = memory_class(peak_gb, hbm_gb, fits)
    useful = useful_compute_s(exposed, memory_bound_s, stage_imbalance_s, cf) / max(step_s, 1e-12)
    healthy = useful >= COMPUTE_BOUND_SHARE and (mfu is None or mfu >= HEALTHY_MFU)
    if healthy or len(times) == 1:
        times = [times[-1]] + times[:-1]
    return ([mem] if mem else []) + times
