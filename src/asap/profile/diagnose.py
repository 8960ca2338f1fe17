"""The diagnosis: step-time breakdown per rank, the expensive operators on a roofline, stragglers, jitter, and
the one bottleneck that explains most of the step, with the figures that made it so.

Every figure is a per-step average over the profiled step windows (``ProfilerStep#N``), then a mean over ranks.
docs/diagnose.md gives each formula.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeAlias

import numpy as np

from asap.errors import AsapError
from asap.profile.devices import Roofline, infer_accelerator, roofline_for
from asap.profile.fusion import fusion_table
from asap.profile.load import load_timelines
from asap.profile.trace import HookRole, Timeline, expand_paths, hook_role, is_matrix, is_p2p
from asap.profile.windows import US, Intervals, window_figures, window_index
from asap.profile.workload import read_workload
from asap.spec.hardware import Accelerator
from asap.spec.words import Bottleneck, BottleneckClass, ClassSaving, duration_text

# An operator under this fraction of both its peak FLOP/s and the memory bandwidth is bound by neither roof:
# its time is kernel launch latency and fixed overhead (a 64x64 matmul on an A100 runs ~5 us of launch for
# ~0.5 us of math). 10% is far below what a kernel limited by either roof reaches (cuBLAS GEMMs 50-80% of peak,
# streaming kernels 70-90% of bandwidth), and above what tiny kernels reach.
OVERHEAD_UTILIZATION = 0.10
# ... and only when its calls are short: launch-latency scale (GPU launches ~5-20 us, eager dispatch ~10-50 us).
# A long call far below both roofs is a slow kernel or a contended core (CPU ranks sharing cores), not overhead.
OVERHEAD_CALL_S = 100e-6
# compute-bound only when compute-bound operators are most of the step (the cost model's rule, asap.cost.classes,
# also asks for a healthy MFU; a trace's peak is the roofline's, so its share alone decides here)
TRACE_COMPUTE_BOUND_SHARE = 0.5
ALLTOALL_RE = re.compile(r"all_?to_?all|alltoall|a2a", re.IGNORECASE)
DEFAULT_STRAGGLER_THRESHOLD = 0.10  # a rank is a straggler 10% of the median step beyond the median
DEFAULT_JITTER_THRESHOLD = 0.10  # step-time coefficient of variation above which jitter is flagged


@dataclass
class RankFigures:
    """One rank's (one device timeline's) per-step averages."""

    label: str
    source: str
    rank: int | None
    device: str
    steps_source: str
    n_steps: int
    step_time_s: float
    busy_s: float
    compute_s: float
    communication_s: float
    overlap_s: float
    exposed_communication_s: float
    exposed_p2p_s: float
    idle_s: float
    busy_fraction: float
    work_s: float  # step time outside exposed communication: the rank's own compute and host time
    step_time_cv: float | None
    steps: list[dict]
    notes: list[str] = field(default_factory=list)
    # idle while the cores it shares with other devices (XLA:CPU virtual devices) ran their work: the device
    # waits for a core, not for its host program; 0 for devices of their own
    contended_s: float = 0.0


@dataclass
class OpRow:
    name: str
    time_s: float
    share: float
    calls: float
    flops: float | None
    bytes: float | None
    intensity: float | None
    bound: str
    bound_from: str
    precision: str | None
    tflops_per_s: float | None
    flop_utilization: float | None
    bandwidth_gbps: float | None
    bandwidth_utilization: float | None
    # neither roof binds: under OVERHEAD_UTILIZATION of both peak FLOP/s and memory bandwidth in calls shorter
    # than OVERHEAD_CALL_S, the op's time is launch latency and fixed overhead (tiny kernels, host dispatch): it
    # counts as host time in the verdict
    overhead_bound: bool = False
    # its own work per step and rank: time_s, except on devices that share a host's cores (XLA:CPU's virtual
    # devices), where each call counts as long as the fastest call of the same work (``fastest_calls_us``)
    own_time_s: float | None = None


@dataclass
class Diagnosis:
    step_time_s: float
    compute_s: float
    communication_s: float
    overlap_s: float
    exposed_communication_s: float
    exposed_p2p_s: float
    idle_s: float
    busy_fraction: float
    bottleneck: Bottleneck
    evidence: list[str]
    scores_s: dict[Bottleneck, float]
    top_ops: list[OpRow]
    ranks: list[RankFigures]
    stragglers: list[dict]
    slowest_rank: dict | None
    imbalance_s: float
    jitter: dict
    steps_source: str
    n_steps: int
    roofline: Roofline
    traces: list[str]
    notes: list[str]
    fusion: list | None = None  # asap.profile.fusion.FusionRow, when asked for (diagnose --fusion)
    precision: str | None = None  # of most compute-bound operator time: the ridge the ops compare against
    # what can be won, verdict first (``ClassSaving``: to_dict {class, bottleneck, saving_s, figure})
    classes: list[ClassSaving] = field(default_factory=list)
    # what the trace holds (asap.profile.workload.Workload.to_dict: kind llm | recommendation | cnn | other), and
    # the host's time per step split into Python dispatch, kernel launches and the data loader (Kineto traces)
    workload: dict | None = None
    host_split: dict | None = None

    @property
    def bottleneck_class(self) -> str:
        return self.classes[0].cls.value if self.classes else self.bottleneck

    def to_dict(self) -> dict:
        d = asdict(self)
        d["classes"] = [c.to_dict() for c in self.classes]
        d["roofline"] = self.roofline.to_dict()
        d["bottleneck"] = str(self.bottleneck)
        d["bottleneck_class"] = self.bottleneck_class
        if self.fusion is None:
            d.pop("fusion")
        return d


# ----------------------------------------------------------------------------------------------------------
# Per rank
# ----------------------------------------------------------------------------------------------------------


def contended_s(tl: Timeline, timelines: list[Timeline]) -> np.ndarray:
    """Per step window: the time ``tl`` idles while another device on the same host's cores is busy,
    |busy(others) - busy(tl)|; zeros for a device with cores of its own."""
    others = [o for o in timelines if o is not tl and tl.shared_host and o.shared_host == tl.shared_host]
    if not others:
        return np.zeros(len(tl.windows_us))
    busy_others = Intervals.empty()
    for o in others:
        busy_others = busy_others | o.compute | o.comm
    return busy_others.minus(tl.compute | tl.comm).lengths_in(tl.windows_us) * US


def rank_figures(tl: Timeline, timelines: list[Timeline] | None = None) -> RankFigures:
    """Averages over the rank's step windows of the union-of-intervals figures (windows.window_figures)."""
    wf = window_figures(tl.windows_us, tl.compute, tl.comm, tl.p2p)
    contended = float(np.mean(np.minimum(contended_s(tl, timelines or [tl]), wf.idle_s)))
    steps = [{"name": name, "step_time_s": float(wf.step_time_s[i]), "compute_s": float(wf.compute_s[i]),
              "communication_s": float(wf.communication_s[i]),
              "exposed_communication_s": float(wf.exposed_communication_s[i]), "idle_s": float(wf.idle_s[i])}
             for i, name in enumerate(tl.window_names)]
    mean = {k: float(np.mean(getattr(wf, k))) for k in ("step_time_s", "busy_s", "compute_s", "communication_s",
                                                         "overlap_s", "exposed_communication_s", "exposed_p2p_s",
                                                         "idle_s")}
    step = mean["step_time_s"]
    return RankFigures(
        label=tl.label, source=tl.source, rank=tl.rank, device=tl.device_name or tl.device_kind,
        steps_source=tl.windows_source, n_steps=len(steps), busy_fraction=mean["busy_s"] / step if step > 0 else 0.0,
        work_s=step - mean["exposed_communication_s"] - contended, step_time_cv=_cv(wf.step_time_s), steps=steps,
        notes=list(tl.notes), contended_s=contended, **mean)


