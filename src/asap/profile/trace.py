"""Reading trace files, and the one shape every reader produces: a ``Timeline`` per rank/device.

Readers exist for PyTorch profiler (Kineto) Chrome traces (CUDA, ROCm, CPU-only), JAX profiler traces
(``perfetto_trace.json.gz`` / ``*.trace.json.gz``) and XProf's ``*.xplane.pb`` (``asap.profile.xplane``). Both are Chrome trace JSON, optionally gzipped; orjson
parses it when installed (about 3x faster than the standard library), else ``json`` does. A Kineto trace is
streamed instead (``asap.profile.kineto.stream_kineto``, ijson), not held whole in memory.

Every bad input becomes an ``AsapError`` naming the file and the problem in one line. ``asap.profile.load``
(``load_timelines``) picks the reader for a file; the readers build on this module's types and helpers.
"""

from __future__ import annotations

import gzip
import json
import re
from enum import Enum
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from asap.errors import AsapError
from asap.profile.windows import Intervals

if TYPE_CHECKING:
    from asap.profile.ops import TensorIO

try:  # optional speed-up; the standard library is the fallback
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

GZIP_MAGIC = b"\x1f\x8b"


@dataclass(slots=True)
class OpInstance:
    """One operator call: its device (or, on CPU traces, self) time and, when shapes were recorded, its work."""

    name: str
    start_us: float
    time_us: float
    flops: float | None = None
    bytes: float | None = None
    precision: str | None = None
    is_comm: bool = False
    is_p2p: bool = False
    kernel: str | None = None  # a device kernel it ran, for the name-based bound when shapes are missing
    io: TensorIO | None = None  # tensors read and written (asap.profile.ops.io_bytes), for fusion analysis
    lane: int = 0  # the CPU thread or GPU stream it ran on: operators run one after another within a lane
    leaf: bool = True  # does its own memory traffic (CPU: not a wrapper whose recorded children do it all)


@dataclass
class Timeline:
    """What one rank (one device, or one CPU process) did, in the form the diagnosis needs."""

    label: str
    source: str
    rank: int | None
    framework: str  # pytorch | jax
    device_kind: str  # gpu | cpu | tpu
    device_name: str | None
    device_memory_bytes: float | None
    windows_us: np.ndarray  # (n, 2)
    window_names: list[str]
    windows_source: str  # ProfilerStep | StepTraceAnnotation | whole_trace
    compute: Intervals
    comm: Intervals
    p2p: Intervals
    ops: list[OpInstance]
    notes: list[str] = field(default_factory=list)
    world_size: int | None = None  # the job's size, where the trace records it (Kineto's distributedInfo)
    # devices that share one host's cores (XLA:CPU's virtual devices): the key they share, else None
    shared_host: str | None = None


# ----------------------------------------------------------------------------------------------------------
# Reading files
# ----------------------------------------------------------------------------------------------------------

_TRACE_FILE_PATTERNS = ("*.pt.trace.json", "*.pt.trace.json.gz", "perfetto_trace.json.gz", "*.trace.json.gz",
                        "*.trace.json", "*.json.gz", "*.json", "*.xplane.pb")


def expand_paths(paths: list[str | Path]) -> list[Path]:
    """Trace files from the arguments: files as given, folders searched for trace files (one per rank).

    A JAX profile folder holds the same trace twice (perfetto_trace.json.gz and <host>.trace.json.gz); only
    the perfetto one is taken from a folder that has both.
    """
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise AsapError(str(raw), "no such file or folder")
        if p.is_file():
            out.append(p)
            continue
        found: list[Path] = []
        for pattern in _TRACE_FILE_PATTERNS:
            found = sorted(f for f in p.rglob(pattern) if f.is_file())
            if found:
                break
        perfetto_dirs = {f.parent for f in found if f.name == "perfetto_trace.json.gz"}
        found = [f for f in found if f.name == "perfetto_trace.json.gz" or f.parent not in perfetto_dirs]
        if not found:
            raise AsapError(str(raw), "folder holds no trace files (*.json, *.json.gz)")
        out.extend(found)
    if not out:
        raise AsapError("TRACE", "no trace given")
    return out


