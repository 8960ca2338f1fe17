"""What a trace holds besides its timeline: which kind of workload it is (LLM training with attention and matmul
layers, a recommendation model's embedding lookups, a CNN's convolutions and batch norms, or another), and, for a
host-bound step, where the host's time goes (Python and framework dispatch, kernel launches, the data loader).

Both read a Kineto (PyTorch profiler) trace's raw events: the device kernels (``cat: kernel``) by name for the
kind (CPU traces: the operators, ``cat: cpu_op``), and the CPU events inside the ``ProfilerStep#N`` windows for
the host split:

    launch_s        = sum of the runtime's launch calls (cudaLaunchKernel, cuLaunchKernel, hipLaunchKernel, ...)
    data_loader_s   = union of the DataLoader's spans (``enumerate(DataLoader)#...__next__``)
    python_s        = union of the CPU operators' spans (the framework's forward and backward dispatch, per
                      thread) - launch_s - the data loader's part of them

each per step (the sum over the windows over their count).
"""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from asap.spec.words import Bottleneck


class WorkloadKind(str, Enum):
    LLM = "llm"  # attention and matmul layers: a transformer (language model) step
    RECOMMENDATION = "recommendation"  # embedding-table lookups (FBGEMM's split embeddings, embedding bags)
    CNN = "cnn"  # convolutions and batch norms (cuDNN, MIOpen)
    OTHER = "other"  # none of these: no attention layers (an MLP, a toy model)


# name patterns of each kind's kernels or operators (device kernels; on a CPU trace its operators)
ATTENTION_RE = re.compile(r"flash|fmha|attention|scaled_dot_product|sdpa|softmax|cutlass.*mha|xformers", re.I)
MATMUL_RE = re.compile(r"gemm|aten::(mm|addmm|bmm|matmul|linear)\b|Cijk_|cublas|matmul|dot_general|nvjet", re.I)
EMBEDDING_RE = re.compile(r"split_embedding|embedding_bag|embedding_backward|permute_pooled_embs|fbgemm|jagged|"
                          r"All2All_Pooled|tbe_", re.I)
CONV_RE = re.compile(r"conv|cudnn::(bn_|ops::nchw)|bn_fw|bn_bw|batch_norm|nchwToNhwc|nhwcToNchw|implicit_gemm|"
                     r"winograd|miopen|dgrad|wgrad", re.I)
SIGNATURE_SHARE = 0.05  # a kind's own kernels at least this share of device time mark it
LAUNCH_RE = re.compile(r"^(cudaLaunchKernel|cuLaunchKernel|cudaLaunchKernelExC|cudaLaunchCooperativeKernel|"
                       r"hipLaunchKernel|hipExtModuleLaunchKernel|hipModuleLaunchKernel|cudaGraphLaunch)", re.I)
LOADER_RE = re.compile(r"DataLoader", re.I)


@dataclass(frozen=True)
class Workload:
    kind: WorkloadKind
    shares: dict[str, float]  # device (or CPU operator) time share of attention, matmul, embedding, conv
    evidence: str

    @property
    def is_llm(self) -> bool:
        return self.kind == WorkloadKind.LLM

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "shares": dict(self.shares), "evidence": self.evidence}


@dataclass(frozen=True)
class HostSplit:
    """Seconds per step of host time: Python/framework dispatch, kernel launches, the data loader."""

    python_dispatch_s: float
    kernel_launch_s: float
    data_loader_s: float
    steps: int

    @property
    def dominant(self) -> str:
        parts = {"Python and framework dispatch": self.python_dispatch_s, "kernel launches": self.kernel_launch_s,
                 "the data loader": self.data_loader_s}
        return max(parts, key=lambda k: parts[k])

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "dominant": self.dominant}

    def line(self) -> str:
        ms = 1e3
        return (f"host time per step: Python and framework dispatch {self.python_dispatch_s * ms:.3g} ms (CPU "
                f"operators of forward and backward), kernel launches {self.kernel_launch_s * ms:.3g} ms, data loader "
                f"{self.data_loader_s * ms:.3g} ms: {self.dominant} dominates")


def raw_events(path: str | Path) -> list[dict]:
    """A Kineto trace's events ([] for any other file: a JAX profile, an unreadable one)."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(path, "rt", encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError, EOFError):
        return []
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    return [e for e in events if _well_formed(e)] if isinstance(events, list) else []


def _well_formed(e: Any) -> bool:
    """An event this module can read: a dict whose ``ts`` and ``dur``, where present, are finite numbers (``dur``
    not negative); a malformed one is skipped, as the timeline's own reader skips it."""
    if not isinstance(e, dict):
        return False
    for key in ("ts", "dur"):
        v = e.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or abs(v) > 1e300 or not math.isfinite(v):
            return False
    return e.get("dur", 0.0) >= 0


