"""Interval sets on a timeline, and the per-step figures built from them.

A profiler timeline is a heap of overlapping intervals (kernels on several streams, nested CPU ops on several
threads). Time is only counted once however many things run at once, so every figure here comes from the
*union* of intervals, clipped to a step window, never from summed durations. numpy does the work so that a
trace with millions of events costs milliseconds here.

Times are microseconds (the Chrome trace unit) inside this module; the figures leave it in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

US = 1e-6  # seconds per microsecond


@dataclass(frozen=True)
class Intervals:
    """Disjoint, sorted, non-touching [start, end) intervals in microseconds."""

    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def empty(cls) -> "Intervals":
        return cls(np.zeros(0), np.zeros(0))

    @classmethod
    def union_of(cls, starts, ends) -> "Intervals":
        """The union of possibly overlapping intervals: sort by start, merge while the next one starts before
        the running maximum of the ends seen so far."""
        s = np.asarray(starts, dtype=np.float64)
        e = np.asarray(ends, dtype=np.float64)
        keep = e > s
        s, e = s[keep], e[keep]
        if s.size == 0:
            return cls.empty()
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        run_max = np.maximum.accumulate(e)
        new_segment = np.empty(s.size, dtype=bool)
        new_segment[0] = True
        new_segment[1:] = s[1:] > run_max[:-1]
        first = np.flatnonzero(new_segment)
        last = np.append(first[1:], s.size) - 1
        return cls(s[first], run_max[last])

    def __len__(self) -> int:
        return int(self.starts.size)

    @property
    def total_us(self) -> float:
        return float(np.sum(self.ends - self.starts))

    def __or__(self, other: "Intervals") -> "Intervals":
        return Intervals.union_of(np.concatenate([self.starts, other.starts]), np.concatenate([self.ends, other.ends]))

    def minus(self, other: "Intervals") -> "Intervals":
        """Time covered by self and not by other."""
        return _combine(self, other, lambda a, b: a & ~b)

    def intersect(self, other: "Intervals") -> "Intervals":
        return _combine(self, other, lambda a, b: a & b)

    def lengths_in(self, windows: np.ndarray) -> np.ndarray:
        """Covered time inside each window; windows is an (n, 2) array of [start, end] in microseconds.

        A prefix sum of segment lengths gives the covered time between any two segment indices; only the two
        segments that straddle a window edge need clipping.
        """
        w = np.asarray(windows, dtype=np.float64).reshape(-1, 2)
        if self.starts.size == 0 or w.size == 0:
            return np.zeros(len(w))
        lo, hi = w[:, 0], w[:, 1]
        prefix = np.concatenate([[0.0], np.cumsum(self.ends - self.starts)])
        first = np.searchsorted(self.ends, lo, side="right")  # first segment ending after lo
        stop = np.searchsorted(self.starts, hi, side="left")  # segments starting before hi are < stop
        total = prefix[stop] - prefix[np.minimum(first, stop)]
        has = stop > first
        fi = np.minimum(first, self.starts.size - 1)
        li = np.maximum(stop - 1, 0)
        head = np.where(has, np.maximum(0.0, lo - self.starts[fi]), 0.0)
        tail = np.where(has, np.maximum(0.0, self.ends[li] - hi), 0.0)
        return np.maximum(total - head - tail, 0.0)


def _combine(a: Intervals, b: Intervals, keep) -> Intervals:
    """Boolean combination of two interval sets by a sweep over their boundaries."""
    if a.starts.size == 0 and b.starts.size == 0:
        return Intervals.empty()
    points = np.concatenate([a.starts, a.ends, b.starts, b.ends])
    na, nb = a.starts.size, b.starts.size
    da = np.concatenate([np.ones(na), -np.ones(na), np.zeros(2 * nb)])
    db = np.concatenate([np.zeros(2 * na), np.ones(nb), -np.ones(nb)])
    order = np.argsort(points, kind="stable")
    points = points[order]
    in_a = np.cumsum(da[order]) > 0
    in_b = np.cumsum(db[order]) > 0
    kept = keep(in_a[:-1], in_b[:-1]) & (points[1:] > points[:-1])
    return Intervals.union_of(points[:-1][kept], points[1:][kept])


@dataclass(frozen=True)
class WindowFigures:
    """What the device did in each step window (arrays over windows, seconds)."""

    step_time_s: np.ndarray
    busy_s: np.ndarray
    compute_s: np.ndarray
    communication_s: np.ndarray
    overlap_s: np.ndarray
    exposed_communication_s: np.ndarray
    exposed_p2p_s: np.ndarray
    idle_s: np.ndarray


def window_figures(windows_us: np.ndarray, compute: Intervals, comm: Intervals, p2p: Intervals) -> WindowFigures:
    """Per-window step time, busy, compute, communication, overlap, exposed communication and idle.

    busy = |compute ∪ comm|; overlap = |compute ∩ comm| = compute + comm - busy;
    exposed communication = comm - overlap = busy - compute; idle = step - busy.
    exposed p2p = |p2p - compute| (point-to-point time no compute hides: pipeline waits).
    """
    w = np.asarray(windows_us, dtype=np.float64).reshape(-1, 2)
    step = (w[:, 1] - w[:, 0]) * US
    busy = (compute | comm).lengths_in(w) * US
    comp = compute.lengths_in(w) * US
    com = comm.lengths_in(w) * US
    overlap = np.maximum(comp + com - busy, 0.0)
    exposed = np.maximum(busy - comp, 0.0)
    exposed_p2p = p2p.minus(compute).lengths_in(w) * US if len(p2p) else np.zeros(len(w))
    idle = np.maximum(step - busy, 0.0)
    return WindowFigures(step, busy, comp, com, overlap, exposed, np.minimum(exposed_p2p, exposed), idle)


def window_index(times_us: np.ndarray, windows_us: np.ndarray) -> np.ndarray:
    """Index of the window holding each time, or -1 (windows sorted and disjoint)."""
    t = np.asarray(times_us, dtype=np.float64)
    w = np.asarray(windows_us, dtype=np.float64).reshape(-1, 2)
    if w.size == 0:
        return np.full(t.shape, -1, dtype=np.int64)
    i = np.searchsorted(w[:, 0], t, side="right") - 1
    ok = (i >= 0) & (t < w[np.maximum(i, 0), 1])
    return np.where(ok, i, -1)
