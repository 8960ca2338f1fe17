"""Attention-aware balancing of packed samples over data-parallel ranks and micro-batches.

A packed sample of documents l_1..l_n (document-masked causal attention: each document attends only to
itself) costs

    cost = a * sum(l_i^2) + b * S,        S = sum(l_i) tokens,

with both coefficients derived from the cost model's own terms (``attention_cost_coefficients``): ``a`` is the
causal flash-attention time per token^2 of one document over all layers (``attention_flops_fwd`` priced by
``attention_time_s``; forward + backward = 1 + ``BWD_ATTENTION`` = 3.5x the forward), ``b`` the time per token
of the GEMMs of every layer plus the LM head (``layer_compute``'s GEMM terms priced by ``gemm_time_s``;
forward + data- and weight-gradient GEMMs = 3x). Both are slopes (differences of two sizes), so launch
overheads, which do not grow with tokens, drop out.

Samples go to D ranks x M micro-batches, every slot the same number of samples (the micro-batch size). A
rank's load is the sum over its micro-batches (data parallelism waits on the slowest rank at the gradient
all-reduce): ``balance`` minimises the largest rank load with LPT (longest processing time first, a rank
takes samples until it is full) and then pairwise swaps between the most loaded rank and the others while
one lowers it, within a time budget; each rank's samples are then spread over its micro-batches the same way.
Everything is deterministic (stable sorts, ties by index).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from asap.errors import AsapError

DEFAULT_MODEL = "llama3-8b"
DEFAULT_CLUSTER = "h100-sxm"


@dataclass(frozen=True)
class Coefficients:
    a: float  # seconds per token^2 of one document (causal attention, all layers, forward + backward)
    b: float  # seconds per token (GEMMs of all layers and the LM head, forward + backward)
    model: str
    cluster: str
    precision: str
    default: bool  # True when no model was given and the default dense model priced the samples

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "model": self.model, "cluster": self.cluster,
                "precision": self.precision, "default": self.default,
                "formula": "a * sum(doc_len^2) + b * tokens"}


def attention_cost_coefficients(model=None, cluster=None, precision: str = "bf16", seq_len: int = 8192,
                                framework: str | None = None) -> Coefficients:
    """(a, b) of ``cost = a * sum(l_i^2) + b * S`` for ``model`` on one device of ``cluster``.

    With no model, the default dense model (llama3-8b) on one H100 SXM; ``Coefficients.default`` says so."""
    from asap.cost.batch import StrategyBatch
    from asap.cost.compute import layer_compute
    from asap.cost.layer_ops import attention_flops_fwd
    from asap.cost.operations import BWD_ATTENTION, BWD_GEMM
    from asap.cost.roofline import attention_time_s
    from asap.spec.hardware import load_cluster
    from asap.spec.loader import load_model
    from asap.spec.strategy import Strategy
    from asap.spec.train import TrainSpec

    default = model is None
    m = load_model(DEFAULT_MODEL if model is None else model)
    c = load_cluster(DEFAULT_CLUSTER if cluster is None else cluster, devices=1)
    acc = c.accelerator
    S = StrategyBatch.from_strategies([Strategy(dp=1)])
    L1, L2 = int(seq_len), 2 * int(seq_len)

    # attention: forward time of one causal document of L tokens is quadratic in L; its slope per L^2
    t1 = attention_time_s(acc, precision, attention_flops_fwd(m, 1.0, float(L1), 1.0, 1.0))
    t2 = attention_time_s(acc, precision, attention_flops_fwd(m, 1.0, float(L2), 1.0, 1.0))
    a_fwd_layer = float((t2 - t1) / (L2 ** 2 - L1 ** 2))
    a = a_fwd_layer * m.num_layers * (1.0 + BWD_ATTENTION)

    # linear layers: the GEMMs of a dense / MoE layer and the LM head, slope per token
    def gemm_terms(L):
        lc = layer_compute(m, acc, TrainSpec(global_batch=1, seq_len=L, precision=precision, framework=framework), S)
        per_layer = m.num_dense_layers * lc.dense_gemm_fwd_s + m.num_moe_layers * lc.moe_gemm_fwd_s
        return float(np.asarray(per_layer + lc.head_fwd_s).reshape(-1)[0])

    b = (gemm_terms(L2) - gemm_terms(L1)) / (L2 - L1) * (1.0 + BWD_GEMM)
    return Coefficients(a=a, b=b, model=m.name, cluster=getattr(c, "name", None) or acc.name,
                        precision=precision, default=default)


# ---------------------------------------------------------------------------------------------- input

MAX_PACKED_SAMPLES = 10_000_000  # a bound on what a flat document list packs into (a typo of 1e30 tokens is refused)


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _check_length(x, where: str) -> int:
    if not _is_int(x):
        raise AsapError("lengths", f"{where} must be a positive integer number of tokens, got {x!r}")
    if x <= 0:
        raise AsapError("lengths", f"{where} must be a positive integer number of tokens, got {x}")
    return int(x)


def read_lengths(path: str | Path) -> Any:
    """The JSON document of a ``--lengths FILE`` (a list of packed samples or a flat list of documents)."""
    p = Path(path)
    if not p.is_file():
        raise AsapError("lengths", f"no such file: {path}")
    try:
        return json.loads(p.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise AsapError("lengths", f"cannot read {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise AsapError("lengths", f"{path} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


def parse_samples(data: Any, seq_len: int) -> tuple[list[list[int]], bool]:
    """(packed samples, whether ``data`` was a flat document list that had to be packed first)."""
    if not _is_int(seq_len) or seq_len <= 0:
        raise AsapError("seq-len", f"must be a positive integer, got {seq_len!r}")
    if not isinstance(data, list):
        raise AsapError("lengths", f"must be a JSON list (packed samples or document lengths), got "
                                   f"{type(data).__name__}")
    if not data:
        raise AsapError("lengths", "is empty: no samples or documents")
    lists = [isinstance(x, list) for x in data]
    if all(lists):
        samples = []
        for i, s in enumerate(data):
            if not s:
                raise AsapError("lengths", f"sample {i} is empty (a packed sample lists its documents' lengths)")
            docs = [_check_length(x, f"sample {i} document {j}") for j, x in enumerate(s)]
            if sum(docs) > seq_len:
                raise AsapError("lengths", f"sample {i} has {sum(docs)} tokens, more than --seq-len {seq_len}")
            samples.append(docs)
        return samples, False
    if any(lists):
        first = lists.index(True) if not lists[0] else lists.index(False)
        raise AsapError("lengths", f"mixes packed samples (lists) and document lengths (numbers): item {first} "
                                   f"is {'a list' if lists[first] else repr(data[first])}; give a list of lists or "
                                   f"a flat list of numbers")
    docs = [_check_length(x, f"document {i}") for i, x in enumerate(data)]
    n_samples = sum(-(-n // seq_len) for n in docs)  # at least this many: each its own whole chunks
    if n_samples > MAX_PACKED_SAMPLES:
        raise AsapError("lengths", f"the documents fill at least {n_samples:,} samples of {seq_len} tokens, more "
                                   f"than {MAX_PACKED_SAMPLES:,}")
    return pack(docs, seq_len), True


def pack(lengths: Sequence[int], seq_len: int) -> list[list[int]]:
    """First-fit decreasing into ``seq_len`` bins; a document longer than ``seq_len`` is first split into
    ``seq_len`` chunks (each a sample of its own) and its remainder. Bins in order of opening."""
    pieces: list[int] = []
    full: list[list[int]] = []
    for n in lengths:
        q, r = divmod(int(n), seq_len)
        full.extend([seq_len] for _ in range(q))
        if r:
            pieces.append(r)
    pieces.sort(reverse=True)
    # a max segment tree over the bins' remaining room: the first bin with room >= piece in O(log n)
    size = 1
    while size < max(len(pieces), 1):
        size *= 2
    tree = [0] * (2 * size)
    bins: list[list[int]] = []
    for piece in pieces:
        if tree[1] >= piece:
            i = 1
            while i < size:
                i = 2 * i if tree[2 * i] >= piece else 2 * i + 1
            k = i - size
            bins[k].append(piece)
            tree[i] -= piece
        else:
            k = len(bins)
            bins.append([piece])
            i = k + size
            tree[i] = seq_len - piece
        i //= 2
        while i:
            left, right = tree[2 * i], tree[2 * i + 1]
            tree[i] = left if left > right else right
            i //= 2
    return full + bins


def sample_costs(samples: Sequence[Sequence[int]], coef: Coefficients) -> np.ndarray:
    sq = np.fromiter((sum(n * n for n in s) for s in samples), dtype=float, count=len(samples))
    tok = np.fromiter((sum(s) for s in samples), dtype=float, count=len(samples))
    return coef.a * sq + coef.b * tok


# ------------------------------------------------------------------------------------------ balancing

def _lpt(costs: np.ndarray, items: np.ndarray, nbins: int, cap: int) -> list[list[int]]:
    """Longest processing time first: each item (largest first) to the least loaded bin that has room."""
    import heapq

    order = items[np.argsort(-costs[items], kind="stable")]
    heap = [(0.0, b) for b in range(nbins)]
    bins: list[list[int]] = [[] for _ in range(nbins)]
    for it in order.tolist():
        load, b = heapq.heappop(heap)
        bins[b].append(it)
        if len(bins[b]) < cap:
            heapq.heappush(heap, (load + float(costs[it]), b))
    return bins


def _refine(costs: np.ndarray, bins: list[list[int]], deadline: float) -> int:
    """Swap one item of the most loaded bin with one of another bin while that lowers the most loaded bin's
    load (and the other stays below it); the best such swap each time. Returns the swaps made."""
    nb = len(bins)
    if nb < 2:
        return 0
    arrs = [np.array(b, dtype=np.int64) for b in bins]
    loads = np.array([costs[a].sum() for a in arrs])
    swaps = 0
    tol = 1e-12 * max(float(loads.max()), 1e-300)
    while time.perf_counter() < deadline:
        p = int(np.argmax(loads))
        xp = costs[arrs[p]]
        best = None  # (new pair max, bin, index in p, index in r)
        for r in range(nb):
            if r == p:
                continue
            gap = loads[p] - loads[r]
            if gap <= tol:
                continue
            yr = costs[arrs[r]]
            order = np.argsort(yr, kind="stable")
            ys = yr[order]
            # the ideal y for each x moves gap / 2 from p to r
            pos = np.searchsorted(ys, xp - gap / 2.0)
            for cand in (np.clip(pos, 0, len(ys) - 1), np.clip(pos - 1, 0, len(ys) - 1)):
                d = xp - ys[cand]
                new_max = np.maximum(loads[p] - d, loads[r] + d)
                new_max = np.where((d > tol) & (d < gap - tol), new_max, np.inf)
                i = int(np.argmin(new_max))
                if new_max[i] < loads[p] - tol and (best is None or new_max[i] < best[0] - tol):
                    best = (float(new_max[i]), r, i, int(order[cand[i]]))
        if best is None:
            break
        _, r, i, j = best
        xi, yj = arrs[p][i], arrs[r][j]
        arrs[p][i], arrs[r][j] = yj, xi
        d = costs[xi] - costs[yj]
        loads[p] -= d
        loads[r] += d
        swaps += 1
    for k in range(nb):
        bins[k] = arrs[k].tolist()
    return swaps


def _figures(costs: np.ndarray, slots: list[list[int]], dp: int, mb: int) -> dict:
    slot_loads = np.array([costs[s].sum() if s else 0.0 for s in slots])
    rank_loads = slot_loads.reshape(dp, mb).sum(axis=1)
    rmean, smean = float(rank_loads.mean()), float(slot_loads.mean())
    return {"max_over_mean": float(rank_loads.max()) / rmean if rmean > 0 else 1.0,
            "max_s": float(rank_loads.max()), "mean_s": rmean, "min_s": float(rank_loads.min()),
            "micro_batch_max_over_mean": float(slot_loads.max()) / smean if smean > 0 else 1.0,
            "micro_batch_max_s": float(slot_loads.max()), "micro_batch_mean_s": smean,
            "rank_loads_s": rank_loads.tolist()}


def balance(samples: Sequence[Sequence[int]], dp: int, micro_batches: int, coefficients: Coefficients | None = None,
            time_budget_s: float = 1.0, packed: bool = False) -> dict:
    """Assign packed ``samples`` to ``dp`` ranks x ``micro_batches`` micro-batches (equal slot sizes).

    Returns ``{before, after, predicted_gain, assignment, micro_batch_size, samples, coefficients, ...}``;
    ``assignment`` lists dp * micro_batches lists of sample indices, rank-major (rank r's micro-batch k is
    ``assignment[r * micro_batches + k]``); ``before`` is round-robin (sample i to slot i % (dp * M))."""
    t0 = time.perf_counter()
    for name, v in (("dp", dp), ("micro-batches", micro_batches)):
        if not _is_int(v) or v <= 0:
            raise AsapError(name, f"must be a positive integer, got {v!r}")
    if not samples:
        raise AsapError("lengths", "is empty: no samples")
    n, K = len(samples), dp * micro_batches
    if n % K:
        raise AsapError("lengths", f"{n} samples do not divide into {dp} ranks x {micro_batches} micro-batches = "
                                   f"{K} equal slots ({n} % {K} = {n % K}; give a multiple of {K})")
    if time_budget_s is None or time_budget_s <= 0:
        raise AsapError("time-budget", f"must be positive, got {time_budget_s!r}")
    coef = coefficients or attention_cost_coefficients()
    costs = sample_costs(samples, coef)
    cap = n // K
    deadline = t0 + time_budget_s

    before_slots = [list(range(k, n, K)) for k in range(K)]
    ranks = _lpt(costs, np.arange(n), dp, cap * micro_batches)
    # most of the budget to the rank level (what the step waits on), the rest to micro-batches
    rank_swaps = _refine(costs, ranks, t0 + 0.8 * time_budget_s)
    slots: list[list[int]] = []
    mb_swaps = 0
    for r in range(dp):
        mbs = _lpt(costs, np.array(ranks[r], dtype=np.int64), micro_batches, cap)
        left = max(deadline - time.perf_counter(), 0.0)
        mb_swaps += _refine(costs, mbs, time.perf_counter() + left / (dp - r))
        slots.extend(sorted(s) for s in mbs)

    before, after = _figures(costs, before_slots, dp, micro_batches), _figures(costs, slots, dp, micro_batches)
    gain = 1.0 - after["max_s"] / before["max_s"] if before["max_s"] > 0 else 0.0
    return {"before": before, "after": after, "predicted_gain": gain, "assignment": slots,
            "samples": n, "micro_batch_size": cap, "dp": dp, "micro_batches": micro_batches, "packed": packed,
            "tokens": int(sum(sum(s) for s in samples)), "coefficients": coef.to_dict(),
            "swaps": {"ranks": rank_swaps, "micro_batches": mb_swaps}, "time_s": time.perf_counter() - t0}


def balance_lengths(data: Any, dp: int, micro_batches: int, seq_len: int, model=None, cluster=None,
                    precision: str = "bf16", time_budget_s: float = 1.0) -> dict:
    """``balance`` over a ``--lengths`` document (packed samples, or document lengths packed first)."""
    samples, packed = parse_samples(data, seq_len)
    coef = attention_cost_coefficients(model, cluster, precision=precision, seq_len=seq_len)
    out = balance(samples, dp, micro_batches, coef, time_budget_s=time_budget_s, packed=packed)
    out["seq_len"] = seq_len
    return out


def offline_document_lengths(max_stdlib_files: int | None = None) -> list[int]:
    """Word counts of real text that every machine here has offline, in a fixed (sorted) order: the licenses
    Debian installs, then the Python standard library's modules (at most ``max_stdlib_files`` of them). The
    corpus the balance test and benchmark pack."""
    import sysconfig

    licenses = Path("/usr/share/common-licenses")
    files = sorted(licenses.glob("*")) if licenses.is_dir() else []
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files += [f for f in sorted(stdlib.rglob("*.py")) if "site-packages" not in f.parts][:max_stdlib_files]
    lengths = []
    for f in files:
        try:
            n = len(f.read_text(errors="replace").split())
        except OSError:
            continue
        if n > 0:
            lengths.append(n)
    return lengths



# ------------------------------------------------------------------------ pricing a --lengths file

@dataclass(frozen=True)
class AttentionWork:
    """How much attention a --lengths file's samples cost, as the cost model's factor on its attention FLOPs.

    The cost model prices every sample as one causal document of S = seq_len tokens (S^2/2 query-key pairs
    per head). A packed sample of documents l_1..l_n with document masking has sum(l_i^2)/2 of them, so its
    factor is q = sum(l_i^2) / S^2 (1 for one full-length document, 1/n for n equal ones). Step k trains
    samples [k*B, (k+1)*B) and data-parallel rank r the contiguous block r*B/D..(r+1)*B/D of them (the
    reference trainer's ``local_rows``, and the usual distributed sampler over a packed dataset); the step
    waits on the slowest rank at the gradient reduction, so the step's factor is the largest rank mean of q,
    and over the file the mean of that over its whole steps. ``mean`` is the factor with perfectly even ranks."""

    samples: int
    steps: int
    packed: bool
    slowest: dict[int, float]  # dp degree -> the slowest rank's factor (mean over steps)
    mean: float  # every rank at the mean

    def train_pairs(self) -> tuple[tuple[int, float], ...]:
        return tuple(sorted(self.slowest.items()))

    def to_dict(self) -> dict:
        return {"samples": self.samples, "steps": self.steps, "packed": self.packed,
                "attention_work_mean": self.mean,
                "attention_work_by_dp": {str(k): v for k, v in sorted(self.slowest.items())}}


def attention_factors(samples: Sequence[Sequence[int]], seq_len: int) -> np.ndarray:
    """q_i = sum(l^2) / seq_len^2 of each packed sample."""
    return np.fromiter((sum(n * n for n in s) for s in samples), dtype=float, count=len(samples)) / float(seq_len) ** 2


def attention_work(data: Any, global_batch: int, seq_len: int, dps: Sequence[int]) -> AttentionWork:
    """The attention-work factors of a --lengths document for each dp degree in ``dps`` (those dividing the
    global batch; others are left out and price as 1)."""
    samples, packed = parse_samples(data, seq_len)
    n, B = len(samples), int(global_batch)
    if n < B:
        raise AsapError("lengths", f"{n} samples, fewer than one global batch of {B}")
    steps = n // B
    q = attention_factors(samples, seq_len)[: steps * B].reshape(steps, B)
    slowest = {int(d): float(q.reshape(steps, d, B // d).mean(axis=2).max(axis=1).mean())
               for d in sorted(set(int(x) for x in dps)) if d > 0 and B % d == 0}
    return AttentionWork(samples=n, steps=steps, packed=packed, slowest=slowest, mean=float(q.mean()))


def balanced_attention_work(data: Any, global_batch: int, seq_len: int, dp: int, micro_batches: int,
                            coefficients: Coefficients, max_steps: int = 8, time_budget_s: float = 0.2) -> float:
    """The slowest rank's factor after ``balance`` placed each step's samples (over the first ``max_steps``
    steps): what ``asap balance`` would leave."""
    samples, _ = parse_samples(data, seq_len)
    B = int(global_batch)
    q = attention_factors(samples, seq_len)
    worst = []
    for k in range(min(len(samples) // B, max_steps)):
        step = samples[k * B:(k + 1) * B]
        out = balance(step, dp, micro_batches, coefficients, time_budget_s=time_budget_s)
        ranks: list[list[int]] = [sum((out["assignment"][r * micro_batches + j] for j in range(micro_batches)), [])
                 for r in range(dp)]
        worst.append(max(float(q[k * B + np.array(r)].mean()) for r in ranks))
    return float(np.mean(worst))


def with_lengths(job, path: str | None):
    """(the job, its train spec carrying the attention work of ``path``'s samples for every dp degree; its
    AttentionWork; the parsed document), or (job, None, None) without a file."""
    from dataclasses import replace

    from asap.balance import attention_work, read_lengths

    if path is None:
        return job, None, None
    t, n = job.train, job.devices
    data = read_lengths(path)
    aw = attention_work(data, t.global_batch, t.seq_len, [d for d in range(1, n + 1) if n % d == 0])
    return job.with_train(replace(t, attention_work=aw.train_pairs(), attention_work_mean=aw.mean)), aw, data


def lengths_report(job, est, aw, data, path: str) -> dict:
    """What the lengths file costs this strategy: the slowest rank's attention work against even ranks, and
    what ``asap balance`` would leave (each re-priced by the same estimate)."""
    from dataclasses import replace

    from asap.balance import attention_cost_coefficients, balanced_attention_work
    from asap.cost.estimate import estimate as run_estimate

    m, c, t = job.model, job.cluster, job.train
    s = est.strategy
    dp = s.dp
    work = aw.slowest.get(dp, 1.0)
    even = run_estimate(job.with_train(replace(t, attention_work=((dp, aw.mean),))), s)
    micro = t.global_batch // (dp * s.mbs)
    coef = attention_cost_coefficients(m, c, precision=t.precision, seq_len=t.seq_len, framework=t.framework)
    bal_work = balanced_attention_work(data, t.global_batch, t.seq_len, dp, micro, coef)
    bal = run_estimate(job.with_train(replace(t, attention_work=((dp, bal_work),))), s)
    return {**aw.to_dict(), "file": path, "attention_work": work,
            "max_over_mean": work / aw.mean if aw.mean > 0 else 1.0,
            "imbalance_s": est.step_time_s - even.step_time_s,
            "balanced": {"attention_work": bal_work, "step_time_s": bal.step_time_s,
                         "predicted_gain": 1.0 - bal.step_time_s / est.step_time_s,
                         "command": f"asap balance --lengths {path} --dp {dp} --micro-batches {micro} "
                                    f"--seq-len {t.seq_len}"}}