def _time_by(events: list[dict], cat: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for e in events:
        if e.get("cat") == cat and e.get("ph") == "X":
            out[str(e.get("name", ""))] = out.get(str(e.get("name", "")), 0.0) + float(e.get("dur", 0.0))
    return out


def workload_of(events: list[dict]) -> Workload | None:
    """The kind of workload the trace's kernels (else its CPU operators) show; None without either."""
    times = _time_by(events, "kernel") or _time_by(events, "cpu_op")
    total = sum(times.values())
    if total <= 0:
        return None
    shares = {k: sum(t for n, t in times.items() if rx.search(n)) / total
              for k, rx in (("attention", ATTENTION_RE), ("matmul", MATMUL_RE), ("embedding", EMBEDDING_RE),
                            ("conv", CONV_RE))}
    pct = {k: f"{v:.0%}" for k, v in shares.items()}
    if shares["embedding"] >= SIGNATURE_SHARE and shares["embedding"] >= shares["conv"]:
        kind, why = WorkloadKind.RECOMMENDATION, f"embedding-table kernels (FBGEMM) {pct['embedding']} of device time"
    elif shares["conv"] >= SIGNATURE_SHARE:
        kind, why = WorkloadKind.CNN, f"convolution and batch-norm kernels {pct['conv']} of device time"
    elif shares["attention"] > 0 and shares["matmul"] > 0:
        kind, why = WorkloadKind.LLM, f"attention {pct['attention']} and matmul {pct['matmul']} of device time"
    else:
        kind, why = WorkloadKind.OTHER, f"no attention layers (matmul {pct['matmul']} of device time)"
    return Workload(kind, {k: round(v, 4) for k, v in shares.items()}, why)


def _union_s(spans: list[tuple[float, float]]) -> float:
    """The length of the union of [start, end) spans, microseconds."""
    if not spans:
        return 0.0
    arr = np.array(sorted(spans))
    total, (cur_s, cur_e) = 0.0, arr[0]
    for s, e in arr[1:]:
        if s > cur_e:
            total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return float(total + cur_e - cur_s)


def _clip(e: dict, windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    s, d = float(e.get("ts", 0.0)), float(e.get("dur", 0.0))
    return [(max(s, a), min(s + d, b)) for a, b in windows if s < b and s + d > a]


def host_split(events: list[dict]) -> HostSplit | None:
    """Per step, the host's time split by what it did (module docstring); None without CPU operators."""
    windows = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in events
                     if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#") and "ts" in e
                     and e.get("cat") in ("user_annotation", "cpu_op"))
    if not windows:
        stamps = [float(e["ts"]) for e in events if e.get("ph") == "X" and "ts" in e]
        if not stamps:
            return None
        windows = [(min(stamps), max(float(e["ts"]) + float(e.get("dur", 0.0)) for e in events
                                     if e.get("ph") == "X" and "ts" in e))]
    by_thread: dict[tuple, list[tuple[float, float]]] = {}
    loader: list[tuple[float, float]] = []
    launch_us = 0.0
    for e in events:
        if e.get("ph") != "X" or "ts" not in e:
            continue
        name, cat = str(e.get("name", "")), e.get("cat")
        if cat == "cpu_op":
            by_thread.setdefault((str(e.get("pid")), str(e.get("tid"))), []).extend(_clip(e, windows))
        if cat in ("cpu_op", "user_annotation") and LOADER_RE.search(name):
            loader.extend(_clip(e, windows))
        if cat in ("cuda_runtime", "cuda_driver") and LAUNCH_RE.match(name):
            launch_us += sum(b - a for a, b in _clip(e, windows))
    if not by_thread:
        return None
    cpu_us = sum(_union_s(spans) for spans in by_thread.values())
    loader_us = _union_s(loader)
    n = len(windows)
    python_us = max(cpu_us - launch_us - loader_us, 0.0)
    return HostSplit(python_us / n / 1e6, launch_us / n / 1e6, loader_us / n / 1e6, n)


def read_workload(d: Any, paths: list[Path]) -> None:
    """Set ``d``'s (``asap.profile.diagnose.Diagnosis``) workload kind and host split, from the first Kineto trace
    of the job (one rank's file), each as evidence after the verdict's line (a host-bound verdict's split first)."""
    for path in paths[:2]:  # a rank's file tells; a folder of non-Kineto files is not read through
        events = raw_events(path)
        kind = workload_of(events) if events else None
        if kind is None:
            continue
        d.workload = kind.to_dict()
        split = host_split(events)
        d.host_split = split.to_dict() if split else None
        at = min(1, len(d.evidence))  # after the verdict's own line, which names the bottleneck
        d.evidence.insert(at, f"workload: {kind.kind.value} ({kind.evidence})")
        if split and d.bottleneck == Bottleneck.HOST:
            d.evidence.insert(at, split.line())
        return
