"""Interval unions, differences and per-window coverage against a brute-force count on a fine grid."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from asap.profile.trace import self_times
from asap.profile.windows import Intervals, window_figures, window_index

spans = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40)), max_size=30)


def _grid(intervals) -> np.ndarray:
    """Coverage of each unit cell [t, t+1) for integer intervals."""
    g = np.zeros(260, dtype=bool)
    for s, d in intervals:
        g[s:s + d] = True
    return g


def _set(intervals) -> Intervals:
    return Intervals.union_of([s for s, _ in intervals], [s + d for s, d in intervals])


@settings(max_examples=200, deadline=None)
@given(spans, spans, st.integers(0, 250), st.integers(0, 60))
def test_set_algebra_matches_brute_force(a, b, lo, width):
    A, B = _set(a), _set(b)
    ga, gb = _grid(a), _grid(b)
    hi = lo + width
    win = np.array([[lo, hi]])
    assert A.total_us == ga.sum()
    assert A.lengths_in(win)[0] == ga[lo:hi].sum()
    assert (A | B).lengths_in(win)[0] == (ga | gb)[lo:hi].sum()
    assert A.minus(B).lengths_in(win)[0] == (ga & ~gb)[lo:hi].sum()
    assert A.intersect(B).lengths_in(win)[0] == (ga & gb)[lo:hi].sum()
    assert np.all(A.starts[1:] > A.ends[:-1])  # disjoint, sorted, not touching


@settings(max_examples=100, deadline=None)
@given(spans, spans)
def test_window_figures_add_up(comp, comm):
    C, M = _set(comp), _set(comm)
    windows = np.array([[0, 60], [60, 130], [130, 260]], dtype=float)
    f = window_figures(windows, C, M, Intervals.empty())
    gc, gm = _grid(comp), _grid(comm)
    for i, (lo, hi) in enumerate(windows.astype(int)):
        assert abs(f.busy_s[i] * 1e6 - (gc | gm)[lo:hi].sum()) < 1e-6
        assert abs(f.compute_s[i] + f.exposed_communication_s[i] + f.idle_s[i] - f.step_time_s[i]) < 1e-12
        assert abs(f.overlap_s[i] * 1e6 - (gc & gm)[lo:hi].sum()) < 1e-6


def test_window_index():
    w = np.array([[0.0, 10.0], [10.0, 20.0], [30.0, 40.0]])
    assert window_index(np.array([-1, 0, 9.9, 10, 25, 39, 40]), w).tolist() == [-1, 0, 0, 1, -1, 2, -1]


def test_self_time_of_nested_calls():
    # outer [0, 10) holds [1, 4) and [5, 9); [5, 9) holds [6, 7)
    s = np.array([0.0, 1.0, 5.0, 6.0])
    e = np.array([10.0, 4.0, 9.0, 7.0])
    own, parent = self_times(s, e)
    assert own.tolist() == [3.0, 3.0, 3.0, 1.0]
    assert parent.tolist() == [-1, 0, 0, 2]