def _cv(values) -> float | None:
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2 or np.mean(v) <= 0:
        return None
    return float(np.std(v) / np.mean(v))


# ----------------------------------------------------------------------------------------------------------
# Operators on the roofline
# ----------------------------------------------------------------------------------------------------------


class _Group:
    __slots__ = ("time", "own", "calls", "flops", "bytes", "costed", "comm", "kernel", "precisions")

    def __init__(self):
        self.time = 0.0
        self.own: float | None = None  # set only for calls on shared cores; else own time is time
        self.calls = 0.0
        self.flops = 0.0
        self.bytes = 0.0
        self.costed = False
        self.comm = False
        self.kernel = ""
        self.precisions: Counter = Counter()


def _work_key(op) -> tuple:
    """Calls of one operator that do the same work: same name, same FLOPs and bytes."""
    return op.name, op.flops, op.bytes


def _calls_in_windows(tl: Timeline):
    """The timeline's operator calls that start inside a step window."""
    starts = np.array([op.start_us for op in tl.ops], dtype=np.float64)
    inside = window_index(starts, tl.windows_us) >= 0
    return (op for op, ok in zip(tl.ops, inside.tolist(), strict=True) if ok and (op.time_us > 0 or op.flops))


def fastest_calls_us(timelines: list[Timeline]) -> dict[tuple, float]:
    """For devices sharing a host's cores: each operator's fastest call (``_work_key``) over the devices and
    step windows. Same work takes the same time on the same cores; a slower call waited, inside its span,
    for a core that another device (or another process) held, so the fastest call bounds its own work."""
    fastest: dict[tuple, float] = {}
    for tl in timelines:
        if tl.shared_host:
            for op in _calls_in_windows(tl):
                key = _work_key(op)
                fastest[key] = min(op.time_us, fastest.get(key, op.time_us))
    return fastest


