"""PyTorch profiler (Kineto) Chrome traces -> timelines.

GPU traces (CUDA or ROCm): the device timeline is the kernels, memcpys and memsets on all streams of the
device. Each one is tied back to the CPU operator that launched it (kernel --correlation--> runtime launch
--time containment on the launching thread--> innermost operator), which gives the operator's recorded
shapes and so its FLOPs and bytes. Containment is used rather than 'External id' because older Kineto
versions number kernels and operators independently.

CPU-only traces (gloo): there are no kernels; the CPU operators *are* the device work, on every thread, and
the collectives are the gloo/c10d operators (gloo runs them on its own threads). Nested operators count once:
an operator's own time is its duration less its children's.

A trace file is read streaming (``stream_kineto``): ijson's C parser hands over one event of ``traceEvents`` at
a time and only compact rows are kept (``_Rows``), so memory follows the number of operators and kernels, not
the size of the JSON; ``timelines_from_kineto`` gives the same timelines from a whole parsed document.
"""

from __future__ import annotations

import gzip
import zlib
from bisect import bisect_right
from collections import defaultdict
from contextlib import contextmanager
from itertools import islice
from pathlib import Path

import ijson
import numpy as np
from ijson.common import ObjectBuilder

from asap.errors import AsapError
from asap.profile.ops import comm_bytes, io_bytes, op_cost
from asap.profile.trace import (GZIP_MAGIC, HookRole, OpInstance, Timeline, hook_role, is_comm_kernel, is_comm_op, is_p2p,
                                event_format, self_times, short_kernel_name, trim_windows, well_formed,
                                windows_array)
from asap.profile.windows import Intervals

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "hip_runtime", "runtime"}
OP_CATS = {"cpu_op", "Operator"}
ANNOTATION_CATS = {"user_annotation", "User Annotation"}
STEP_PREFIX = "ProfilerStep#"


class _Thread:
    """One CPU thread's operators, sorted by start (outer first on ties), with each one's parent."""

    __slots__ = ("starts", "ends", "names", "args", "parent", "self_us", "start_list", "end_list")

    def __init__(self, rows: list[tuple[float, float, str, dict]]):
        rows.sort(key=lambda r: (r[0], -r[1]))
        self.starts = np.fromiter((r[0] for r in rows), dtype=np.float64, count=len(rows))
        self.ends = np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
        self.names = [r[2] for r in rows]
        self.args = [r[3] for r in rows]
        self.self_us, self.parent = self_times(self.starts, self.ends)
        self.start_list = [r[0] for r in rows]  # the rows' own float objects, not copies
        self.end_list = [r[1] for r in rows]

    def enclosing(self, t: float) -> int:
        """Index of the innermost operator running at time t on this thread, or -1."""
        i = bisect_right(self.start_list, t) - 1
        while i >= 0 and self.end_list[i] < t:
            i = int(self.parent[i])
        return i


# the args the cost model and the point-to-point test read (asap.profile.ops, _chain_is_p2p); the rest is dropped
KEPT_ARGS = ("Input Dims", "Input type", "Concrete Inputs", "In msg nelems", "Out msg nelems", "dtype",
             "Collective name")
_NO_ARGS: dict = {}
FORMAT_EVENTS = 5000  # events trace_format looks at
KINETO_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo")  # top-level keys only Kineto writes


class _Rows:
    """What the timelines need of each event, as compact rows: no event dicts are kept, repeated names and
    thread keys are shared, and an operator keeps only the args in KEPT_ARGS."""

    __slots__ = ("device", "threads", "launches", "steps", "timed", "_names", "_keys", "_shared")

    def __init__(self):
        self.device: list[tuple] = []  # pid, start, end, name, correlation, stream
        self.threads: dict[tuple, list] = defaultdict(list)  # (pid, tid) -> [(start, end, name, args)]
        self.launches: dict[int, tuple[tuple, float]] = {}
        self.steps: list[tuple[str, float, float]] = []
        self.timed = 0  # well-formed 'X' events seen
        self._names: dict[str, str] = {}
        self._keys: dict[tuple, tuple] = {}
        self._shared: dict[str, dict] = {}

    def _name(self, e: dict) -> str:
        name = str(e.get("name", ""))
        return self._names.setdefault(name, name)

    def _key(self, e: dict) -> tuple:
        key = (e.get("pid"), e.get("tid"))
        return self._keys.setdefault(key, key)

    def add(self, e) -> None:
        if not isinstance(e, dict) or e.get("ph") != "X":
            return
        self.timed += 1
        cat = e.get("cat")
        if cat in RUNTIME_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is not None:
                self.launches[corr] = (self._key(e), float(e.get("ts", 0.0)))
            return
        if cat not in DEVICE_CATS and cat not in OP_CATS and cat not in ANNOTATION_CATS:
            return
        try:
            start = float(e["ts"])
            end = start + float(e.get("dur") or 0.0)
        except (KeyError, TypeError, ValueError):
            return
        if cat in DEVICE_CATS:
            self.device.append((e.get("pid"), start, end, self._name(e), (e.get("args") or {}).get("correlation"),
                                e.get("tid")))
            return
        name = self._name(e)
        if name.startswith(STEP_PREFIX):
            self.steps.append((name, start, end))
        elif cat in OP_CATS or is_comm_op(name) or hook_role(name) is not None:
            self.threads[self._key(e)].append((start, end, name, self._args(e.get("args"))))

    def _args(self, args) -> dict:
        """The args in KEPT_ARGS, one shared dict for every call with the same ones (every step repeats its
        operators' shapes); nothing reads them but the cost model, which does not change them."""
        if not args:
            return _NO_ARGS
        kept = {k: args[k] for k in KEPT_ARGS if k in args}
        return self._shared.setdefault(repr(kept), kept) if kept else _NO_ARGS


