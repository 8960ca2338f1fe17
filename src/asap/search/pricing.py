"""The space priced chunk by chunk for ``asap plan`` (``search.planner``): memory first, then the step times of
the rows that fit and could still be shown (``search.prune``), chunks side by side; what is kept of them
(``Kept``: the fastest rows, the rows a layer split may improve most, the Pareto front of step time against
peak memory) is all the result needs, whatever the space's size."""

from __future__ import annotations

import collections
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, cast

import numpy as np

from asap.cost.batch import StrategyBatch, expand
from asap.cost.estimate import UNIT_KEYS, estimate_batch
from asap.cost.device_memory import MemoryBreakdown, fits_memory, memory, stack_device_figures, usable_hbm_gb
from asap.cost.units import DeviceFigures, UnitTimes, unit_times, with_times
from asap.errors import AsapError
from asap.search.prune import step_lower_bound_s, worth_pricing
from asap.search.space import Space
from asap.spec.job import Job

CHUNK = 131072
# chunks priced side by side: one per core, at most two (a chunk's temporaries are tens of MB each)
PRICING_THREADS_MAX = 2


def pricing_threads() -> int:
    """Threads that price chunks at once: the cores this process may use, at most ``PRICING_THREADS_MAX``."""
    return max(1, min(PRICING_THREADS_MAX, len(os.sched_getaffinity(0))))


def pareto_front(step_s: np.ndarray, mem_gb: np.ndarray, by_step: np.ndarray | None = None) -> np.ndarray:
    """Indices of the configurations no other beats on both step time and peak memory, fastest first.
    ``by_step``: the indices already sorted by step time (stable), when the caller has them."""
    order = np.argsort(step_s, kind="stable") if by_step is None else by_step
    mem = mem_gb[order]
    prev = np.concatenate(([np.inf], np.minimum.accumulate(mem)[:-1]))
    front = order[mem < prev]
    # equal step times: only the one with the least memory is on the front
    same_step_next = np.concatenate((step_s[front][1:] == step_s[front][:-1], [False]))
    return front[~same_step_next]


class Deadline:
    """The search's time budget from its start (``limit_s`` None: none); ``notes`` say what it cut short."""

    def __init__(self, t0: float, limit_s: float | None):
        if limit_s is not None and not (limit_s > 0 and math.isfinite(limit_s)):
            raise AsapError("time-limit", f"must be a positive number of seconds, got {limit_s!r}")
        self.t0, self.limit_s = t0, limit_s
        self.notes: list[str] = []

    def passed(self) -> bool:
        return self.limit_s is not None and time.perf_counter() - self.t0 > self.limit_s


# rows (not shapes: a shape's slower, leaner variant may take a split its fastest one cannot fit) kept by their
# split bound, per candidate shown
BOUND_ROWS = 4
BOUND_PER_SHAPE = 2  # of which at most this many of one layout (its variants would crowd out the others)
# the split pool's size does not shrink with --top: #1 is searched over the same rows whatever the rows shown
BOUND_POOL_MIN_TOP_K = 60


def bound_pool_rows(top_k: int) -> int:
    """How many rows by split bound the candidate pool keeps for ``top_k`` (at least the floor's)."""
    return BOUND_ROWS * max(top_k, BOUND_POOL_MIN_TOP_K)
# rows of a chunk priced first, those of least lower bound, so the chunk's own fastest rows set the bar the rest
# are pruned by (``price_chunk``) before any chunk is kept
SEED_ROWS = 4096
PRESELECT_ROWS = 64  # rows per wanted one sorted first (``Kept.first``: more only where shapes repeat)
PLACE_BITS = 32  # a row's place in the space: its mesh row, then (these low bits) its place in its block


