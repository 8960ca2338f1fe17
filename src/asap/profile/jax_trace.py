"""JAX profiler traces (``jax.profiler.start_trace(..., create_perfetto_trace=True)``) -> timelines.

The trace has a ``/host:CPU`` process (Python, the runtime, and on the CPU backend the XLA ops themselves,
each tagged ``hlo_op`` and ``device_ordinal``) and one ``/device:GPU:N`` / ``/device:TPU:N`` process per
accelerator, whose stream (GPU) or 'XLA Ops' (TPU) threads hold the device work.

Steps are ``jax.profiler.StepTraceAnnotation(name, step_num=i)`` spans (or ``ProfilerStep#N`` ones).

Accelerator devices each get a timeline. XLA:CPU's devices (``--xla_force_host_platform_device_count``)
have no process or line of their own: all run on the host's thread pool (a thread serves whichever device's
thunk comes next), and each op carries the device it ran for as its ``device_ordinal`` stat (a string in the
perfetto export, an int in the ``.xplane.pb``). So a CPU trace gives one timeline per device ordinal, the
way a Kineto job gives one per rank: a device's step is its own compute, its own collectives and its own
idle. (The union over all devices would be the host's cores: while one device waits in an all-reduce for the
others, their compute would hide its wait, and a communication-bound mesh would read as busy.) The devices
share the cores, so one device's compute slows the others; that shows, as it does for a slow GPU, as the
others' wait inside their collectives, and, where no collective follows, as idle before a device's first op
and after its last while the others hold the cores.

JAX traces carry no operand shapes (TPU traces may carry ``flops``/``bytes_accessed``, used when present), so
an op's bound otherwise comes from its name (dot/gemm/convolution -> compute, else memory).
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from asap.profile.hlo import costs_beside
from asap.profile.trace import (OpInstance, Timeline, is_comm_kernel, is_p2p, self_times, short_kernel_name,
                                trim_windows, windows_array)
from asap.profile.windows import Intervals

# derived lines of device processes that repeat the ops at a coarser grain (they would make a device look
# busy for a whole module or step)
_DERIVED_LINES = re.compile(r"^(Steps|XLA Modules|XLA TraceMe|TensorFlow|Framework|Source code|Launch Stats|"
                            r"Host Offload|SparseCore|Async XLA Ops)", re.IGNORECASE)


def timelines_from_jax(doc: dict, source: str) -> list[Timeline]:
    process_names: dict = {}
    thread_names: dict = {}
    xs: list[dict] = []
    for e in doc["traceEvents"]:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "X":
            xs.append(e)
        elif ph == "M":
            args = e.get("args") or {}
            if e.get("name") == "process_name":
                process_names[e.get("pid")] = str(args.get("name", ""))
            elif e.get("name") == "thread_name":
                thread_names[(e.get("pid"), e.get("tid"))] = str(args.get("name", ""))
    notes: list[str] = []
    windows = trim_windows(_steps(xs, process_names), notes)
    device_pids = sorted(p for p, n in process_names.items() if n.startswith("/device:"))
    device_events: dict = defaultdict(list)
    for e in xs:
        if e.get("pid") in device_pids:
            device_events[e.get("pid")].append(e)
    device_pids = [p for p in device_pids if device_events[p]]
    costs = costs_beside(source)
    if device_pids:
        return [_device_timeline(source, pid, process_names[pid], _device_ops(device_events[pid], pid, thread_names),
                                 windows, list(notes), len(device_pids), costs) for pid in device_pids]
    host_ops = [e for e in xs if "hlo_op" in (e.get("args") or {})]
    by_ordinal = _by_ordinal(host_ops)
    if len(by_ordinal) < 2:
        return [_device_timeline(source, None, "/host:CPU", host_ops, windows, notes, 1, costs)]
    untagged = len(host_ops) - sum(len(v) for v in by_ordinal.values())
    notes.append(f"XLA:CPU ran {len(by_ordinal)} devices on the host's cores: one timeline per device (its ops' "
                 "device_ordinal); they share the cores" +
                 (f"; {untagged} ops with no device_ordinal left out" if untagged else ""))
    timelines = [_device_timeline(source, None, "/host:CPU", evs, windows, list(notes), len(by_ordinal), costs,
                                  device_id=ordinal) for ordinal, evs in by_ordinal.items()]
    for tl in timelines:
        tl.shared_host = source  # one process's cores run them all (diagnose: contended idle)
    return timelines


def _by_ordinal(host_ops: list[dict]) -> dict[int, list[dict]]:
    """The host's XLA ops by the device they ran for (integer ``device_ordinal``), in device order."""
    out: dict[int, list[dict]] = defaultdict(list)
    for e in host_ops:
        try:
            out[int(str((e.get("args") or {}).get("device_ordinal")))].append(e)
        except ValueError:
            continue
    return dict(sorted(out.items()))