def timelines_from_kineto(doc: dict, source: str) -> list[Timeline]:
    """One timeline per GPU with a real share of the trace's device work, or one CPU timeline, from a whole
    parsed document (the reference path; stream_kineto reads a file without holding it)."""
    rows = _Rows()
    for e in doc["traceEvents"]:
        rows.add(e)
    return _timelines(rows, doc, source)


def _timelines(rows: _Rows, meta: dict, source: str) -> list[Timeline]:
    """The timelines from the rows; ``meta`` holds the document's top-level keys other than traceEvents."""
    notes: list[str] = []
    windows = trim_windows(rows.steps, notes)
    rank = _rank(meta)
    label = f"rank {rank}" if rank is not None else source.rsplit("/", 1)[-1]
    if rows.device:
        out = _gpu_timelines(meta, source, rank, label, rows.device, rows.threads, rows.launches, windows, notes)
    else:
        out = [_cpu_timeline(source, rank, label, rows.threads, windows, notes)]
    for tl in out:
        tl.world_size = _world_size(meta)
    return out


# ----------------------------------------------------------------------------------------------------------
# Streaming a file: traceEvents read one event at a time (ijson), never the whole document in memory
# ----------------------------------------------------------------------------------------------------------

READ_CHUNK = 1 << 16  # ijson reads this much at a time: larger buffers are slower (cache), and hold more events
META_KEYS = ("distributedInfo", "deviceProperties")  # top-level keys the timelines read


class NotStreamed(Exception):
    """The file is valid for the whole-document reader only (JSON that yajl refuses, such as NaN)."""


def stream_kineto(path: Path) -> list[Timeline] | None:
    """The timelines of a Kineto trace file, read in one streaming pass over its events; None when it is not a
    trace this reader streams (a JAX trace, a format that the header and first events don't settle, JSON
    only the standard library parses): the caller then reads the whole document."""
    try:
        meta, prefix = _header(path)
        if prefix is None:
            return None
        if not _is_kineto(path, meta, prefix):
            return None
        rows = _Rows()
        with _json_stream(path) as f:
            for e in ijson.items(f, prefix, use_float=True, buf_size=READ_CHUNK):
                if well_formed(e):
                    rows.add(e)
    except NotStreamed:
        return None
    if not rows.timed:
        raise AsapError(str(path), "profiler trace has no timed ('ph': 'X') events")
    for key in META_KEYS:
        if key not in meta and (key != "deviceProperties" or rows.device):
            meta.update(_trailing_key(path, key))
    return _timelines(rows, meta, str(path))


@contextmanager
def _json_stream(path: Path):
    """The file's JSON bytes as a stream (gunzipped when it starts with the gzip magic); read errors, a cut
    gzip or JSON document become AsapErrors, other JSON that yajl refuses NotStreamed."""
    try:
        raw = open(path, "rb")
    except OSError as e:
        raise AsapError(str(path), f"cannot read ({e.strerror or e})") from None
    with raw:
        magic = raw.read(2)
        if not magic:
            raise AsapError(str(path), "empty file")
        raw.seek(0)
        gz = magic == GZIP_MAGIC
        try:
            yield gzip.GzipFile(fileobj=raw) if gz else raw
        except EOFError:
            raise AsapError(str(path), "truncated gzip file (the compressed stream ends early)") from None
        except (gzip.BadGzipFile, zlib.error) as e:
            raise AsapError(str(path), f"corrupt gzip file ({e})") from None
        except OSError as e:
            raise AsapError(str(path), f"corrupt gzip file ({e})" if gz else f"cannot read ({e.strerror or e})") \
                from None
        except ijson.JSONError as e:
            if "premature EOF" in str(e):
                raise AsapError(str(path), "not valid JSON (truncated: the document ends early)") from None
            raise NotStreamed(str(e)) from None


