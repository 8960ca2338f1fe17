"""The space of legal strategies for a model, a device count and a batch, as one StrategyBatch or block by
block (``Space.blocks``: a block is every strategy of some mesh shapes, so a 10^7-row space never is in memory).

Built as a Cartesian product of per-key candidate values (numpy index grids), pruned after each join by the
rules of ``asap.spec.legality`` whose columns exist by then (the same table ``check_strategy`` reads), and
by the redundant spellings below. Keys the caller fixes are pinned to one value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Mapping, cast

import numpy as np

from asap.cost.batch import StrategyBatch, gather
from asap.errors import AsapError
from asap.spec.framework import BEST_DISPATCHER, DISPATCHERS, FRAMEWORKS, Framework
from asap.spec.legality import Cols, RuleJob, legal_rows
from asap.spec.model import ModelSpec
from asap.spec.stack_rules import domains_of, runnable_rows
from asap.spec.knobs import KEYS, KNOB, KNOBS, KnobKind, Recompute, Schedule, Zero, recompute_code
from asap.spec.train import TrainSpec

MAX_CP = 32  # context parallelism beyond 32 ranks is not offered by any stack the catalog targets
MAX_VPP = 8  # Megatron-Core recipes use up to 8 chunks per device; more only adds pipeline messages
MICRO_BATCH_SIZES = (1, 2, 4, 8, 16, 32)
EXPERT_TP = (1, 2, 4, 8)  # expert tensor parallelism stays inside a scale-up domain


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def candidate_values(model: ModelSpec, devices: int, scale_up_domain: int, train: TrainSpec,
                     fixed: dict[str, Any], framework: Framework = FRAMEWORKS["megatron"],
                     partial_offload: bool = False) -> dict[str, list]:
    """Per-key candidates, as far as the framework offers them. Free TP stays inside the scale-up domain (TP
    across the network is never faster on any catalog part: it moves 2 activations per layer and pass on the
    slowest link). A dense model has no MoE switches: they keep the framework's defaults."""
    divs = _divisors(devices)
    moe = model.moe is not None
    cands: dict[str, list] = dict(
        tp=[d for d in divs if d <= scale_up_domain and model.num_attention_heads % d == 0],
        pp=[d for d in divs if d <= model.num_layers],
        cp=[d for d in divs if d <= MAX_CP and train.seq_len % (2 * d) == 0] or [1],
        vpp=list(range(1, MAX_VPP + 1)),
        mbs=[b for b in MICRO_BATCH_SIZES if b <= train.global_batch],
        ep=[d for d in _divisors(model.moe.num_experts) if d <= devices] if model.moe else [1],
        etp=[d for d in EXPERT_TP if d <= scale_up_domain] if model.moe else [1],
        recompute=recompute_candidates(model, framework), zero=[int(z) for z in Zero], sp=[0, 1],
        schedule=[int(s) for s in Schedule],
        dispatcher=list(range(len(DISPATCHERS))) if moe else [KNOB["dispatcher"].code(framework.dispatcher)],
        a2a_overlap=[0, 1] if moe else [framework.a2a_overlap],
        # activation offload is searched (with recompute=none: the legality table); optimizer offload is never faster
        # (the host's Adam streams through DRAM at a fraction of HBM's rate), so the planner tries it only when
        # nothing fits without it (planner.plan); fp8 weights are never slower nor larger, so an fp8 run takes
        # them where the stack offers them
        offload_act=[0, 1], offload_opt=[0], fp8_param=[0, 1] if train.precision == "fp8" else [0],
        # a partial activation offload (``partial_offload``: the planner's second pass, when nothing fits
        # without it): every layer (0), or a quarter, half or three quarters of them
        offload_layers=[0] + (sorted({model.num_layers * k // 4 for k in (1, 2, 3)} - {0}) if partial_offload else []),
        # 16-bit gradients trade the fp32 reduction's precision for memory: the planner takes them only when
        # nothing fits without them (planner.plan), as Megatron-Bridge's performance configs do
        grad_bf16=[0],
        # hybrid sharding: 1 here; ``Space.of`` adds each mesh shape's one hybrid degree (``hybrid_degree``)
        dp_replicate=[1],
        # context parallelism's exchange: the stack's default (``Framework.cp_comm``), not searched
        cp_comm=[KNOB["cp_comm"].code_of_printed(framework.cp_comm)],
        # a tiled loss where the stack offers one (MaxText): whole, or in 8 chunks as MaxText's own v4 recipes set
        # it (configs/tpu/v4/22b.sh, 52b.sh: num_vocab_tiling=8); the stacks that offer only 1 keep it
        vocab_tiles=[1, 8],
        cp_a2a=[1],  # hierarchical CP is a stated choice (its a2a size), not searched
    )
    for key, allowed in framework.offers.items():  # each candidate's code in its printed spelling (the knob table's)
        cands[key] = [v for v in cands[key] if KNOB[key].printed_of_code(v) in allowed] or cands[key][:1]
    for knob in KNOBS:  # a knob the space does not search (a new row of the table): its default, or its pin
        if knob.name not in cands and knob.kind is not KnobKind.SPLIT and knob.name != "dp":
            cands[knob.name] = [knob.default_code]
    cands["fp8_param"] = cands["fp8_param"][-1:]  # on where offered (never slower nor larger)
    if cands["offload_act"] == [0]:  # no activation offload in this stack: no partial one either
        cands["offload_layers"] = [0]
    if moe and len(cands["dispatcher"]) == len(DISPATCHERS):  # every dispatcher offered: price the fastest
        cands["dispatcher"] = [BEST_DISPATCHER]
    for k, v in fixed.items():
        if k not in ("dp", "layer_split"):
            cands[k] = [KNOB[k].code_of_printed(v)]
    return cands


# the module set the planner tries besides none/selective/full where the stack has Megatron-Core's recompute
# modules: for MoE layers the Model Zoo's recipe (norms and the experts' activation function)
MOE_RECOMPUTE_MODULES = "layernorm+moe_act"


def recompute_candidates(model: ModelSpec, framework) -> list[int]:
    codes = [int(Recompute.NONE), int(Recompute.SELECTIVE), int(Recompute.FULL)]
    offered = framework.recompute_modules
    wanted = MOE_RECOMPUTE_MODULES.split("+")
    if model.moe is not None and (offered is None or all(m in offered for m in wanted)):
        codes.append(recompute_code(MOE_RECOMPUTE_MODULES))
    return codes


def legal_mask(model: ModelSpec, train: TrainSpec, devices: int, S: StrategyBatch) -> np.ndarray:
    """Vectorized ``check_strategy``: True where every rule of the legality table holds."""
    return legal_rows(cast(Cols, S), RuleJob(model, train, devices))  # a batch reads as a mapping of its columns


class _Cross(Mapping[str, np.ndarray]):
    """Cartesian product of two column sets (every row of a with every row of b, b's column where both have
    one), a column built only when read (the rules read a few); ``where`` gathers the rows kept straight from
    a and b (row r is a's row r // len(b) with b's row r % len(b): the same values)."""

    def __init__(self, a: dict[str, np.ndarray], b: dict[str, np.ndarray]):
        self.a, self.b = a, b
        self.built: dict[str, np.ndarray] = {}
        self.na, self.nb = len(next(iter(a.values()))), len(next(iter(b.values())))

    def __getitem__(self, k: str) -> np.ndarray:
        if k not in self.built:
            self.built[k] = np.tile(self.b[k], self.na) if k in self.b else np.repeat(self.a[k], self.nb)
        return self.built[k]

    def __contains__(self, k) -> bool:
        return k in self.b or k in self.a

    def __iter__(self):
        return iter({**self.a, **self.b})

    def __len__(self) -> int:
        return len({**self.a, **self.b})

    def where(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        rows = np.flatnonzero(mask)
        of_a, of_b = rows // self.nb, rows % self.nb
        out = {k: gather(v, of_a) for k, v in self.a.items()}
        out.update({k: gather(v, of_b) for k, v in self.b.items()})
        return out


def _grid(**values) -> dict[str, np.ndarray]:
    grids = np.meshgrid(*[np.asarray(v, dtype=np.int64) for v in values.values()], indexing="ij")
    return {k: g.ravel() for k, g in zip(values, grids, strict=True)}


def _where(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    rows = np.flatnonzero(mask)  # the mask read once, not once per column
    return {k: gather(v, rows) for k, v in cols.items()}


def hybrid_degree(cols: Cols, scale_up_domain: int) -> np.ndarray:
    """The hybrid-sharding degree that keeps each mesh shape's ZeRO shard group inside one scale-up domain (node
    or slice): the domains its dp x cp group spans (the group, dp*cp ranks of stride tp, fills a run of
    dp*cp*tp consecutive ranks: ``asap.spec.placement``), 1 where that run fits one domain or does not tile
    domains evenly. E.g. 8 nodes of 8, tp=2, cp=1, dp=32: a run of 64 ranks over 8 nodes, so dp_replicate=8
    (shard groups of 4 ranks x tp 2 within a node, replicas across nodes)."""
    run = cols["dp"] * cols["cp"] * cols["tp"]
    domain = max(1, scale_up_domain)
    return np.where(run % domain == 0, run // domain, 1)


def with_hybrid(mesh: dict[str, np.ndarray], scale_up_domain: int, cands: dict[str, list],
                framework: Framework, pinned: bool = False) -> dict[str, np.ndarray]:
    """The mesh shapes with their ``dp_replicate`` column: the candidate (1, or the one ``--fix`` pins) for
    each, and, unless pinned, each shape whose dp x cp group spans several domains once more right after it
    with its ``hybrid_degree`` (hybrid sharding beats sharding over the network where the replicas' all-reduce
    of a shard moves less than the ZeRO collectives across domains; the estimate decides), when the stack
    shards hybrid with a ZeRO stage still in the space (``Framework.hsdp_zero``). The legality rules then
    drop the degrees that do not divide dp (or edp)."""
    ones = np.ones(len(mesh["tp"]), dtype=np.int64)
    degree = hybrid_degree(mesh, scale_up_domain)
    if pinned or not set(cands["zero"]) & set(framework.hsdp_zero) or not (degree > 1).any():
        return {**mesh, "dp_replicate": ones * cands["dp_replicate"][0]}
    copies = np.where(degree > 1, 2, 1)
    rows = np.repeat(np.arange(len(ones)), copies)
    second = np.r_[False, rows[1:] == rows[:-1]]  # a shape's hybrid copy, right after it
    out = {k: v[rows] for k, v in mesh.items()}
    out["dp_replicate"] = np.where(second, degree[rows], 1)
    return out


def redundant_rows(cols: Cols, fixed: dict[str, Any]) -> np.ndarray:
    """Spellings that are legal but never better than another one kept in the space (unless pinned): sp off
    when tp > 1 (SP only removes replicated work and memory), a schedule name without a pipeline, a non-
    interleaved (or zero-bubble) schedule with chunks, GPipe (1F1B's time with more memory), expert TP above tp."""
    n = len(next(iter(cols.values())))
    drop = np.zeros(n, dtype=bool)
    if "sp" in cols and "sp" not in fixed and cols["sp"].max(initial=0) == 1:
        drop |= cols["sp"] != (cols["tp"] > 1)
    if "schedule" in cols and "schedule" not in fixed:
        s, pp, vpp = cols["schedule"], cols["pp"], cols["vpp"]
        drop |= (pp == 1) & (s != Schedule.ONE_F_ONE_B)
        drop |= (vpp > 1) & (s != Schedule.INTERLEAVED) & (s != Schedule.ZB)  # looped zero bubble: its own
        drop |= s == Schedule.GPIPE
    if "etp" in cols and "etp" not in fixed:
        drop |= cols["etp"] > cols["tp"]
    return drop


def overlap_pays(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Where the expert all-to-all overlap can pair micro-batches (a pipeline, not GPipe, no full recompute:
    cost.estimate.expert_overlap) it only hides traffic, so the switch is on; elsewhere it changes nothing
    and keeps the stack's default, off."""
    return ((cols["pp"] > 1) & (cols["schedule"] != Schedule.GPIPE)
            & (cols["recompute"] != Recompute.FULL)).astype(np.int64)


def enumerate_space(model: ModelSpec, devices: int, scale_up_domain: int, train: TrainSpec,
                    fixed: dict[str, Any] | None = None,
                    framework: Framework = FRAMEWORKS["megatron"], priced_for: Any = None) -> StrategyBatch:
    """Every legal strategy with the ``fixed`` keys pinned; empty batch if none: the whole space as one block
    (``Space.blocks`` yields it piece by piece); ``priced_for``: the job, to name a free dispatcher per row as
    ``plan`` does (``Space.resolve_dispatcher``)."""
    space = Space.of(model, devices, scale_up_domain, train, fixed, framework, priced_for=priced_for)
    return space.block(np.arange(space.n_mesh))[0]


def chunk_order(n_chunks: int) -> list[int]:
    """0..n-1 in bit-reversed order (0, n/2, n/4, 3n/4, ...): a search stopped by its time limit has priced
    pieces spread over the whole space (its mesh shapes come in order), not only its first shapes."""
    bits = max(n_chunks - 1, 1).bit_length()
    return sorted(range(n_chunks), key=lambda k: int(format(k, f"0{bits}b")[::-1], 2))


FIRST_BLOCK_MESH = 8  # mesh shapes in the first block (a sample); later blocks are sized from the rows per shape seen
PEAK_ROWS_PER_BLOCK_ROW = 4  # a block's joins hold at most about this many rows per row it yields


@dataclass
class Space:
    """The legal mesh shapes (tp, pp, cp and dp columns) and the per-key candidates the inner joins cross each
    with: the space, in its order, is ``block(rows)`` over all the mesh rows, so a block of mesh rows is a
    contiguous run of it and the full product never materialises.

    Built by joining per-concern grids and pruning after each join (mesh shape, then micro-batch, then the
    pipeline schedule, then expert placement, then recompute/ZeRO)."""

    model: ModelSpec
    train: TrainSpec
    devices: int
    fixed: dict[str, Any]
    framework: Framework
    cands: dict[str, list]
    free_overlap: bool
    mesh: dict[str, np.ndarray]
    job: RuleJob  # what the stack's rules (``asap.spec.stack_rules``) read besides the strategy
    # the job the rows are priced for, where given (``Space.of``'s ``priced_for``): a free dispatcher
    # (``BEST_DISPATCHER``) is then named in each row (``resolve_dispatcher``)
    priced_for: Any = None

    @classmethod
    def of(cls, model: ModelSpec, devices: int, scale_up_domain: int, train: TrainSpec,
           fixed: dict[str, Any] | None = None, framework: Framework = FRAMEWORKS["megatron"],
           partial_offload: bool = False, priced_for: Any = None) -> "Space":
        fixed = dict(fixed or {})
        for k in fixed:
            if k not in KEYS:
                raise AsapError(f"fix.{k}", f"unknown key (known: {', '.join(KEYS)})")
        c = candidate_values(model, devices, scale_up_domain, train, fixed, framework, partial_offload)
        free_overlap = "a2a_overlap" not in fixed and len(c["a2a_overlap"]) > 1
        if free_overlap:
            c["a2a_overlap"] = [0]  # decided per row once schedule and recompute are known (overlap_pays)
        cols = _grid(tp=c["tp"], pp=c["pp"], cp=c["cp"])
        cols = _where(cols, devices % (cols["tp"] * cols["pp"] * cols["cp"]) == 0)
        cols["dp"] = devices // (cols["tp"] * cols["pp"] * cols["cp"])
        cp_comm = KNOB["cp_comm"]
        assert cp_comm.inert is not None  # where it exchanges nothing (cp=1): the default's code
        cols["cp_comm"] = np.where(cp_comm.inert(cols), cp_comm.default_code, c["cp_comm"][0])
        if "dp" in fixed:
            cols = _where(cols, cols["dp"] == int(fixed["dp"]))
        cols = with_hybrid(cols, scale_up_domain, c, framework, "dp_replicate" in fixed)
        job = RuleJob(model, train, devices, domains_of(devices, scale_up_domain), framework)
        cols = _where(cols, legal_rows(cols, job) & runnable_rows(cols, framework.name, job))
        return cls(model, train, devices, fixed, framework, c, free_overlap, cols, job, priced_for)

    @property
    def n_mesh(self) -> int:
        return len(self.mesh["tp"])

    def block(self, rows: np.ndarray) -> tuple[StrategyBatch, np.ndarray, int]:
        """The space's rows of the mesh rows ``rows`` (ascending), in the space's order: (the strategies, each
        one's mesh row, the most rows the joins held at once)."""
        c, fixed = self.cands, self.fixed
        cols = {k: gather(v, rows) for k, v in self.mesh.items()}
        cols["_mesh"] = np.asarray(rows, dtype=np.int64)
        joins = (dict(sp=c["sp"]), dict(mbs=c["mbs"]), dict(vpp=c["vpp"], schedule=c["schedule"]),
                 dict(ep=c["ep"], etp=c["etp"], dispatcher=c["dispatcher"], a2a_overlap=c["a2a_overlap"]),
                 dict(recompute=c["recompute"], zero=c["zero"], offload_act=c["offload_act"],
                      offload_opt=c["offload_opt"], fp8_param=c["fp8_param"], offload_layers=c["offload_layers"],
                      grad_bf16=c["grad_bf16"]))
        covered = set(cols) | {k for values in joins for k in values}
        joins[-1].update({k: v for k, v in c.items() if k not in covered})  # knobs searched nowhere above
        peak = len(rows)
        for values in joins:
            cross = _Cross(cols, _grid(**values))
            peak = max(peak, cross.na * cross.nb)
            keep = (legal_rows(cross, self.job, only_new=tuple(values))
                    & runnable_rows(cross, self.framework.name, self.job, only_new=tuple(values))
                    & ~redundant_rows(cross, fixed))
            cols = cross.where(keep)
            if "dispatcher" in values:
                cols["dispatcher"] = self.resolve_dispatcher(cols)
        if self.free_overlap:  # on where it pairs micro-batches, the stack's default (off) where it changes nothing
            cols["a2a_overlap"] = overlap_pays(cols)  # and off where the stack cannot run it
            runs = runnable_rows(cols, self.framework.name, self.job, only_new=("a2a_overlap",))
            cols["a2a_overlap"] = np.where(runs, cols["a2a_overlap"], 0)
        mesh = cols.pop("_mesh")
        # Any: typed arrays would be matched against layer_splits too (the default split table stays)
        arrays: dict[str, Any] = {k: np.ascontiguousarray(v, dtype=np.int64) for k, v in cols.items()}
        S = StrategyBatch(**arrays)
        if "layer_split" in fixed:
            keep = np.nonzero(S.pp * S.vpp == len(fixed["layer_split"]))[0]
            S, mesh = _with_layer_split(S, self.model, fixed["layer_split"]), mesh[keep]
        return S, mesh, peak

    def resolve_dispatcher(self, cols: dict[str, np.ndarray]) -> np.ndarray:
        """The rows' dispatchers, a free one (``BEST_DISPATCHER``) named, where the space knows the job it is
        priced for, as the fastest dispatch the stack runs on that row (``asap.cost.communication.
        moe_dispatch_table_s``, the table ``layer_comm`` prices; equal times: the first in ``DISPATCHERS``' order,
        as its argmin; a dispatcher the stack's rules refuse with the row's pinned keys, e.g. allgather under a
        pinned expert overlap, is passed over). So every row's memory is its dispatcher's (DeepEP's buffers) and
        ``estimate`` of the row prices it the same."""
        free = cols["dispatcher"] == BEST_DISPATCHER
        if self.priced_for is None or not free.any():
            return cols["dispatcher"]
        from types import SimpleNamespace

        from asap.cost.communication import moe_dispatch_table_s

        table = moe_dispatch_table_s(self.priced_for, SimpleNamespace(**{"zero": 0, **cols}))
        for code in range(len(DISPATCHERS)):  # a dispatcher the stack refuses on a row is never the fastest
            named = {**cols, "dispatcher": np.full(len(free), code, dtype=np.int64)}
            table[code] = np.where(runnable_rows(named, self.framework.name, self.job, only_new=("dispatcher",)),
                                   table[code], np.inf)
        return np.where(free & np.isfinite(table.min(axis=0)), np.argmin(table, axis=0), cols["dispatcher"])

    def blocks(self, target_rows: int) -> Iterator[tuple[np.ndarray, StrategyBatch, np.ndarray]]:
        """The space in blocks of mesh rows: (the mesh rows, their strategies, each one's mesh row). The first
        block, FIRST_BLOCK_MESH mesh rows spread over the space, samples the rows per mesh shape; the other mesh
        rows, in order, are cut into runs of
        about ``target_rows`` rows at that rate, taken in bit-reversed order (``chunk_order``: any prefix of
        the blocks is spread over the space); a run goes in blocks of about ``target_rows`` rows (and joins
        of at most PEAK_ROWS_PER_BLOCK_ROW times that) at the rate seen so far. Contiguous mesh rows price
        faster together (similar pipelines: few representative devices per chunk)."""
        seen = np.zeros(3)  # mesh rows, rows, join rows

        def block(rows: np.ndarray):
            S, mesh, peak = self.block(rows)
            seen[:] += (len(rows), len(S), peak)
            return rows, S, mesh

        def take() -> int:
            per_mesh, join_per_mesh = max(seen[1] / seen[0], 1.0), max(seen[2] / seen[0], 1.0)
            return int(max(1, min(target_rows / per_mesh, PEAK_ROWS_PER_BLOCK_ROW * target_rows / join_per_mesh)))

        if not self.n_mesh:
            return
        first = np.sort(chunk_order(self.n_mesh)[:FIRST_BLOCK_MESH])
        yield block(first)
        left = np.ones(self.n_mesh, dtype=bool)
        left[first] = False
        rest = np.flatnonzero(left)  # np.setdiff1d's rows, without its bare np.unique (numpy.ma's import)
        run = take()
        starts = range(0, len(rest), run)
        for k in chunk_order(len(starts)) if len(starts) else []:
            lo, hi = starts[k], min(starts[k] + run, len(rest))
            while lo < hi:
                rows = rest[lo:min(hi, lo + take())]
                lo += len(rows)
                yield block(rows)


def _with_layer_split(S: StrategyBatch, model: ModelSpec, split: tuple[int, ...]) -> StrategyBatch:
    """Pin a layer split: only shapes with pp * vpp = len(split) keep it."""
    from asap.spec.layout import check_layer_split

    keep = np.nonzero(S.pp * S.vpp == len(split))[0]
    S = S.take(keep)
    if len(S):
        check_layer_split(split, model.num_layers, len(split), "fix.layer_split")
    return StrategyBatch(**{k: S[k] for k in S.keys() if k != "split"}, split=np.ones(len(S), dtype=np.int64),
                         layer_splits=((), split))