def read_bytes(path: Path) -> bytes:
    """The file's JSON bytes, gunzipped when it starts with the gzip magic (whatever its extension)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise AsapError(str(path), f"cannot read ({e.strerror or e})") from None
    if not raw:
        raise AsapError(str(path), "empty file")
    if raw[:2] != GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except EOFError:
        raise AsapError(str(path), "truncated gzip file (the compressed stream ends early)") from None
    except (gzip.BadGzipFile, zlib.error, OSError) as e:
        raise AsapError(str(path), f"corrupt gzip file ({e})") from None


def parse_json(data: bytes, path: Path) -> Any:
    """Parse JSON with orjson when available; a decoding failure names the file and the position."""
    try:
        if _orjson is not None:
            return _orjson.loads(data)
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise AsapError(str(path), f"not valid JSON ({msg})") from None


MAX_TIME_US = 1e17  # timestamps and durations past this (three thousand years) are corrupt, not measurements


def _time_ok(v: Any, low: float) -> bool:
    return type(v) in (int, float) and low <= v <= MAX_TIME_US  # NaN fails both comparisons


def well_formed(e: Any) -> bool:
    """An event the readers can use: a mapping whose fields have the types Chrome trace JSON gives them (a
    string phase, category and name; finite times; scalar pid/tid; a mapping of args). Others are left out."""
    if type(e) is not dict or type(e.get("ph")) is not str:
        return False
    for key in ("cat", "name"):
        if key in e and type(e[key]) is not str:
            return False
    for key in ("pid", "tid"):
        if key in e and type(e[key]) not in (int, str):
            return False
    if "args" in e and type(e["args"]) is not dict:
        return False
    if e["ph"] == "X" and not (_time_ok(e.get("ts"), -MAX_TIME_US) and _time_ok(e.get("dur", 0), 0.0)):
        return False
    return True


def load_document(path: Path) -> dict:
    """A trace document as a dict with a ``traceEvents`` list (a bare JSON array is wrapped)."""
    doc = parse_json(read_bytes(path), path)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise AsapError(str(path), "is JSON but not a profiler trace (no 'traceEvents' list)")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if well_formed(e)]
    if not any(isinstance(e, dict) and e.get("ph") == "X" for e in doc["traceEvents"]):
        raise AsapError(str(path), "profiler trace has no timed ('ph': 'X') events")
    return doc


def trace_format(doc: dict) -> str:
    """'kineto' or 'jax', from what only each of them writes; anything else is refused."""
    if "schemaVersion" in doc or "deviceProperties" in doc or "distributedInfo" in doc:
        return "kineto"
    for e in doc["traceEvents"][:5000]:
        verdict = event_format(e)
        if verdict is not None:
            return verdict
    raise AsapError("trace", "not a PyTorch profiler (Kineto) or JAX profiler trace (no events of either kind)")


def event_format(e: Any) -> str | None:
    """'jax' or 'kineto' where this one event is of a kind only that profiler writes, else None."""
    if not isinstance(e, dict):
        return None
    if e.get("ph") == "M" and e.get("name") == "process_name":
        name = str((e.get("args") or {}).get("name", ""))
        if name.startswith("/host:") or name.startswith("/device:"):
            return "jax"
    if e.get("cat") in ("cpu_op", "kernel", "cuda_runtime", "user_annotation", "Operator", "Kernel", "Runtime"):
        return "kineto"
    return None


# ----------------------------------------------------------------------------------------------------------
# Naming: communication, point-to-point, matrix work
# ----------------------------------------------------------------------------------------------------------

# device kernels of collective libraries (NCCL, RCCL, MSCCL, HCCL) and collective names in any spelling
COMM_KERNEL_RE = re.compile(
    r"nccl|rccl|msccl|hccl|all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|sendrecv|"
    r"collective[-_]?permute|PtoP|broadcast_kernel", re.IGNORECASE)
# host-side communication ops and annotations (gloo:all_reduce, c10d::allreduce_, record_param_comms, ...)
COMM_OP_RE = re.compile(
    r"^(gloo|nccl|rccl|hccl|mpi|ucc|c10d|c10d_functional|_c10d_functional)\s*[:_]|record_param_comms|"
    r"^(all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|collective[-_]?permute|"
    r"send|recv|isend|irecv|broadcast|barrier)\b", re.IGNORECASE)
P2P_RE = re.compile(r"(^|[^a-z])(send|recv|isend|irecv|batch_isend_irecv|collective[-_]?permute)([^a-z]|$)",
                    re.IGNORECASE)
# kernels and ops that run on the matrix units (used when no shapes give the arithmetic intensity)
MATRIX_RE = re.compile(
    r"gemm|nvjet|cutlass|xmma|wgmma|hmma|cublas|Cijk_|matmul|\bmm\b|aten::(mm|bmm|addmm|baddbmm|linear)$|"
    r"conv|dot|einsum|sdpa|flash|fmha|attention|ynn", re.IGNORECASE)


class HookRole(str, Enum):
    """What a training framework's own hook or dispatch event is, by its identity (never by its time)."""

    COMMUNICATION = "communication"  # the framework issuing and waiting for its collectives
    HOST = "host"                    # the framework's Python around the operators (hooks, subclass dispatch)