def operator_table(timelines: list[Timeline], roofline: Roofline) -> list[OpRow]:
    """Every operator name's per-step, per-rank device time, FLOPs, bytes, intensity and bound, slowest first.

    Calls count in the step window where they start; times are device time (GPU: its kernels' durations;
    CPU: its self time). On shared cores an operator's own time counts each call as its fastest
    (``fastest_calls_us``).
    """
    groups: dict[str, _Group] = defaultdict(_Group)
    n_ranks = len(timelines)
    fastest = fastest_calls_us(timelines)
    for tl in timelines:
        n_windows = max(len(tl.window_names), 1)
        weight = 1.0 / (n_windows * n_ranks)
        for op in _calls_in_windows(tl):
            g = groups[op.name]
            g.time += op.time_us * US * weight
            if tl.shared_host:
                g.own = (g.own or 0.0) + fastest[_work_key(op)] * US * weight
            g.calls += weight
            if op.flops is not None or op.bytes is not None:
                g.costed = True
                g.flops += (op.flops or 0.0) * weight
                g.bytes += (op.bytes or 0.0) * weight
            g.comm = g.comm or op.is_comm
            if op.kernel and not g.kernel:
                g.kernel = op.kernel
            if op.precision:
                g.precisions[op.precision] += op.time_us
    total = sum(g.time for g in groups.values()) or 1.0
    rows = [_row(name, g, total, roofline) for name, g in groups.items()]
    rows.sort(key=lambda r: r.time_s, reverse=True)
    return rows