def _header(path: Path) -> tuple[dict, str | None]:
    """The top-level keys before traceEvents, and the prefix of the events for ijson ('traceEvents.item', or
    'item' for a bare array); None when there is no traceEvents list where the stream reaches it."""
    builders: dict[str, ObjectBuilder] = {}
    with _json_stream(path) as f:
        events = ijson.parse(f, use_float=True)
        for prefix, event, value in events:
            if prefix == "" and event == "start_array":
                return {}, "item"
            if prefix == "" and event == "map_key" and value == "traceEvents":
                _, event, _ = next(events, (None, None, None))
                meta = {k: b.value for k, b in builders.items()}
                return meta, "traceEvents.item" if event == "start_array" else None
            if prefix == "" and event == "map_key":
                builder = builders[value] = ObjectBuilder()
            elif prefix != "":
                builder.event(event, value)
    return {}, None


def _is_kineto(path: Path, meta: dict, prefix: str) -> bool:
    """trace_format's verdict, where the header or the first events already settle it as Kineto."""
    if any(k in meta for k in KINETO_KEYS):
        return True
    with _json_stream(path) as f:
        events = (e for e in ijson.items(f, prefix, use_float=True) if well_formed(e))
        for e in islice(events, FORMAT_EVENTS):
            verdict = event_format(e)
            if verdict is not None:
                return verdict == "kineto"
    return False


def _trailing_key(path: Path, key: str) -> dict:
    """A top-level key written after traceEvents: one more pass, in C, that builds nothing else."""
    with _json_stream(path) as f:
        found = list(islice(ijson.items(f, key, use_float=True, buf_size=READ_CHUNK), 1))
    return {key: found[0]} if found else {}


def _rank(doc: dict) -> int | None:
    info = doc.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"]
    return None


def _world_size(doc: dict) -> int | None:
    info = doc.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("world_size"), int):
        return info["world_size"]
    return None


def _device_properties(doc: dict, device: int) -> tuple[str | None, float | None]:
    props = doc.get("deviceProperties")
    if not isinstance(props, list):
        return None, None
    for p in props:
        if isinstance(p, dict) and p.get("id") == device:
            return p.get("name"), p.get("totalGlobalMem")
    first = next((p for p in props if isinstance(p, dict)), None)
    return (first.get("name"), first.get("totalGlobalMem")) if first else (None, None)


def _whole_trace_window(starts, ends, notes: list[str]) -> list[tuple[str, float, float]]:
    notes.append("no ProfilerStep#N markers: the whole trace is taken as one step window")
    return [("whole trace", float(np.min(starts)), float(np.max(ends)))]


# ----------------------------------------------------------------------------------------------------------
# GPU traces
# ----------------------------------------------------------------------------------------------------------


def _gpu_timelines(doc, source, rank, label, device_rows, thread_rows, launches, windows, notes) -> list[Timeline]:
    busy_by_device: dict = defaultdict(float)
    for pid, s, e, *_ in device_rows:
        busy_by_device[pid] += e - s
    busiest = max(busy_by_device.values())
    devices = sorted((d for d, t in busy_by_device.items() if t >= 0.1 * busiest), key=_device_order)
    if len(busy_by_device) > len(devices):
        notes.append(f"device activity on {len(busy_by_device)} devices; analysed: {devices} "
                     "(the others had under a tenth of the busiest one's)")
    threads = dict(_threads(thread_rows))
    out = []
    for device in devices:
        rows = [r for r in device_rows if r[0] == device]
        dev_notes = list(notes)
        dev_windows = windows or _whole_trace_window([r[1] for r in rows], [r[2] for r in rows], dev_notes)
        compute, comm, p2p, ops = _gpu_device(rows, threads, launches)
        name, memory = _device_properties(doc, device)
        dev_label = label if len(devices) == 1 else f"{label} gpu {device}"
        out.append(Timeline(
            label=dev_label, source=source, rank=rank, framework="pytorch", device_kind="gpu", device_name=name,
            device_memory_bytes=memory, windows_us=windows_array(dev_windows),
            window_names=[w[0] for w in dev_windows], windows_source="ProfilerStep" if windows else "whole_trace",
            compute=compute, comm=comm, p2p=p2p, ops=ops, notes=dev_notes))
    return out