@dataclass
class Kept:
    """Priced rows a result may still show, with their memory, step time and place in the space (the space's
    order, whatever order its blocks were priced in: ties in step time go to the earlier place)."""
    S: StrategyBatch
    mem: MemoryBreakdown
    step: np.ndarray
    place: np.ndarray
    hbm_gb: float = math.inf  # with ``include_oom``: the capacity, so rows that do not fit rank after those that do
    # the least step time a layer split could give each row: its step less its stage imbalance (what a split
    # removes at most, ``search.split_dp``); ranks the rows the stage split is tried on
    bound: np.ndarray = cast(np.ndarray, None)  # None: the step (set in __post_init__; the cast types it)

    def __post_init__(self):
        if self.bound is None:
            self.bound = self.step

    def take(self, idx: np.ndarray) -> "Kept":
        return Kept(self.S.take(idx), expand(self.mem, idx), self.step[idx], self.place[idx], self.hbm_gb,
                    self.bound[idx])

    @staticmethod
    def concatenate(parts: list["Kept"]) -> "Kept":
        return Kept(StrategyBatch.concatenate([p.S for p in parts]), MemoryBreakdown.concatenate([p.mem for p in parts]),
                    np.concatenate([p.step for p in parts]), np.concatenate([p.place for p in parts]), parts[0].hbm_gb,
                    np.concatenate([p.bound for p in parts]))

    def by_step(self) -> np.ndarray:
        """Row indices fastest first, equal times by less memory, then in the space's order."""
        return np.lexsort((self.place, self.mem.peak_gb, self.step))

    def by_rank(self, key: np.ndarray | None = None) -> np.ndarray:
        """The candidates' order: rows that fit fastest first (``key``: by it instead of the step), equal times
        by less memory, then (``include_oom``) the rest by how far over the capacity they are, least first."""
        key = self.step if key is None else key
        return np.lexsort((self.place, self.mem.peak_gb, key, over_capacity_gb(self.mem.peak_gb, self.hbm_gb)))

    def needed(self, top_k: int, distinct: bool) -> "Kept":
        """Only the Pareto front, the first ``top_k`` rows (of distinct shapes with ``distinct``) and the first
        ``top_k`` by their split bound: a row out of all three here is out of them among any superset of these
        rows (a row or shape that beats it stays)."""
        front = pareto_front(self.step, self.mem.peak_gb, np.argsort(self.step, kind="stable"))
        keep = [front, self.first(self.step, top_k, 1 if distinct else None),
                self.first(self.bound, bound_pool_rows(top_k), BOUND_PER_SHAPE)]
        return self.take(sorted_unique(np.concatenate(keep)))

    def bar(self, top_k: int, distinct: bool) -> tuple[float, np.ndarray, np.ndarray]:
        """What a new row must beat to be ``needed`` with these rows (``search.prune.worth_pricing``): the
        slowest step of the first ``top_k`` (shapes) and the largest split bound of the bound pool (infinite
        while either is short of rows), and the rows' steps ascending with the least peak memory up to each."""
        shown = self.first(self.step, top_k, 1 if distinct else None)
        pool = self.first(self.bound, bound_pool_rows(top_k), BOUND_PER_SHAPE)
        step_bar = float(self.step[shown[-1]]) if len(shown) >= top_k else math.inf
        bound_bar = float(self.bound[pool[-1]]) if len(pool) >= bound_pool_rows(top_k) else math.inf
        order = np.argsort(self.step, kind="stable")
        return max(step_bar, bound_bar), self.step[order], np.minimum.accumulate(self.mem.peak_gb[order])

    def first(self, key: np.ndarray, k: int, per_shape: int | None) -> np.ndarray:
        """``by_rank(key)``'s first ``k`` rows (1: of distinct shapes; n > 1: at most n of each pipeline layout,
        ``first_n_per_shape``; None: any), sorting only the
        rows that can be among them: those whose key is at most the n-th smallest, n growing until they hold k
        (all rows with include_oom's capacity ranking, whose first key is the distance over it)."""
        n = len(key)
        take = min(n, PRESELECT_ROWS * k)
        while True:
            if take >= n or math.isfinite(self.hbm_gb):
                rows = np.arange(n)
            else:
                rows = np.nonzero(key <= np.partition(key, take - 1)[take - 1])[0]
            sub = self.take(rows)
            order = sub.by_rank(key[rows])
            shown = (order if per_shape is None else first_per_shape(sub.S, order) if per_shape == 1
                     else first_n_per_shape(sub.S, order, per_shape))
            if len(shown) >= k or len(rows) == n:
                return rows[shown[:k]]
            take *= 4