def _row(name: str, g: _Group, total_s: float, roofline: Roofline) -> OpRow:
    precision = g.precisions.most_common(1)[0][0] if g.precisions else None
    flops = g.flops if g.costed and not g.comm else None
    nbytes = g.bytes if g.costed and g.bytes > 0 else None
    intensity = flops / nbytes if flops is not None and nbytes else None
    role = hook_role(name)
    if g.comm:
        bound, source = "communication", ("hook" if role is not None else "name")
    elif role is HookRole.HOST:  # a framework's own Python (hooks, DTensor dispatch): host, whatever its time
        bound, source = "host", "hook"
    elif intensity is not None:
        bound, source = ("compute" if intensity >= roofline.ridge(precision) else "memory"), "shapes"
    elif flops == 0 and nbytes:
        bound, source = "memory", "shapes"
    else:
        bound, source = ("compute" if is_matrix(name) or is_matrix(g.kernel) else "memory"), "name"
    rate = flops / g.time if flops and g.time > 0 else None
    bw = nbytes / g.time if nbytes and g.time > 0 else None
    flop_util = rate / roofline.peak(precision) if rate else None
    bw_util = bw / roofline.bytes_per_s if bw and not g.comm else None
    per_call = g.time / g.calls if g.calls > 0 else 0.0
    overhead = bound == "host" or (
        not g.comm and flop_util is not None and bw_util is not None and per_call < OVERHEAD_CALL_S
        and flop_util < OVERHEAD_UTILIZATION and bw_util < OVERHEAD_UTILIZATION)
    return OpRow(
        name=name, time_s=g.time, share=g.time / total_s, calls=g.calls, flops=flops, bytes=nbytes,
        intensity=intensity, bound=bound, bound_from=source, precision=precision,
        tflops_per_s=rate / 1e12 if rate else None,
        flop_utilization=flop_util, bandwidth_gbps=bw / 1e9 if bw else None, bandwidth_utilization=bw_util,
        overhead_bound=overhead, own_time_s=g.time if g.own is None else g.own)


def _overhead_words(r: OpRow) -> str:
    """A host-bound operator in the evidence: its utilisation, or a framework hook's own time."""
    if r.bound_from == "hook":
        return f"{r.name} ({_t(r.time_s)}, the framework's own Python)"
    return f"{r.name} at {r.flop_utilization or 0:.0%} of peak FLOP/s"


def bound_fractions(rows: list[OpRow]) -> tuple[float, float, float]:
    """Shares of non-communication operator time that are compute-bound, memory-bound and overhead-bound
    (``OpRow.overhead_bound``: near neither roof). The time is the operators' own (``OpRow.own_time_s``): on
    shared cores, the waits for a core inside their calls do not tip the split."""
    def own(r: OpRow) -> float:
        return r.time_s if r.own_time_s is None else r.own_time_s

    over = sum(own(r) for r in rows if r.overhead_bound)
    comp = sum(own(r) for r in rows if r.bound == "compute" and not r.overhead_bound)
    mem = sum(own(r) for r in rows if r.bound == "memory" and not r.overhead_bound)
    total = comp + mem + over
    if total <= 0:
        return 1.0, 0.0, 0.0
    return comp / total, mem / total, over / total


def dominant_precision(rows: list[OpRow]) -> str | None:
    """The precision of most compute-bound operator time (the ridge a reader should compare against)."""
    by: defaultdict[str, float] = defaultdict(float)
    for r in rows:
        if r.precision and r.bound == "compute":
            by[r.precision] += r.time_s
    if not by:
        for r in rows:
            if r.precision:
                by[r.precision] += r.time_s
    return max(by, key=by.__getitem__) if by else None


# ----------------------------------------------------------------------------------------------------------
# Across ranks: imbalance, stragglers, jitter
# ----------------------------------------------------------------------------------------------------------


def imbalance_s(ranks: list[RankFigures]) -> float:
    """How long the average rank waits each step for the slowest: max over ranks of own work less the mean.

    In synchronous training that wait shows up inside the faster ranks' collectives, so it cannot exceed
    their exposed communication.
    """
    if len(ranks) < 2:
        return 0.0
    work = np.array([r.work_s for r in ranks])
    wait = float(work.max() - work.mean())
    return min(wait, float(np.mean([r.exposed_communication_s for r in ranks])) + float(np.mean([r.idle_s for r in ranks])))


