"""The shared vocabulary (docs/design.md, "Words"): what the cost model's estimate and the trace diagnosis call a
bottleneck (one table for both, so a predicted and a measured verdict compare), what a trial's status and a
failed trial's kind are called. Each word is a ``str`` enum whose value is its spelling in JSON, SQLite and the
printed tables, so a member and its text compare, hash and print alike."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


class Word(str, Enum):
    """A word of the vocabulary: prints, formats and serialises as its value."""

    def __str__(self) -> str:
        return self.value


class Bottleneck(Word):
    COMPUTE = "compute"  # matrix units busy
    MEMORY = "memory"  # HBM/DRAM bandwidth: low arithmetic intensity
    COMMUNICATION = "communication"  # exposed collectives or point-to-point
    HOST = "host"  # the device idles: launch, input, Python
    PIPELINE_BUBBLE = "pipeline_bubble"
    IMBALANCE = "imbalance"  # ranks or stages wait on the slowest


BOTTLENECKS = tuple(b.value for b in Bottleneck)

# the words as the text for people says them (JSON keeps the values above): "memory" is HBM bandwidth
# (the coarse ``memory`` covers both memory classes: ``human_word`` reads the class to tell them apart)
HUMAN_WORDS = {"memory": "HBM bandwidth", "memory_bandwidth": "HBM bandwidth", "memory_capacity": "capacity",
               "pipeline_bubble": "pipeline bubble"}


def human_word(word, cls=None) -> str:
    """A bottleneck (or class) word as printed for people: ``memory_bandwidth`` (and ``memory``) -> "HBM
    bandwidth", ``memory_capacity`` -> "capacity", an underscore a space. ``cls``: the estimate's bottleneck
    class, read where the coarse word is ``memory`` (capacity or bandwidth)."""
    text = str(word) if word is not None else ""
    if text == Bottleneck.MEMORY.value and str(cls) == "memory_capacity":
        text = "memory_capacity"
    return HUMAN_WORDS.get(text, text.replace("_", " "))


class BottleneckClass(Word):
    """What can be won, finer than ``Bottleneck``: each class is a term of the step that a named move removes
    (the Analyzer gives each its figure, the seconds removing it would save). ``bottleneck`` is the coarse word
    it reads as in design.md's vocabulary."""

    TP_COMM = "tp_comm"  # exposed tensor-parallel collectives
    CP_COMM = "cp_comm"  # exposed context-parallel ring / all-gather
    EP_COMM = "ep_comm"  # exposed expert-parallel all-to-all
    PP_COMM = "pp_comm"  # exposed pipeline point-to-point
    DP_COMM = "dp_comm"  # exposed data-parallel gradient reduction / ZeRO gathers
    PIPELINE_BUBBLE = "pipeline_bubble"  # fill and drain of the pipeline
    MEMORY_CAPACITY = "memory_capacity"  # does not fit, or above the usable share of HBM
    MEMORY_BANDWIDTH = "memory_bandwidth"  # memory-bound kernels (low arithmetic intensity)
    RECOMPUTE = "recompute"  # forward passes recomputed in backward
    HOST = "host"  # launch, Python and input overhead: the device idles
    EXPERT_IMBALANCE = "expert_imbalance"  # the busiest expert rank over the mean
    SEQUENCE_IMBALANCE = "sequence_imbalance"  # packed documents: uneven attention work across ranks
    STAGE_IMBALANCE = "stage_imbalance"  # the heaviest pipeline stage (or slowest rank) over the mean
    COMPUTE = "compute"  # useful compute at a healthy MFU: nothing large left to remove

    @property
    def bottleneck(self) -> Bottleneck:
        return _COARSE.get(self, Bottleneck.COMMUNICATION)


_COARSE = {BottleneckClass.PIPELINE_BUBBLE: Bottleneck.PIPELINE_BUBBLE,
           BottleneckClass.MEMORY_CAPACITY: Bottleneck.MEMORY, BottleneckClass.MEMORY_BANDWIDTH: Bottleneck.MEMORY,
           BottleneckClass.RECOMPUTE: Bottleneck.COMPUTE, BottleneckClass.HOST: Bottleneck.HOST,
           BottleneckClass.EXPERT_IMBALANCE: Bottleneck.IMBALANCE,
           BottleneckClass.SEQUENCE_IMBALANCE: Bottleneck.IMBALANCE,
           BottleneckClass.STAGE_IMBALANCE: Bottleneck.IMBALANCE, BottleneckClass.COMPUTE: Bottleneck.COMPUTE}