@dataclass
class Search:
    """One pricing of a space, block by block: the job, and what the result needs of the rows priced so far
    (the rows it may show, the counts, the row that needs least memory for the no-fit error)."""
    job: Job
    include_oom: bool
    top_k: int  # candidates (with the ILP's spares) the result shows
    distinct: bool
    oom_by_memory: bool = True  # with include_oom: rows that do not fit ranked by how far over memory
    kept: Kept | None = None
    space: int = 0  # rows enumerated
    priced: int = 0
    fitting: int = 0
    smallest: tuple = (np.inf, -1, None)  # (peak GiB, place, strategy)
    # rows that fit the device but keep more in host memory than the host's share: the least host use of them
    device_fitting: int = 0
    least_host: tuple = (np.inf, -1, None)  # (host GiB, place, strategy)

    def merge(self, c: "PricedChunk") -> None:
        """Add one priced chunk's counts and rows (order-free: every tie is broken by the rows' place)."""
        self.fitting += c.fitting
        self.priced += c.priced
        self.device_fitting += c.device_fitting
        if c.smallest[:2] < self.smallest[:2]:
            self.smallest = c.smallest
        if c.least_host[:2] < self.least_host[:2]:
            self.least_host = c.least_host
        if c.kept is not None:
            both = c.kept if self.kept is None else Kept.concatenate([self.kept, c.kept])
            self.kept = both.needed(self.top_k, self.distinct)


@dataclass
class PricedChunk:
    """What one chunk of the space contributes to a ``Search``: its counts, its leanest rows and the rows of it
    the result may show (``Kept.needed`` of the chunk alone: a row out of them is out among any superset)."""
    priced: int
    fitting: int
    device_fitting: int
    smallest: tuple  # (peak GiB, place, strategy)
    least_host: tuple  # (host GiB, place, strategy) of the rows that fit the device
    kept: Kept | None


def chunk_memory(job: Job, part: StrategyBatch) -> tuple[DeviceFigures, MemoryBreakdown]:
    """The memory figures and the peak memory of every row of ``part``: what ``price_chunk`` starts from. The
    job's ``memory_margin_gb`` does not enter them (only what fits, ``fits_memory``), so searches of one job
    under different margins share them (``price_chunks``)."""
    model, cluster, train, fw = job.model, job.cluster, job.train, job.framework
    f_all = stack_device_figures(model, train, part, fw)
    return f_all, memory(model, cluster.accelerator, train, part, figures=f_all, framework=fw)


def chunk_tallies(job: Job, place: np.ndarray, part: StrategyBatch,
                  mem: MemoryBreakdown) -> tuple[np.ndarray, tuple, tuple, int]:
    """What a chunk adds to a search's counts under the job's margin: which rows fit, the leanest row (peak
    GiB, place, strategy), the row of least host memory among those that fit the device, and how many do."""
    cluster, train = job.cluster, job.train
    fits = fits_memory(mem, cluster.accelerator, train)
    j = int(np.argmin(mem.peak_gb))
    smallest = (float(mem.peak_gb[j]), int(place[j]), part.strategy(j))
    least_host: tuple = (np.inf, -1, None)
    on_device = np.nonzero(mem.peak_gb <= usable_hbm_gb(cluster.accelerator, train))[0]
    if len(on_device):
        host = np.broadcast_to(mem.host_gb, mem.peak_gb.shape)[on_device]
        k = int(np.argmin(host))
        least_host = (float(host[k]), int(place[on_device[k]]), part.strategy(int(on_device[k])))
    return fits, smallest, least_host, len(on_device)