# The hooks and dispatch layers of the data-parallel frameworks, as the profiler names them. Their *own* time
# (not that of the operators they call, which keep their own class) is what the entry says:
# * FSDP2 (torch.distributed.fsdp.fully_shard, _fsdp_param_group.py / _fsdp_state.py): the autograd node
#   ``RegisterPostBackwardFunctionBackward`` runs the post-backward hook, which issues the gradients'
#   reduce-scatter and waits for it (on gloo, synchronously); its record_functions ``FSDP::all_gather``,
#   ``FSDP::post_backward_reduce``, ``FSDP::post_backward_rs_wait`` and ``FSDP::backward_prefetch`` wrap
#   collectives and their waits; every other ``FSDP::`` record_function (pre/post forward and backward,
#   accumulate, reshard, copy-out, the root's callbacks) is the hook's own Python.
# * DTensor (torch.distributed.tensor): ``PythonSubclass`` is the profiler's event for a tensor subclass's
#   ``__torch_dispatch__`` (sharding propagation, redistribution planning): host overhead.
# * DeepSpeed ZeRO-3 (deepspeed/runtime/zero/parameter_offload.py): the autograd functions
#   ``PreBackwardFunctionForModule`` (gathers a module's partitioned parameters before its backward) and
#   ``PostBackwardFunctionModule`` (releases them) appear as ``...Backward`` nodes; ``PreBackwardFunction``
#   likewise. The gather waits on an all-gather: communication; the release is bookkeeping: host, as are the
#   functions' forward halves (installing the hooks) and ``LinearFunctionForZeroStage3`` (ZeRO-3's linear, whose
#   matrix products are its recorded children: its own time is Python).
#   ZeRO 1/2's gradient hooks run inside ``autograd::engine::evaluate_function: torch::autograd::AccumulateGrad``
#   (the reduction itself is a recorded c10d collective).
FRAMEWORK_HOOKS: tuple[tuple[re.Pattern, HookRole], ...] = (
    (re.compile(r"^RegisterPostBackwardFunctionBackward$"), HookRole.COMMUNICATION),
    (re.compile(r"^FSDP::(all_gather|post_backward_reduce|post_backward_rs_wait|backward_prefetch)\b"),
     HookRole.COMMUNICATION),
    (re.compile(r"^FSDP::"), HookRole.HOST),
    (re.compile(r"^PythonSubclass$"), HookRole.HOST),
    (re.compile(r"^PreBackwardFunction(ForModule)?Backward$"), HookRole.COMMUNICATION),
    (re.compile(r"^PostBackwardFunction(Module)?Backward$"), HookRole.HOST),
    (re.compile(r"^(Pre|Post)BackwardFunction(ForModule|Module)?$"), HookRole.HOST),
    (re.compile(r"^LinearFunctionForZeroStage3(Backward)?$"), HookRole.HOST),
)