BOTTLENECK_CLASSES = tuple(c.value for c in BottleneckClass)


@dataclass(frozen=True)
class ClassSaving:
    """One bottleneck class of a step and what removing it would save: the record the cost model's estimate
    (``asap.cost.classes``), the trace diagnosis (``asap.profile.diagnose``) and the Analyzer share; ``to_dict``
    is its JSON, ``{class, bottleneck, saving_s, figure}``."""

    cls: BottleneckClass
    saving_s: float  # seconds per step removing it would save (0 for memory capacity: a constraint)
    figure: str  # "tp_comm exposed 4.1 s of 36.8 s"

    @property
    def bottleneck(self) -> Bottleneck:
        return self.cls.bottleneck

    def to_dict(self) -> dict[str, Any]:
        return {"class": self.cls.value, "bottleneck": self.cls.bottleneck.value, "saving_s": self.saving_s,
                "figure": self.figure}


class TrialStatus(Word):
    """Where a trial of the tune loop stands (the Sharding Memory's ``trials.status`` column)."""

    RUNNING = "running"  # begun, committed before it starts
    OK = "ok"  # produced a step time
    FAILED = "failed"  # produced none (a ``FailureKind`` says why), or did not align numerically
    SKIPPED = "skipped"  # already in memory: not run again
    KILLED = "killed"  # its process ended before it finished


FINISHED_STATUSES = (TrialStatus.OK, TrialStatus.FAILED, TrialStatus.SKIPPED, TrialStatus.KILLED)
ENDED_STATUSES = (TrialStatus.OK, TrialStatus.FAILED)  # run to an end: the loop never runs those again


class FailureKind(Word):
    """Why a trial produced no step time."""

    INVALID = "invalid"  # a strategy the model, the cluster or the executor cannot take
    OOM = "oom"  # out of memory (or killed by the kernel's OOM killer)
    CRASH = "crash"  # exited with an error
    TIMEOUT = "timeout"  # no result within the time allowed (a hang?)
    NO_RESULT = "no_result"  # ended without a step time in its output
    INTERNAL = "internal"  # a bug of the executor itself


def count_text(n: float) -> str:
    """A count the way model cards write it: 8.03B, 671B, 1.2T, 4.46M, 98.3K, 512 (three significant figures)."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.0f}"


def did_you_mean(text: str, names) -> str:
    """`` (did you mean 'h100-sxm'?)`` for the closest names (difflib's ratio, or a name the text starts),
    or '' when none is close."""
    import difflib

    t = str(text).lower()
    names = list(names)
    close = [n for n in names if n.startswith(t) or t.startswith(n)] if len(t) >= 2 else []
    close += [n for n in difflib.get_close_matches(t, names, n=3, cutoff=0.6) if n not in close]
    if not close:
        return ""
    return " (did you mean " + " or ".join(f"'{n}'" for n in close[:3]) + "?)"


def duration_text(seconds: float, significant: int | None = None) -> str:
    """A duration in the unit that reads best: s, ms or µs; the one duration formatter of every face.

    Fixed decimals by default (the tables: ``1.234 s``, ``12.35 ms``, ``25.0 µs``; under 0.5 ns ``0``), or
    ``significant`` digits (the diagnosis's evidence lines, which go into JSON, so micro is ASCII: ``12.3 ms``,
    ``4.5 us``; under 1 ns ``0 s``, as interval sums leave ~1e-18 s residues)."""
    a = abs(seconds)
    if significant is not None:
        if a < 1e-9:
            return "0 s"
        if a >= 1.0:
            return f"{seconds:.{significant}g} s"
        if a >= 1e-3:
            return f"{seconds * 1e3:.{significant}g} ms"
        return f"{seconds * 1e6:.{significant}g} us"
    if a < 5e-10:
        return "0"
    if a >= 1.0:
        return f"{seconds:.3f} s"
    if a >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"
