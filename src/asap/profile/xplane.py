"""XProf's ``.xplane.pb`` (what ``jax.profiler.trace(dir)`` writes, as plugins/profile/<run>/<host>.xplane.pb;
TPU users' profiles) -> the same timelines as the perfetto export of the same run.

The file is one serialized ``XSpace`` protobuf (schema: tsl/profiler/protobuf/xplane.proto in XLA):

    XSpace         planes=1 (XPlane), hostnames=4
    XPlane         id=1, name=2, lines=3 (XLine), event_metadata=4 (map<int64, XEventMetadata>),
                   stat_metadata=5 (map<int64, XStatMetadata>), stats=6 (XStat)
    XLine          id=1, name=2, timestamp_ns=3, events=4 (XEvent), duration_ps=9, display_name=11
    XEvent         metadata_id=1, offset_ps=2, duration_ps=3, stats=4 (XStat)
    XStat          metadata_id=1, double=2, uint64=3, int64=4, str=5, bytes=6, ref=7 (a stat metadata id
                   whose name is the value)
    XEventMetadata id=1, name=2, display_name=4;  XStatMetadata id=1, name=2

It is decoded here with a small reader of the protobuf wire format (varints and length-delimited fields,
https://protobuf.dev/programming-guides/encoding/), not with a library: neither jax nor the ``xprof`` package
ships a Python module of this schema (xprof 2.24 converts XSpace only inside a 40 MB C++ extension, and with
its dependencies installs 355 MB in 53 s here), and ``protobuf`` is not a dependency of asap.

Every plane becomes a process (its name: ``/host:CPU``, ``/device:TPU:0`` ...), every line a thread, every
event an ``X`` event with its stats as args (``hlo_op``, ``step_num``, ``flops``, ``bytes_accessed`` ...): the
document ``asap.profile.jax_trace`` reads from a perfetto export, so both give the same step windows and ops.
A device plane's own string stats (the chip's type, e.g. "TPU v5p") are appended to its device name, which is
how ``asap.profile.devices.infer_accelerator`` picks the generation's roofline.
"""

from __future__ import annotations

import struct
from pathlib import Path

from asap.errors import AsapError

WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32 = 0, 1, 2, 5


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def fields(buf: bytes):
    """(field number, wire type, value) of each field of one message: ints for varint/fixed, bytes for LEN."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        v: int | bytes
        if wt == WIRE_VARINT:
            v, i = _varint(buf, i)
        elif wt == WIRE_I64:
            v, i = buf[i:i + 8], i + 8
        elif wt == WIRE_LEN:
            size, i = _varint(buf, i)
            v, i = buf[i:i + size], i + size
        elif wt == WIRE_I32:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        if i > n:
            raise ValueError("truncated field")
        yield num, wt, v


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _metadata(buf: bytes) -> tuple[int, str]:
    """A map entry (key=1, value=2) of event or stat metadata -> (id, name)."""
    key, name = 0, ""
    for num, _, v in fields(buf):
        if num == 1:
            key = v
        elif num == 2:
            name = next((x.decode(errors="replace") for n, _, x in fields(v) if n == 2), "")
    return key, name


def _stat(buf: bytes, stat_names: dict[int, str]) -> tuple[str, object]:
    mid, value = 0, None
    for num, _wire_type, v in fields(buf):
        if num == 1:
            mid = v
        elif num == 2:
            value = struct.unpack("<d", v)[0]
        elif num in (3, 6):
            value = v if num == 3 else v.hex()
        elif num == 4:
            value = _signed(v)
        elif num == 5:
            value = v.decode(errors="replace")
        elif num == 7:
            value = stat_names.get(v, str(v))
    return stat_names.get(mid, str(mid)), value


def _event(buf: bytes, line_ns: int, names: dict[int, str], stat_names: dict[int, str], pid: int, tid: int) -> dict:
    mid = offset_ps = duration_ps = 0
    args: dict = {}
    for num, _, v in fields(buf):
        if num == 1:
            mid = v
        elif num == 2:
            offset_ps = _signed(v)
        elif num == 3:
            duration_ps = v
        elif num == 4:
            k, val = _stat(v, stat_names)
            args[k] = val
    ts_us = line_ns / 1e3 + offset_ps / 1e6  # ns and ps -> the microseconds of Chrome traces
    return {"ph": "X", "pid": pid, "tid": tid, "name": names.get(mid, str(mid)), "ts": ts_us,
            "dur": duration_ps / 1e6, "args": args}


def _line(buf: bytes, names, stat_names, pid: int, tid: int) -> tuple[str, list[dict]]:
    name, display, ts_ns, events = "", "", 0, []
    for num, _, v in fields(buf):
        if num == 2:
            name = v.decode(errors="replace")
        elif num == 11:
            display = v.decode(errors="replace")
        elif num == 3:
            ts_ns = _signed(v)
        elif num == 4:
            events.append(v)
    return display or name, [_event(e, ts_ns, names, stat_names, pid, tid) for e in events]


def plane_events(buf: bytes, pid: int) -> tuple[str, dict, list[dict]]:
    """One XPlane -> (its name, its own stats, Chrome-trace events: thread names and X events)."""
    name, lines, plane_stats = "", [], []
    names: dict[int, str] = {}
    stat_names: dict[int, str] = {}
    for num, _, v in fields(buf):
        if num == 2:
            name = v.decode(errors="replace")
        elif num == 3:
            lines.append(v)
        elif num == 4:
            k, n = _metadata(v)
            names[k] = n
        elif num == 5:
            k, n = _metadata(v)
            stat_names[k] = n
        elif num == 6:
            plane_stats.append(v)
    stats = dict(_stat(s, stat_names) for s in plane_stats)
    out = [{"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}]
    for tid, raw in enumerate(lines):
        line_name, evs = _line(raw, names, stat_names, pid, tid)
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": line_name}})
        out.extend(evs)
    return name, stats, out


def load_xspace(path: Path) -> tuple[dict, dict[str, dict]]:
    """The Chrome-trace document of an ``.xplane.pb`` and each plane's own stats, by plane name."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise AsapError(str(path), f"cannot read ({e.strerror or e})") from None
    events: list[dict] = []
    stats: dict[str, dict] = {}
    try:
        planes = [v for num, wt, v in fields(raw) if num == 1 and wt == WIRE_LEN]
        for pid, plane in enumerate(planes):
            name, plane_stats, evs = plane_events(plane, pid)
            stats[name] = plane_stats
            events.extend(evs)
    except (ValueError, IndexError, struct.error) as e:
        raise AsapError(str(path), f"not an XProf XSpace protobuf ({e})") from None
    if not any(e["ph"] == "X" for e in events):
        raise AsapError(str(path), "XSpace holds no timed events")
    return {"traceEvents": events}, stats


def device_description(plane_name: str, plane_stats: dict) -> str:
    """The device name with its plane's string stats (chip type, vendor): what the roofline is chosen by."""
    extra = [str(v) for v in plane_stats.values() if isinstance(v, str) and v and len(v) < 80]
    return f"{plane_name} ({', '.join(extra)})" if extra else plane_name


def timelines_from_xplane(path: Path):
    """The timelines of an ``.xplane.pb``, as ``asap.profile.jax_trace`` makes them from a perfetto export."""
    from asap.profile.jax_trace import timelines_from_jax

    doc, stats = load_xspace(path)
    timelines = timelines_from_jax(doc, str(path))
    for tl in timelines:
        if tl.device_name in stats:
            tl.device_name = device_description(tl.device_name, stats[tl.device_name])
    return timelines