@lru_cache(maxsize=65536)
def hook_role(name: str) -> HookRole | None:
    """The role of a framework's hook or dispatch event (``FRAMEWORK_HOOKS``), or None for any other name."""
    for pattern, role in FRAMEWORK_HOOKS:
        if pattern.search(name):
            return role
    return None


@lru_cache(maxsize=65536)
def is_comm_op(name: str) -> bool:
    return not name.startswith("aten::") and COMM_OP_RE.search(name) is not None


@lru_cache(maxsize=65536)
def is_comm_kernel(name: str) -> bool:
    return COMM_KERNEL_RE.search(name[:400]) is not None


@lru_cache(maxsize=65536)
def is_p2p(name: str) -> bool:
    return P2P_RE.search(name[:400]) is not None


@lru_cache(maxsize=65536)
def is_matrix(name: str) -> bool:
    return MATRIX_RE.search(name[:400]) is not None


@lru_cache(maxsize=65536)
def short_kernel_name(name: str) -> str:
    """'void ns::kernel<T...>(args)' -> 'ns::kernel<T...>' (at most 120 characters)."""
    n = name[5:] if name.startswith("void ") else name
    cut = n.find("(")
    if cut > 0:
        n = n[:cut]
    return n[:120]


# ----------------------------------------------------------------------------------------------------------
# Windows
# ----------------------------------------------------------------------------------------------------------


def trim_windows(windows: list[tuple[str, float, float]], notes: list[str]) -> list[tuple[str, float, float]]:
    """Sorted, de-duplicated step windows without a truncated last one.

    The profiler often stops inside the last step, leaving a stub of a window (a few microseconds); averaging
    it in would halve the step time. A last window shorter than a tenth of the median of the others goes.
    """
    seen: set[str] = set()
    unique = []
    for name, start, end in sorted(windows, key=lambda w: w[1]):
        if name in seen or end <= start:
            continue
        seen.add(name)
        unique.append((name, start, end))
    if len(unique) >= 2:
        median = float(np.median([e - s for _, s, e in unique[:-1]]))
        name, start, end = unique[-1]
        if end - start < 0.1 * median:
            notes.append(f"dropped {name}: {end - start:.0f} us against a median step of {median:.0f} us "
                         "(the profiler stopped inside it)")
            unique = unique[:-1]
    return unique


def windows_array(windows: list[tuple[str, float, float]]) -> np.ndarray:
    return np.array([[s, e] for _, s, e in windows], dtype=np.float64).reshape(-1, 2)


def self_times(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exclusive (self) time of nested intervals on one thread, and each one's parent index (-1 at top).

    Events on one thread nest like a call stack; a stack sweep in start order finds each one's parent, and the
    parent's self time is its duration minus its direct children's.
    """
    n = starts.size
    order = np.lexsort((-ends, starts))  # by start, the longer (outer) first on ties
    parent = np.full(n, -1, dtype=np.int64)
    child_time = np.zeros(n)
    stack: list[int] = []
    s_list = starts.tolist()
    e_list = ends.tolist()
    for i in order.tolist():
        s = s_list[i]
        while stack and e_list[stack[-1]] <= s:
            stack.pop()
        if stack:
            p = stack[-1]
            parent[i] = p
            child_time[p] += min(e_list[i], e_list[p]) - s
        stack.append(i)
    return np.maximum(ends - starts - child_time, 0.0), parent