def _device_order(pid) -> tuple:
    """Devices by number; a pid of another type (a corrupt trace mixes strings in) after them, by its text."""
    return (0, pid, "") if isinstance(pid, int) else (1, 0, str(pid))


def _threads(thread_rows: dict):
    """(key, _Thread) per thread with operators, in order, emptying ``thread_rows`` as it goes: each thread's
    rows are freed once its _Thread holds them, so the two do not peak together."""
    for key in list(thread_rows):
        rows = thread_rows.pop(key)
        if rows:
            yield key, _Thread(rows)


def _launcher(corr, threads, launches) -> tuple[_Thread | None, int]:
    hit = launches.get(corr) if corr is not None else None
    if hit is None:
        return None, -1
    thread = threads.get(hit[0])
    if thread is None:
        return None, -1
    return thread, thread.enclosing(hit[1])


def _chain_is_p2p(thread: _Thread, i: int) -> bool:
    """Point-to-point if the launching op, its collective name, or an op up to three levels above says so."""
    for _ in range(4):
        if i < 0:
            return False
        args = thread.args[i]
        if is_p2p(thread.names[i]) or is_p2p(str(args.get("Collective name", ""))):
            return True
        i = int(thread.parent[i])
    return False


def _gpu_device(rows, threads, launches) -> tuple[Intervals, Intervals, Intervals, list[OpInstance]]:
    """Compute/communication interval sets of one device and its operator calls with their device time."""
    starts = np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
    ends = np.fromiter((r[2] for r in rows), dtype=np.float64, count=len(rows))
    is_comm = np.zeros(len(rows), dtype=bool)
    is_pp = np.zeros(len(rows), dtype=bool)
    instances: dict[tuple, OpInstance] = {}
    for k, (_, s, e, name, corr, stream) in enumerate(rows):
        comm = is_comm_kernel(name)
        thread, i = _launcher(corr, threads, launches)
        if comm:
            is_comm[k] = True
            p2p = thread is not None and _chain_is_p2p(thread, i)
            is_pp[k] = p2p
            key: tuple = (id(thread), i, "comm")
        else:
            key = (id(thread), i) if thread is not None and i >= 0 else ("kernel", k)
        inst = instances.get(key)
        if inst is None:
            inst = _new_instance(name, s, thread, i, comm, bool(is_pp[k]))
            inst.lane = stream if isinstance(stream, int) else hash(stream)
            instances[key] = inst
        inst.time_us += e - s
        inst.start_us = min(inst.start_us, s)
    compute = Intervals.union_of(starts[~is_comm], ends[~is_comm])
    comm_set = Intervals.union_of(starts[is_comm], ends[is_comm])
    p2p_set = Intervals.union_of(starts[is_pp], ends[is_pp])
    return compute, comm_set, p2p_set, list(instances.values())


def _new_instance(kernel: str, start: float, thread: _Thread | None, i: int, comm: bool, p2p: bool) -> OpInstance:
    if comm:
        nbytes = comm_bytes(thread.args[i]) if thread is not None and i >= 0 else None
        return OpInstance(short_kernel_name(kernel), start, 0.0, None, nbytes, None, True, p2p, kernel)
    if thread is None or i < 0:
        return OpInstance(short_kernel_name(kernel), start, 0.0, kernel=kernel)
    flops, nbytes, precision = op_cost(thread.names[i], thread.args[i])
    return OpInstance(thread.names[i], start, 0.0, flops, nbytes, precision, False, False, kernel,
                      io_bytes(thread.names[i], thread.args[i]))


# ----------------------------------------------------------------------------------------------------------
# CPU-only traces
# ----------------------------------------------------------------------------------------------------------