def price_chunk(job: Job, part: StrategyBatch, place: np.ndarray, include_oom: bool, oom_by_memory: bool,
                top_k: int, distinct: bool, prior: Kept | None = None,
                priced_memory: tuple[DeviceFigures, MemoryBreakdown] | None = None,
                timed: Timed | None = None) -> PricedChunk:
    """Peak memory of every row of ``part`` (``chunk_memory``, or ``priced_memory`` where given), then the step
    times of the rows that fit (all of them with ``include_oom``), but for those that could not be shown
    (``search.prune``: against the bar of ``prior``, the rows kept before, and of this chunk's ``SEED_ROWS``
    rows of least lower bound). The unit times and the devices' time parts are priced for the rows that fit
    only (``cost.units.with_times``; ``timed``: theirs, where the caller has them). Pure: chunks are priced
    side by side (``search_space``)."""
    f_all, mem = chunk_memory(job, part) if priced_memory is None else priced_memory
    fits, smallest, least_host, on_device = chunk_tallies(job, place, part, mem)
    usable = usable_hbm_gb(job.cluster.accelerator, job.train)
    hbm = usable if include_oom and oom_by_memory else math.inf
    timed_rows = np.arange(len(part)) if include_oom else np.nonzero(fits)[0]
    kept = kept_rows(job, part.take(timed_rows), expand(mem, timed_rows), f_all.subset(timed_rows),
                     place[timed_rows], hbm, top_k, distinct, prune=not include_oom, prior=prior, timed=timed)
    return PricedChunk(len(part), int(fits.sum()), on_device, smallest, least_host, kept)


SearchArgs = tuple[Job, bool, bool, int, bool, "Kept | None"]  # (job, include_oom, oom_by_memory, top_k, distinct, prior)


def within(first: SearchArgs, other: SearchArgs) -> bool:
    """Whether ``other`` (the same job under a margin no wider) keeps no row ``first`` would not keep of the
    rows that fit both: neither ranks rows that do not fit, and ``first`` keeps as many rows by step (of one
    shape each, unless ``other`` keeps one) and by split bound (``Kept.needed``). Then a row of both that
    ``first`` drops (priced or pruned) is out of ``other``'s rows too (``Kept.needed``: a row out of the
    rows needed of a set is out of them among any superset), and ``other`` prices only the rows that fit it
    alone (``price_wider_chunk``)."""
    job, oom, _, top_k, distinct, _ = first
    job_o, oom_o, _, top_k_o, distinct_o, _ = other
    return (not oom and not oom_o and top_k_o <= top_k and (top_k_o == 1 or distinct == distinct_o)
            and job_o.train.memory_margin_gb <= job.train.memory_margin_gb)


def price_wider_chunk(job: Job, part: StrategyBatch, place: np.ndarray, top_k: int, distinct: bool,
                      prior: Kept | None, priced_memory: tuple[DeviceFigures, MemoryBreakdown],
                      narrower: PricedChunk, extra: np.ndarray, timed: Timed | None = None) -> PricedChunk:
    """``price_chunk`` of a search ``within`` another's (``narrower``; ``extra``: the rows that fit this one
    only, ``timed`` their time figures where the caller has them): its kept rows are those it needs of the
    other's kept rows of this chunk and of the rows ``extra``, these priced but for those that could not be
    shown against its ``prior`` and the other's."""
    f_all, mem = priced_memory
    fits, smallest, least_host, on_device = chunk_tallies(job, place, part, mem)
    known = [k for k in (prior, narrower.kept) if k is not None]
    # with rows kept already, their bar prunes (the narrower search's rows of this chunk: its fastest)
    kept = kept_rows(job, part.take(extra), expand(mem, extra), f_all.subset(extra), place[extra], math.inf,
                     top_k, distinct, prune=True, prior=Kept.concatenate(known) if known else None,
                     seed_rows=0 if known else SEED_ROWS, timed=timed)
    parts = [k for k in (narrower.kept, kept) if k is not None]
    return PricedChunk(len(part), int(fits.sum()), on_device, smallest, least_host,
                       Kept.concatenate(parts).needed(top_k, distinct) if parts else None)