def slowest_rank(ranks: list[RankFigures]) -> dict | None:
    """The rank the others wait on: the most own work (step less exposed communication), then step time."""
    if not ranks:
        return None
    r = max(ranks, key=lambda x: (round(x.work_s, 9), x.step_time_s))
    return {"label": r.label, "rank": r.rank, "source": r.source, "work_s": r.work_s, "step_time_s": r.step_time_s}


def stragglers(ranks: list[RankFigures], threshold: float) -> list[dict]:
    """Ranks whose step time, or own work time, exceeds the median over ranks by more than threshold x the
    median step time."""
    if len(ranks) < 2:
        return []
    med_step = float(np.median([r.step_time_s for r in ranks]))
    med_work = float(np.median([r.work_s for r in ranks]))
    out = []
    for r in ranks:
        over_step = (r.step_time_s - med_step) / med_step if med_step > 0 else 0.0
        over_work = (r.work_s - med_work) / med_step if med_step > 0 else 0.0
        if over_step > threshold or over_work > threshold:
            out.append({"label": r.label, "rank": r.rank, "source": r.source, "step_time_s": r.step_time_s,
                        "work_s": r.work_s, "step_time_over_median": over_step, "work_over_median": over_work,
                        "threshold": threshold})
    return out


def jitter(ranks: list[RankFigures], threshold: float) -> dict:
    """Coefficient of variation (std/mean) of step time across steps (per rank), across ranks (of their mean
    step times) and over all rank x step values; flagged where it exceeds threshold, saying where."""
    per_rank = [r.step_time_cv for r in ranks if r.step_time_cv is not None]
    across_steps = float(np.mean(per_rank)) if per_rank else None
    across_ranks = _cv([r.step_time_s for r in ranks]) if len(ranks) > 1 else None
    everything = _cv([s["step_time_s"] for r in ranks for s in r.steps])
    where = []
    for r in ranks:
        if r.step_time_cv is not None and r.step_time_cv > threshold:
            times = np.array([s["step_time_s"] for s in r.steps])
            worst = r.steps[int(np.argmax(times))]
            where.append(f"{r.label}: step time CV {r.step_time_cv:.2f} over {len(times)} steps; {worst['name']} "
                         f"took {worst['step_time_s']:.4g} s, {worst['step_time_s'] / np.median(times):.2f}x the median")
    if across_ranks is not None and across_ranks > threshold:
        slowest = max(ranks, key=lambda r: r.step_time_s)
        where.append(f"across ranks: CV {across_ranks:.2f} of mean step times; {slowest.label} is slowest at "
                     f"{slowest.step_time_s:.4g} s")
    return {"cv_across_steps": across_steps, "cv_across_ranks": across_ranks, "cv_all": everything,
            "threshold": threshold, "flagged": bool(where), "where": where}


# ----------------------------------------------------------------------------------------------------------
# The bottleneck
# ----------------------------------------------------------------------------------------------------------


def bottleneck_scores(fig: dict, compute_share: float, memory_share: float, imbalance: float,
                      overhead_share: float = 0.0) -> dict[Bottleneck, float]:
    """Seconds per step each bottleneck class accounts for; the largest names the bottleneck.

    compute/memory: compute time split by the time share of compute- and memory-bound operators;
    pipeline_bubble: point-to-point time no compute hides; communication: the rest of the exposed
    communication; host: device idle, plus the compute time of operators near neither roof (their time is
    launch latency and overhead), less the idle spent waiting for cores that other devices of the same host
    were computing on (``contended_s``, XLA:CPU's virtual devices), which goes to compute and memory in their
    proportion; imbalance: the wait for the slowest rank, taken out of the exposed communication (where it
    shows) and then out of idle.
    """
    exposed_collective = max(fig["exposed_communication_s"] - fig["exposed_p2p_s"], 0.0)
    contended = min(fig.get("contended_s", 0.0), fig["idle_s"])
    idle = fig["idle_s"] - contended
    from_comm = min(imbalance, exposed_collective)
    from_idle = min(imbalance - from_comm, idle)
    bound = compute_share + memory_share
    cores_c, cores_m = ((contended * compute_share / bound, contended * memory_share / bound) if bound > 0
                        else (contended, 0.0))
    return {
        Bottleneck.COMPUTE: fig["compute_s"] * compute_share + cores_c,
        Bottleneck.MEMORY: fig["compute_s"] * memory_share + cores_m,
        Bottleneck.COMMUNICATION: exposed_collective - from_comm,
        Bottleneck.HOST: idle - from_idle + fig["compute_s"] * overhead_share,
        Bottleneck.PIPELINE_BUBBLE: fig["exposed_p2p_s"],
        Bottleneck.IMBALANCE: from_comm + from_idle,
    }