def _cpu_timeline(source, rank, label, thread_rows, windows, notes) -> Timeline:
    """Operators on every thread are the work; gloo/c10d operators are the communication.

    Per thread, time inside a communication op is communication even when a compute op encloses it (a
    backward hook that waits on an all-reduce); across threads, compute on one and gloo's transfer on another
    overlap.
    """
    threads = [th for _, th in _threads(thread_rows)]
    compute_parts, comm_s, comm_e, p2p_s, p2p_e = [], [], [], [], []
    ops: list[OpInstance] = []
    all_s, all_e = [], []
    for lane, th in enumerate(threads):
        comm_mask = np.array([is_comm_op(n) for n in th.names], dtype=bool)
        hook_mask = np.array([hook_role(n) is HookRole.COMMUNICATION for n in th.names], dtype=bool)
        pp_mask = comm_mask & np.array([is_p2p(n) for n in th.names], dtype=bool)
        work = Intervals.union_of(th.starts[~(comm_mask | hook_mask)], th.ends[~(comm_mask | hook_mask)])
        talk = Intervals.union_of(th.starts[comm_mask], th.ends[comm_mask]) | _hooks_own_time(th, hook_mask)
        compute_parts.append(work.minus(talk))
        comm_s.append(talk.starts)
        comm_e.append(talk.ends)
        p2p_s.append(th.starts[pp_mask])
        p2p_e.append(th.ends[pp_mask])
        all_s.append(th.starts)
        all_e.append(th.ends)
        ops.extend(_cpu_instances(th, comm_mask | hook_mask, pp_mask, lane))
    compute = Intervals.empty()
    for part in compute_parts:
        compute = compute | part
    comm = Intervals.union_of(_cat(comm_s), _cat(comm_e))
    p2p = Intervals.union_of(_cat(p2p_s), _cat(p2p_e))
    if not windows:
        if not threads:
            notes.append("no operators in the trace")
            windows = [("whole trace", 0.0, 0.0)]
        else:
            windows = _whole_trace_window(_cat(all_s), _cat(all_e), notes)
        source_kind = "whole_trace"
    else:
        source_kind = "ProfilerStep"
    return Timeline(label=label, source=source, rank=rank, framework="pytorch", device_kind="cpu",
                    device_name=None, device_memory_bytes=None, windows_us=windows_array(windows),
                    window_names=[w[0] for w in windows], windows_source=source_kind, compute=compute, comm=comm,
                    p2p=p2p, ops=ops, notes=notes)


def _hooks_own_time(th: _Thread, hook_mask: np.ndarray) -> Intervals:
    """The time inside a framework's communication hooks (``asap.profile.trace.FRAMEWORK_HOOKS``) that none of
    the operators it calls account for: the collective's issue and wait. Its children keep their own class
    (the gradient division, the copies into the flat buffer)."""
    if not hook_mask.any():
        return Intervals.empty()
    hooks = np.flatnonzero(hook_mask)
    parent = th.parent
    kids = np.array([p >= 0 and hook_mask[p] for p in parent.tolist()], dtype=bool) & ~hook_mask
    return Intervals.union_of(th.starts[hooks], th.ends[hooks]).minus(
        Intervals.union_of(th.starts[kids], th.ends[kids]))


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0)


def _cpu_instances(th: _Thread, comm_mask: np.ndarray, pp_mask: np.ndarray, lane: int = 0) -> list[OpInstance]:
    """One instance per operator with its self time and its self work.

    Like self time, self work is the op's FLOPs and bytes less those of its direct children: a composite op
    (matmul, linear, conv2d) keeps nothing beyond the mm/addmm/convolution it calls, and addmm keeps its
    product but not the bias copy it delegates.
    """
    costs = [op_cost(n, a) if not c else (None, comm_bytes(a), None)
             for n, a, c in zip(th.names, th.args, comm_mask.tolist(), strict=True)]
    child_flops = np.zeros(len(costs))
    child_bytes = np.zeros(len(costs))
    for i, p in enumerate(th.parent.tolist()):
        if p >= 0 and not comm_mask[i]:
            child_flops[p] += costs[i][0] or 0.0
            child_bytes[p] += costs[i][1] or 0.0
    ios, leaves = _io_leaves(th)
    out = []
    for i, name in enumerate(th.names):
        f, b, prec = costs[i]
        if not comm_mask[i]:
            f = max(f - child_flops[i], 0.0) if f is not None else None
            b = max(b - child_bytes[i], 0.0) if b is not None else None
        out.append(OpInstance(name, th.start_list[i], float(th.self_us[i]), f, b, prec, bool(comm_mask[i]),
                              bool(pp_mask[i]), io=ios[i], lane=lane, leaf=leaves[i]))
    return out


def _io_leaves(th: _Thread) -> tuple[list, list[bool]]:
    """Each op's tensor I/O (ops.io_bytes) and whether it does memory traffic of its own: it moves bytes, and
    more than all the ops it calls together (a composite such as rms_norm, linear or repeat_interleave hands
    its work to the ops below it, so only those count)."""
    ios = [io_bytes(n, a) for n, a in zip(th.names, th.args, strict=True)]
    moved = [io.in_bytes + io.out_bytes if io is not None else 0.0 for io in ios]
    below = [0.0] * len(ios)
    parent = th.parent.tolist()
    for i in range(len(ios) - 1, -1, -1):  # a parent sorts before its children
        if parent[i] >= 0:
            below[parent[i]] += below[i] + moved[i]
    return ios, [moved[i] > 0 and moved[i] > below[i] for i in range(len(ios))]