def price_chunks(part: StrategyBatch, place: np.ndarray, searches: list[SearchArgs]) -> list[PricedChunk]:
    """``price_chunk`` of one chunk for each of ``searches`` (``SearchArgs``: one job under different memory
    margins), its memory priced once; a second search ``within`` the first prices only the rows that fit it
    alone (``price_wider_chunk``), and the time figures of the rows that fit it are priced once for both
    (``time_figures``: per row, whatever rows are priced beside it)."""
    priced_memory = chunk_memory(searches[0][0], part)
    if len(searches) != 2 or not within(*searches):
        return [price_chunk(job, part, place, include_oom, by_memory, top_k, distinct, prior, priced_memory)
                for job, include_oom, by_memory, top_k, distinct, prior in searches]
    (job, include_oom, by_memory, top_k, distinct, prior), wider = searches
    f_all, mem = priced_memory
    fits = fits_memory(mem, job.cluster.accelerator, job.train)
    fits_wide = fits_memory(mem, wider[0].cluster.accelerator, wider[0].train)
    assert not (fits & ~fits_wide).any()  # a margin no wider: what fits the first fits the second
    wide = np.nonzero(fits_wide)[0]
    at = np.cumsum(fits_wide) - 1  # each row's place among ``wide``
    timed = time_figures(job, part.take(wide), f_all.subset(wide)) if len(wide) else None
    narrow_at, extra_at = at[np.nonzero(fits)[0]], at[np.nonzero(fits_wide & ~fits)[0]]
    first = price_chunk(job, part, place, include_oom, by_memory, top_k, distinct, prior, priced_memory,
                        timed.subset(narrow_at) if timed is not None else None)
    return [first, price_wider_chunk(wider[0], part, place, wider[3], wider[4], wider[5], priced_memory, first,
                                     wide[extra_at], timed.subset(extra_at) if timed is not None else None)]


@dataclass
class Timed:
    """The rows' unit times, their device figures with the time parts, and their step's lower bound
    (``search.prune``): what ``kept_rows`` prices its rows from."""
    unit: UnitTimes
    figures: DeviceFigures
    lower: np.ndarray

    def subset(self, rows: np.ndarray) -> "Timed":
        return Timed(self.unit.subset(rows), self.figures.subset(rows), self.lower[rows])


def time_figures(job: Job, S: StrategyBatch, f_mem: DeviceFigures) -> Timed:
    """``Timed`` of the rows of S (of memory figures ``f_mem``): each row's figures are its own, whatever
    rows are priced beside it (per combination of the keys each depends on, elementwise)."""
    ut = unit_times(job, S, UNIT_KEYS)
    f = with_times(f_mem, ut)
    return Timed(ut, f, step_lower_bound_s(job, S, f))


def kept_rows(job: Job, S: StrategyBatch, mem: MemoryBreakdown, f_mem: DeviceFigures, place: np.ndarray,
              hbm: float, top_k: int, distinct: bool, prune: bool, prior: Kept | None,
              seed_rows: int = SEED_ROWS, timed: Timed | None = None) -> Kept | None:
    """The rows of S (of peak memory ``mem``, memory figures ``f_mem``) the result may show, priced with their
    unit times; with ``prune`` (else every row is priced) only those that could still be shown are: the
    ``seed_rows`` of least lower bound first, then those of the rest that beat their bar and ``prior``'s (the
    rows kept before); ``timed``: the rows' time figures, where the caller has them (``time_figures``)."""
    if not len(S):
        return None
    if timed is None and prune:
        timed = time_figures(job, S, f_mem)
    ut = timed.unit if timed is not None else unit_times(job, S, UNIT_KEYS)
    f = timed.figures if timed is not None else with_times(f_mem, ut)

    def kept_of(rows: np.ndarray) -> Kept | None:
        if not len(rows):
            return None
        sub, m = S.take(rows), expand(mem, rows)
        be = estimate_batch(job, sub, mem=m, figures=f.subset(rows), unit=ut.subset(rows))
        bound = be.step_time_s - np.where(sub.pp > 1, be.imbalance_s, 0.0)
        return Kept(sub, m, be.step_time_s, place[rows], hbm, bound).needed(top_k, distinct)

    if not prune:  # include_oom: every row is shown in some order, nothing is pruned
        return kept_of(np.arange(len(S)))
    assert timed is not None
    lower = timed.lower
    seed, rest = least_first(lower, seed_rows) if seed_rows else (np.zeros(0, dtype=np.int64), np.arange(len(S)))
    first = kept_of(seed)
    so_far = [k for k in (prior, first) if k is not None]
    if so_far and len(rest):
        bar = Kept.concatenate(so_far).bar(top_k, distinct)  # the same bar as of their needed rows
        rest = rest[worth_pricing(lower[rest], mem.peak_gb[rest], *bar)]
    parts = [k for k in (first, kept_of(rest)) if k is not None]
    return Kept.concatenate(parts).needed(top_k, distinct) if parts else None