def trace_classes(scores: dict[Bottleneck, float], rows: list[OpRow], step_s: float) -> list[ClassSaving]:
    """The scores as bottleneck classes, verdict first. Exposed collectives split by kind in proportion to their
    operators' time: all-to-all is expert-parallel (ep_comm); the others go to dp_comm, since a trace alone does
    not say which axis an all-reduce serves (the Analyzer re-splits them by the cost model's axis terms when it
    knows the strategy). Compute leads only when it is the largest score and most of the step."""
    C = BottleneckClass
    comm = [r for r in rows if r.bound == "communication" and not is_p2p(r.name)]
    total = sum(r.time_s for r in comm)
    a2a = sum(r.time_s for r in comm if ALLTOALL_RE.search(r.name)) / total if total > 0 else 0.0
    of = f" of {_t(step_s)}"
    B = Bottleneck
    items = [(C.EP_COMM, scores[B.COMMUNICATION] * a2a, "all-to-all exposed"),
             (C.DP_COMM, scores[B.COMMUNICATION] * (1 - a2a), "collectives exposed"),
             (C.PIPELINE_BUBBLE, scores[B.PIPELINE_BUBBLE], "point-to-point waits (bubble)"),
             (C.HOST, scores[B.HOST], "host and launch"),
             (C.STAGE_IMBALANCE, scores[B.IMBALANCE], "waiting on the slowest rank"),
             (C.MEMORY_BANDWIDTH, scores[B.MEMORY], "memory-bound operators")]
    out = [ClassSaving(c, v, f"{what} {_t(v)}{of}") for c, v, what in sorted(items, key=lambda x: (-x[1], x[0].value))
           if v > 0]
    compute_s = scores[B.COMPUTE]
    compute = ClassSaving(C.COMPUTE, 0.0, f"compute-bound operators {_t(compute_s)}{of} ({compute_s / (step_s or 1):.0%})")
    healthy = compute_s >= max(scores.values()) and compute_s >= TRACE_COMPUTE_BOUND_SHARE * step_s
    if healthy or not out:
        return [compute] + out
    coarse = max((k for k in Bottleneck if k != B.COMPUTE), key=lambda k: scores[k])
    first = next((o for o in out if o.bottleneck == coarse), out[0])
    return [first] + [o for o in out if o is not first] + [compute]


def _t(seconds: float) -> str:
    """A duration as it reads best (s, ms, us; four significant digits): ``asap.spec.words.duration_text``."""
    return duration_text(seconds, significant=4)