def _steps(xs: list[dict], process_names: dict) -> list[tuple[str, float, float]]:
    out = []
    for e in xs:
        args = e.get("args") or {}
        name = str(e.get("name", ""))
        if "step_num" in args and not process_names.get(e.get("pid"), "").startswith("/device:"):
            out.append((f"{name}#{args['step_num']}", float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
        elif name.startswith("ProfilerStep#"):
            out.append((name, float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    return out


def _device_ops(events: list[dict], pid, thread_names: dict) -> list[dict]:
    """The op-level events of one device: its 'XLA Ops' line when it has one (TPU), else its streams."""
    by_line: dict = defaultdict(list)
    for e in events:
        by_line[thread_names.get((pid, e.get("tid")), "")].append(e)
    ops_lines = [n for n in by_line if n.lower().startswith("xla ops")]
    if ops_lines:
        return [e for n in ops_lines for e in by_line[n]]
    return [e for n, evs in by_line.items() if not _DERIVED_LINES.match(n) for e in evs]


def _op_name(e: dict) -> str:
    return str(e.get("name", ""))


def _device_timeline(source, pid, process_name, events, windows, notes, n_devices, hlo_costs=None,
                     device_id: int | None = None) -> Timeline:
    """One device's timeline: an accelerator's process (``pid``), or one XLA:CPU device of the host's ops
    (``device_id``, its ordinal), or the host's ops as one device (neither)."""
    kind = "tpu" if "TPU" in process_name else "gpu" if "GPU" in process_name else "cpu"
    starts = np.array([float(e["ts"]) for e in events], dtype=np.float64)
    ends = starts + np.array([float(e.get("dur", 0.0) or 0.0) for e in events], dtype=np.float64)
    names = [_op_name(e) for e in events]
    hlo = [str((e.get("args") or {}).get("hlo_op", "")) for e in events]
    comm = np.array([is_comm_kernel(n) or is_comm_kernel(h) for n, h in zip(names, hlo, strict=True)], dtype=bool)
    pp = comm & np.array([is_p2p(n) or is_p2p(h) for n, h in zip(names, hlo, strict=True)], dtype=bool)
    compute = Intervals.union_of(starts[~comm], ends[~comm])
    comm_set = Intervals.union_of(starts[comm], ends[comm])
    p2p = Intervals.union_of(starts[pp], ends[pp])
    ops = _instances(events, names, starts, ends, comm, pp, hlo_costs)
    source_kind = "StepTraceAnnotation"
    if not windows:
        if len(events):
            notes.append("no step markers (StepTraceAnnotation / ProfilerStep#N): the whole trace is one window")
            windows = [("whole trace", float(starts.min()), float(ends.max()))]
        else:
            notes.append("no XLA ops in the trace")
            windows = [("whole trace", 0.0, 0.0)]
        source_kind = "whole_trace"
    elif windows[0][0].startswith("ProfilerStep#"):
        source_kind = "ProfilerStep"
    base = source.rsplit("/", 1)[-1]
    rank: int | None
    if device_id is not None:  # an XLA:CPU device: the host process is every device's
        rank, label = device_id, f"{base} {process_name} device {device_id}"
    else:
        tail = process_name.rsplit(":", 1)[-1] if pid is not None else ""
        rank = int(tail) if tail.isdigit() else None
        label = base if n_devices == 1 else f"{base} {process_name}"
    return Timeline(label=label, source=source, rank=rank,
                    framework="jax", device_kind=kind, device_name=process_name, device_memory_bytes=None,
                    windows_us=windows_array(windows), window_names=[w[0] for w in windows],
                    windows_source=source_kind, compute=compute, comm=comm_set, p2p=p2p, ops=ops, notes=notes)


def _instances(events, names, starts, ends, comm, pp, hlo_costs=None) -> list[OpInstance]:
    """Ops with their self time per thread (a while loop's body ops are not counted twice), and FLOPs and bytes
    from the event's stats or else from the compiled module's HLO (``hlo_costs``: {module: {op: (FLOPs, bytes)}})."""
    hlo_costs = hlo_costs or {}
    by_thread: dict = defaultdict(list)
    for k, e in enumerate(events):
        by_thread[(e.get("pid"), e.get("tid"))].append(k)
    self_us = np.zeros(len(events))
    for idx in by_thread.values():
        ix = np.array(idx)
        self_us[ix] = self_times(starts[ix], ends[ix])[0]
    out = []
    for k, e in enumerate(events):
        args = e.get("args") or {}
        flops = _number(args.get("flops", args.get("model_flops")))
        nbytes = _number(args.get("bytes_accessed"))
        if flops is None and nbytes is None:
            flops, nbytes = hlo_costs.get(str(args.get("hlo_module", "")), {}).get(str(args.get("hlo_op", "")),
                                                                                 (None, None))
        out.append(OpInstance(short_kernel_name(names[k]), float(starts[k]), float(self_us[k]), flops, nbytes, None,
                              bool(comm[k]), bool(pp[k]), names[k]))
    return out


def _number(v) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if x >= 0 else None