def sorted_unique(rows: np.ndarray) -> np.ndarray:
    """``np.unique(rows)`` of integer rows by sorting (numpy's hashing path for a bare ``np.unique`` imports
    ``numpy.ma`` on first use, ~10 ms of a command's start-up; the result is the same)."""
    rows = np.sort(rows)
    return rows[np.concatenate(([True], rows[1:] != rows[:-1]))] if len(rows) else rows


def least_first(key: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` rows of least ``key`` in order (equal keys by row: a stable argsort's first k), and the other
    rows ascending; by a partition around the k-th key rather than sorting every row."""
    n = len(key)
    kth = np.partition(key, k - 1)[k - 1] if n > k else np.nan
    if np.isnan(kth):  # a short chunk, or keys that are not numbers: the full sort
        order = np.argsort(key, kind="stable")
        return order[:k], np.sort(order[k:])
    tied = np.flatnonzero(key == kth)
    pick = np.concatenate([np.flatnonzero(key < kth), tied[:k - int((key < kth).sum())]])
    seed = pick[np.argsort(key[pick], kind="stable")]  # pick holds each key's rows ascending
    rest = np.ones(n, dtype=bool)
    rest[seed] = False
    return seed, np.flatnonzero(rest)


def over_capacity_gb(peak_gb, capacity_gb: float):
    """How far a peak is over the capacity (0 where it fits; always 0 for an infinite capacity)."""
    return np.maximum(np.asarray(peak_gb, dtype=float) - capacity_gb, 0.0) if math.isfinite(capacity_gb) else \
        np.zeros_like(np.asarray(peak_gb, dtype=float))


# pipelines of at most this many stages price in narrow chunks: a stage count caps a layout's representative
# devices (``cost.units.Stages``, K), and a chunk's [N, K] arrays are as wide as its widest layout
NARROW_PP = 2


def chunked(blocks: Iterator[tuple[np.ndarray, StrategyBatch, np.ndarray]], chunk_rows: int):
    """The blocks' rows regrouped into chunks of ``chunk_rows`` (the last ones shorter), each row with its place
    in the space: (strategies, places, rows enumerated so far, mesh shapes enumerated so far). Rows of at most
    ``NARROW_PP`` pipeline stages and the others fill separate chunks, so that a chunk of short pipelines holds
    at most NARROW_PP representative devices per row instead of its widest neighbour's (the figures are the
    same: the padding columns repeat a device). What is left of both at the end is one chunk where it fits in
    one (a space of less than a chunk is one chunk), else a chunk or more of each."""
    held: dict[bool, tuple[list, list]] = {False: ([], []), True: ([], [])}
    n_rows = n_mesh = 0

    def cut(held_S: list, held_place: list, final: bool):
        """Whole chunks of the rows held (all of them when ``final``); the rows left over."""
        count = sum(len(p) for p in held_place)
        if not count or (count < chunk_rows and not final):
            return held_S, held_place
        S_all, place = StrategyBatch.concatenate(held_S), np.concatenate(held_place)
        end = count if final else count - count % chunk_rows
        for lo in range(0, end, chunk_rows):
            hi = min(lo + chunk_rows, end)
            yield S_all.take(slice(lo, hi)), place[lo:hi], n_rows, n_mesh
        return [S_all.take(slice(end, None))], [place[end:]]

    for rows, S, mesh in blocks:
        n_rows, n_mesh = n_rows + len(S), n_mesh + len(rows)
        place = (mesh << PLACE_BITS) | np.arange(len(S), dtype=np.int64)
        wide = S.pp > NARROW_PP
        for side in (False, True):
            pick = np.flatnonzero(wide == side)
            if len(pick):
                held[side][0].append(S.take(pick) if len(pick) < len(S) else S)
                held[side][1].append(place[pick] if len(pick) < len(S) else place)
            held[side] = yield from cut(*held[side], final=False)
    if sum(len(p) for side in held.values() for p in side[1]) <= chunk_rows:  # what is left, in one chunk
        yield from cut(held[False][0] + held[True][0], held[False][1] + held[True][1], final=True)
    else:
        for side in (False, True):
            yield from cut(*held[side], final=True)


def search_space(search: Search, space: Space, progress: Callable[[int, int], None] | None = None,
                 deadline: Deadline | None = None, chunk_rows: int = CHUNK, shadow: Search | None = None) -> Search:
    """Enumerate the space block by block (``Space.blocks``: mesh shapes in bit-reversed order, so any prefix
    is spread over the space) and price it in chunks of ``chunk_rows``, ``PRICING_THREADS`` chunks side by side
    (numpy lets go of the GIL inside its array loops), merged in order. Past the deadline no further chunk is
    priced (one always is); the rest of the space is still counted. ``progress(priced, total)``: total is
    extrapolated from the mesh shapes enumerated so far until the last chunk. ``shadow``: a second search of
    the same job under another memory margin, priced in the same pass (each chunk's memory once; its rows,
    counts and priors exactly as a search of its own would have them: the same chunks, submitted and merged in
    the same order); complete where the deadline did not cut this one short."""
    blocks = space.blocks(chunk_rows)
    searches = [search] if shadow is None else [search, shadow]
    pending: collections.deque = collections.deque()

    def settle() -> None:
        future, n_rows, n_mesh = pending.popleft()
        for s, priced in zip(searches, future.result(), strict=True):
            s.merge(priced)
        if progress:
            progress(search.priced, n_rows + round((space.n_mesh - n_mesh) * n_rows / n_mesh))

    with ThreadPoolExecutor(max_workers=pricing_threads()) as pool:
        for S, place, n_rows, n_mesh in chunked(blocks, chunk_rows):
            search.space = n_rows
            if (search.priced or pending) and deadline is not None and deadline.passed():
                while pending:
                    settle()
                search.space += sum(len(b[1]) for b in blocks)
                deadline.notes.append(f"time limit of {deadline.limit_s:g} s reached: priced {search.priced:,} of "
                                      f"{search.space:,} configurations (from {n_mesh} of {space.n_mesh} mesh "
                                      "shapes, spread over the space); the ranking covers those only")
                return search
            args = [(s.job, s.include_oom, s.oom_by_memory, s.top_k, s.distinct, s.kept) for s in searches]
            pending.append((pool.submit(price_chunks, S, place, args), n_rows, n_mesh))
            while len(pending) > pricing_threads():
                settle()
        while pending:
            settle()
    if shadow is not None:
        shadow.space = search.space
    return search


def first_n_per_shape(S: StrategyBatch, order: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` rows of each pipeline layout (tp, pp, vpp, cp, ep: what a layer split acts on) in
    ``order``, in that order."""
    key = (((S.tp.astype(np.int64) * 8192 + S.pp) * 8192 + S.cp) * 65536 + S.ep) * 256 + S.vpp
    _, inv = np.unique(key[order], return_inverse=True)
    inv = np.ravel(inv)
    counts = np.bincount(inv)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    occurrence = np.empty(len(order), dtype=np.int64)
    occurrence[np.argsort(inv, kind="stable")] = np.arange(len(order)) - np.repeat(starts, counts)
    return order[occurrence < n]


def first_per_shape(S: StrategyBatch, by_step: np.ndarray) -> np.ndarray:
    """The fastest row of each parallel shape (tp, pp, cp, ep), in step-time order: what differs between the
    rows ``plan`` shows by default (rows differing only in vpp, mbs or ZeRO stage are variations of one shape)."""
    key = ((S.tp.astype(np.int64) * 8192 + S.pp) * 8192 + S.cp) * 65536 + S.ep
    _, first = np.unique(key[by_step], return_index=True)
    return by_step[np.sort(first)]