def _evidence(bottleneck: Bottleneck, scores: dict, fig: dict, rows: list[OpRow], ranks: list[RankFigures],
              roofline: Roofline, slow: dict | None, n_steps: int) -> list[str]:
    step = fig["step_time_s"] or 1.0
    ev = [
        f"{bottleneck}: {_t(scores[bottleneck])} of the {_t(fig['step_time_s'])} step "
        f"({scores[bottleneck] / step:.0%}); all scores: " +
        ", ".join(f"{k}-bound {_t(v)}" for k, v in sorted(scores.items(), key=lambda kv: -kv[1])),
        f"averaged over {n_steps} step windows on {len(ranks)} rank(s): device busy {fig['busy_fraction']:.0%}; "
        f"compute kernels busy {_t(fig['compute_s'])}, communication kernels busy {_t(fig['communication_s'])} "
        f"({_t(fig['overlap_s'])} overlapped with compute, {_t(fig['exposed_communication_s'])} exposed), "
        f"idle {_t(fig['idle_s'])}",
    ]
    if bottleneck in (Bottleneck.COMPUTE, Bottleneck.MEMORY):
        picked = [r for r in rows if r.bound == bottleneck][:3]
        for r in picked:
            detail = (f"intensity {r.intensity:.3g} FLOP/B vs ridge {roofline.ridge(r.precision):.3g}"
                      if r.intensity is not None else f"bound from its name ({r.bound_from})")
            util = f", {r.flop_utilization:.0%} of peak FLOP/s" if r.flop_utilization else ""
            util += f", {r.bandwidth_utilization:.0%} of memory bandwidth" if r.bandwidth_utilization else ""
            ev.append(f"{r.name}: {_t(r.time_s)} per step ({r.share:.0%} of op time), {detail}{util}")
    elif bottleneck == Bottleneck.COMMUNICATION:
        for r in [r for r in rows if r.bound == "communication"][:3]:
            size = f", {r.bytes / 1e6:.3g} MB per step" if r.bytes else ""
            ev.append(f"{r.name}: {_t(r.time_s)} per step ({r.share:.0%} of op time){size}")
    elif bottleneck == Bottleneck.HOST:
        over = [r for r in rows if r.overhead_bound][:3]
        ev.append(f"the device idles {fig['idle_s'] / step:.0%} of the step: launch overhead, input pipeline or "
                  "Python between operators" + (f"; and {len(over)}+ busy operators near neither roof ("
                                                 + ", ".join(_overhead_words(r) for r in over) + ")" if over else ""))
    elif bottleneck == Bottleneck.PIPELINE_BUBBLE:
        ev.append(f"point-to-point transfers exposed {_t(fig['exposed_p2p_s'])} per step: stages wait for "
                  "their neighbours' activations or gradients")
    elif bottleneck == Bottleneck.IMBALANCE and slow:
        ev.append(f"slowest rank {slow['label']}: {_t(slow['work_s'])} of own work per step; the others wait "
                  f"{_t(scores[Bottleneck.IMBALANCE])} on average")
    return ev


# ----------------------------------------------------------------------------------------------------------
# Composition
# ----------------------------------------------------------------------------------------------------------


# What a caller may say the traces ran on: a name, the accelerator itself (a cluster's custom or calibrated part),
# a roofline already chosen (both sides of a comparison on one), or nothing (the traces' device properties).
AcceleratorHint: TypeAlias = str | Accelerator | Roofline | None


def choose_roofline(timelines: list[Timeline], accelerator: AcceleratorHint) -> tuple[Roofline, list[str]]:
    """The roofline of the named or given accelerator, else of the one the traces' device properties name."""
    if isinstance(accelerator, Roofline):
        return accelerator, []
    if accelerator:
        return roofline_for(accelerator), []
    tl = timelines[0]
    name, note = infer_accelerator(tl.device_kind, tl.device_name, tl.device_memory_bytes)
    return roofline_for(name), [note] if note else []


def _mean_figures(ranks: list[RankFigures]) -> dict:
    keys = ("step_time_s", "busy_s", "compute_s", "communication_s", "overlap_s", "exposed_communication_s",
            "exposed_p2p_s", "idle_s", "contended_s")
    fig = {k: float(np.mean([getattr(r, k) for r in ranks])) for k in keys}
    fig["busy_fraction"] = fig["busy_s"] / fig["step_time_s"] if fig["step_time_s"] > 0 else 0.0
    return fig


