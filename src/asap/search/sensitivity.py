"""Which input a plan's #1 leans on: the plan's candidates repriced with one hardware input changed at a time.

Each input of ``INPUTS`` is made ``FACTOR`` (1.5) times worse (``both_ways``: and then better), one at a time,
on the job's accelerator: the inter-node bandwidth (NIC per device, or TPU DCN), the scale-up bandwidth (NVLink, ICI, HCCS),
the GEMM efficiencies (bf16 and fp8: the fraction of peak the matrix units reach), the HBM bandwidth, and the host
overheads (the per-kernel launch gap and the per-operator and DTensor dispatch times). The plan's fitting
candidates (its top rows: their strategies, memory unchanged by any of these) are repriced in one
``estimate_batch`` per change, not searched again, and re-ranked. Worse only by default: the catalog's figures
are what a well-tuned machine reaches, a user's more often falls short of them, and each direction costs a
repricing (about a tenth of a 405B plan's search per direction, ``benchmarks/plan_speed.py``). The input the #1 is most sensitive to is the
one under whose change the #1 loses by the most to another candidate, or, where it holds under every change, the
one that shrinks its lead the most: ``lead = step(best other) / step(#1) - 1`` under the change.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Sequence

from asap.cost.batch import StrategyBatch
from asap.cost.device_memory import memory, stack_device_figures
from asap.cost.estimate import UNIT_KEYS, Estimate, estimate_batch
from asap.cost.units import unit_times, with_times
from asap.spec.catalog import Accelerator
from asap.spec.job import Job

FACTOR = 1.5


def _gemm(acc: Accelerator, k: float) -> Accelerator:
    fam = acc.family_constants
    names = [f.name for f in fields(fam) if f.name.endswith("gemm_efficiency") and f.name != "grouped_gemm_efficiency"]
    return replace(acc, efficiency=replace(fam, **{n: min(getattr(fam, n) * k, 1.0) for n in names}))


def _host(acc: Accelerator, k: float) -> Accelerator:
    fam = acc.family_constants
    names = ("kernel_overhead_s", "host_op_s", "dtensor_op_s", "dtensor_call_s")
    return replace(acc, efficiency=replace(fam, **{n: getattr(fam, n) / k for n in names}))


# name, how the accelerator changes when the input is k times better (k < 1: worse), the words for "lower"
INPUTS: tuple[tuple[str, Callable[[Accelerator, float], Accelerator], str, str], ...] = (
    ("inter-node bandwidth", lambda a, k: replace(a, inter_node_gbps=a.inter_node_gbps * k), "lower", "higher"),
    ("scale-up bandwidth", lambda a, k: replace(a, intra_node_gbps=a.intra_node_gbps * k), "lower", "higher"),
    ("GEMM efficiency", _gemm, "lower", "higher"),
    ("HBM bandwidth", lambda a, k: replace(a, hbm_gbps=a.hbm_gbps * k), "lower", "higher"),
    ("host overhead", _host, "higher", "lower"),
)


@dataclass(frozen=True)
class Change:
    """One input changed: the ranks of the candidates under it (indices into the plan's candidates)."""

    input: str
    direction: str  # "lower" / "higher": the words for the input itself
    factor: float
    winner: int  # the plan's 0-based place of the fastest candidate under the change (0: the #1 holds)
    lead: float  # step(best other) / step(#1) - 1 under the change: negative when the #1 loses
    step_time_s: list[float]

    @property
    def sentence(self) -> str:
        what = f"if the {self.input} is {self.factor:g}x {self.direction}"
        if self.winner:
            return f"{what}, #{self.winner + 1} wins (#1 is {-self.lead:.1%} slower than it)"
        return f"{what}, #1 holds (by {self.lead:.1%})"

    def to_dict(self) -> dict[str, Any]:
        return {"input": self.input, "change": f"{self.factor:g}x {self.direction}", "winner": self.winner + 1,
                "lead_of_first": self.lead, "step_time_s": self.step_time_s}


def with_accelerator(job: Job, move: Callable[[Accelerator, float], Accelerator], k: float) -> Job:
    """The job on its accelerator with one input ``k`` times better (``INPUTS``)."""
    c = job.cluster
    assert c.written_accelerator is not None
    return replace(job, cluster=replace(c, accelerator=move(c.accelerator, k),
                                        written_accelerator=move(c.written_accelerator, k)))


def changes(job: Job, candidates: Sequence[Estimate], places: Sequence[int], factor: float = FACTOR,
            both_ways: bool = False) -> list[Change]:
    """Every input of ``INPUTS`` ``factor`` times worse (``both_ways``: then better), with the candidates (at
    ``places`` in the plan, the first the #1) re-ranked."""
    S = StrategyBatch.from_strategies([e.strategy for e in candidates])
    # what no input of INPUTS changes, priced once: the devices' parameters and activations (``device_figures``
    # reads no accelerator) and the memory (the step time does not read it)
    fw = job.framework
    f_mem = stack_device_figures(job.model, job.train, S, fw)
    mem = memory(job.model, job.cluster.accelerator, job.train, S, figures=f_mem, framework=fw)
    out = []
    for name, move, worse, better in INPUTS:
        for k, word in ((1.0 / factor, worse), (factor, better))[:2 if both_ways else 1]:
            changed = with_accelerator(job, move, k)
            ut = unit_times(changed, S, UNIT_KEYS)
            steps = [float(t) for t in estimate_batch(changed, S, mem=mem, figures=with_times(f_mem, ut),
                                                      unit=ut).step_time_s]
            winner = min(range(len(steps)), key=lambda i: (steps[i], i))
            best_other = min(t for i, t in enumerate(steps) if i != 0)
            out.append(Change(name, word, factor, places[winner], best_other / steps[0] - 1.0, steps))
    return out


def most_sensitive(found: Sequence[Change]) -> Change:
    """The change under which the #1 loses most, or keeps the smallest lead."""
    return min(found, key=lambda c: c.lead)


def sensitivity(job: Job, candidates: Sequence[Estimate], factor: float = FACTOR,
                both_ways: bool = False) -> dict[str, Any] | None:
    """``{factor, most_sensitive: {input, change, winner, lead_of_first, sentence}, changes: [...]}`` for the
    plan's fitting candidates; None with fewer than two."""
    places = [i for i, e in enumerate(candidates) if e.fits]
    if len(places) < 2 or places[0] != 0:
        return None
    found = changes(job, [candidates[i] for i in places], places, factor, both_ways)
    top = most_sensitive(found)
    holds = all(c.winner == 0 for c in found)
    summary = (f"#1 holds under each {factor:g}x change; its lead shrinks most " + top.sentence.split(", #1")[0]
               + f" (to {top.lead:.1%})") if holds else top.sentence
    return {"factor": factor, "candidates": len(places), "holds": holds, "summary": summary,
            "most_sensitive": {**top.to_dict(), "sentence": top.sentence}, "changes": [c.to_dict() for c in found]}