def diagnose_timelines(timelines: list[Timeline], accelerator: AcceleratorHint = None, top: int = 10,
                       straggler_threshold: float = DEFAULT_STRAGGLER_THRESHOLD,
                       jitter_threshold: float = DEFAULT_JITTER_THRESHOLD, fusion: bool = False) -> Diagnosis:
    roofline, notes = choose_roofline(timelines, accelerator)
    ranks = [rank_figures(tl, timelines) for tl in timelines]
    fig = _mean_figures(ranks)
    rows = operator_table(timelines, roofline)
    compute_share, memory_share, overhead_share = bound_fractions(rows)
    imbalance = imbalance_s(ranks)
    scores = bottleneck_scores(fig, compute_share, memory_share, imbalance, overhead_share)
    classes = trace_classes(scores, rows, fig["step_time_s"])
    bottleneck = classes[0].bottleneck
    slow = slowest_rank(ranks)
    n_steps = sum(r.n_steps for r in ranks)
    for tl in timelines:
        notes.extend(f"{tl.label}: {n}" for n in tl.notes)
    sources = sorted({r.steps_source for r in ranks})
    return Diagnosis(
        step_time_s=fig["step_time_s"], compute_s=fig["compute_s"], communication_s=fig["communication_s"],
        overlap_s=fig["overlap_s"], exposed_communication_s=fig["exposed_communication_s"],
        exposed_p2p_s=fig["exposed_p2p_s"], idle_s=fig["idle_s"], busy_fraction=fig["busy_fraction"],
        bottleneck=bottleneck, evidence=_evidence(bottleneck, scores, fig, rows, ranks, roofline, slow, n_steps),
        scores_s=scores, top_ops=rows[:top], ranks=ranks, stragglers=stragglers(ranks, straggler_threshold),
        slowest_rank=slow, imbalance_s=imbalance, jitter=jitter(ranks, jitter_threshold),
        steps_source="+".join(sources), n_steps=n_steps, roofline=roofline,
        traces=sorted({tl.source for tl in timelines}), notes=notes, precision=dominant_precision(rows),
        fusion=fusion_table(timelines, roofline) if fusion else None, classes=classes)


def check_one_job(timelines: list[Timeline]) -> None:
    """Refuse, with one line, traces that cannot come from one job: different world sizes, different device
    kinds or names, or one rank id recorded twice by different files."""
    sizes = sorted({tl.world_size for tl in timelines if tl.world_size is not None})
    if len(sizes) > 1:
        raise AsapError("traces", f"come from different jobs: world sizes {', '.join(map(str, sizes))} "
                                  "(diagnose one job at a time)")
    devices = sorted({f"{tl.device_kind}:{tl.device_name or '?'}" for tl in timelines})
    if len(devices) > 1:
        raise AsapError("traces", f"come from different jobs: devices {', '.join(devices)} (diagnose one job at a time)")
    seen: dict[tuple, str] = {}
    for tl in timelines:
        key = (tl.rank, tl.label)
        if tl.rank is not None and key in seen and seen[key] != tl.source:
            raise AsapError("traces", f"come from different jobs: rank {tl.rank} is in both {seen[key]} and "
                                      f"{tl.source} (diagnose one job at a time)")
        seen.setdefault(key, tl.source)
    if sizes and any(tl.rank is not None and tl.rank >= sizes[0] for tl in timelines):
        raise AsapError("traces", f"come from different jobs: a rank id beyond the world size {sizes[0]}")


def diagnose(traces: list[str | Path], accelerator: AcceleratorHint = None, top: int = 10,
             straggler_threshold: float = DEFAULT_STRAGGLER_THRESHOLD,
             jitter_threshold: float = DEFAULT_JITTER_THRESHOLD, fusion: bool = False) -> Diagnosis:
    """Diagnose one job from its traces (one file, or a folder of them, per rank); traces of several jobs are
    refused (``check_one_job``)."""
    paths = expand_paths(list(traces))
    timelines = [tl for path in paths for tl in load_timelines(path)]
    check_one_job(timelines)
    d = diagnose_timelines(timelines, accelerator, top, straggler_threshold, jitter_threshold, fusion)
    read_workload(d, paths)
    return d
