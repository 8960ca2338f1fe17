"""The space of legal strategies for a model, a device count and a batch, as one StrategyBatch.

Built as a Cartesian product of per-key candidate values (numpy index grids), then filtered by vectorized
legality masks that mirror ``asap.spec.strategy.check_strategy`` rule for rule (tests check they agree).
Keys the caller fixes are pinned to one value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asap.cost.batch import RECOMPUTE_CODE, SCHEDULE_CODE, StrategyBatch
from asap.errors import AsapError
from asap.spec.model import ModelSpec
from asap.spec.strategy import KEYS
from asap.spec.train import TrainSpec


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_values(model: ModelSpec, devices: int, devices_per_node: int, train: TrainSpec,
                     fixed: dict[str, Any]) -> dict[str, list]:
    """Per-key candidates. Free TP stays inside a node (TP across nodes is never faster on any catalog part)."""
    divs = _divisors(devices)
    tp = [d for d in divs if d <= devices_per_node and model.num_attention_heads % d == 0]
    pp = [d for d in divs if d <= model.num_layers]
    cp = [d for d in divs if d <= 32 and train.seq_len % (2 * d) == 0] or [1]
    vpp = list(range(1, 9))
    mbs = [b for b in (1, 2, 4, 8, 16, 32) if b <= train.global_batch]
    if model.moe is not None:
        ep = [d for d in _divisors(model.moe.num_experts) if d <= devices]
        etp = [d for d in (1, 2, 4, 8) if d <= devices_per_node]
    else:
        ep, etp = [1], [1]
    cands: dict[str, list] = dict(
        tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep, etp=etp, mbs=mbs,
        recompute=list(RECOMPUTE_CODE.values()), zero=[0, 1, 2, 3], sp=[0, 1],
        schedule=list(SCHEDULE_CODE.values()),
    )
    for k, v in fixed.items():
        if k == "recompute":
            cands[k] = [RECOMPUTE_CODE[v]]
        elif k == "schedule":
            cands[k] = [SCHEDULE_CODE[v]]
        elif k != "dp":
            cands[k] = [int(v)]
    return cands


def legal_mask(model: ModelSpec, train: TrainSpec, devices: int, S: StrategyBatch) -> np.ndarray:
    """Vectorized ``check_strategy``: True where every rule holds."""
    ok = S.dp * S.tp * S.pp * S.cp == devices
    ok &= (model.num_attention_heads % S.tp == 0) & (model.ffn_hidden_size % S.tp == 0)
    if model.mla is None:
        ok &= model.num_kv_heads % S.tp == 0
    ok &= ~((S.sp == 1) & (S.tp == 1))
    ok &= S.pp <= model.num_layers
    vpp_ok = (S.pp > 1) & np.isin(S.schedule, (SCHEDULE_CODE["interleaved"], SCHEDULE_CODE["zb"])) & (
        S.pp * S.vpp <= model.num_layers + 2)
    ok &= np.where(S.vpp > 1, vpp_ok, S.schedule != SCHEDULE_CODE["interleaved"])
    ok &= train.global_batch % (S.dp * S.mbs) == 0
    m = train.global_batch // np.maximum(S.dp * S.mbs, 1)
    ok &= ~((S.pp > 1) & (S.vpp > 1) & (m % S.pp != 0))
    ok &= ~((S.cp > 1) & (train.seq_len % (2 * S.cp) != 0))
    if model.moe is None:
        ok &= (S.ep == 1) & (S.etp == 1)
    else:
        ok &= model.moe.num_experts % S.ep == 0
        ok &= (S.tp * S.cp * S.dp) % (S.etp * S.ep) == 0
        ok &= model.moe.expert_ffn_hidden_size % S.etp == 0
    return ok


def _cross(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Cartesian product of two column sets (every row of a with every row of b)."""
    na = len(next(iter(a.values())))
    nb = len(next(iter(b.values())))
    out = {k: np.repeat(v, nb) for k, v in a.items()}
    out.update({k: np.tile(v, na) for k, v in b.items()})
    return out


def _grid(**values) -> dict[str, np.ndarray]:
    grids = np.meshgrid(*[np.asarray(v, dtype=np.int64) for v in values.values()], indexing="ij")
    return {k: g.ravel() for k, g in zip(values, grids)}


def _where(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in cols.items()}


def enumerate_space(model: ModelSpec, devices: int, devices_per_node: int, train: TrainSpec,
                    fixed: dict[str, Any] | None = None) -> StrategyBatch:
    """Every legal strategy with the ``fixed`` keys pinned; empty batch if none.

    Built by joining per-concern grids and pruning after each join (mesh shape, then micro-batch, then the
    pipeline schedule, then expert placement, then recompute/ZeRO), so the full product never materialises.
    Redundant or dominated spellings are dropped unless the caller pins the key: a schedule without a pipeline,
    sp off when tp > 1, GPipe (1F1B's time with more memory), etp above tp.
    """
    fixed = dict(fixed or {})
    for k in fixed:
        if k not in KEYS:
            raise AsapError(f"fix.{k}", f"unknown key (known: {', '.join(KEYS)})")
    c = candidate_values(model, devices, devices_per_node, train, fixed)
    gb = train.global_batch
    cols = _grid(tp=c["tp"], pp=c["pp"], cp=c["cp"])
    cols = _where(cols, devices % (cols["tp"] * cols["pp"] * cols["cp"]) == 0)
    cols["dp"] = devices // (cols["tp"] * cols["pp"] * cols["cp"])
    if "dp" in fixed:
        cols = _where(cols, cols["dp"] == int(fixed["dp"]))
    sp = _grid(sp=c["sp"])
    cols = _cross(cols, sp)
    if "sp" not in fixed:
        cols = _where(cols, cols["sp"] == (cols["tp"] > 1))
    cols = _cross(cols, _grid(mbs=c["mbs"]))
    cols = _where(cols, gb % (cols["dp"] * cols["mbs"]) == 0)
    cols = _cross(cols, _grid(vpp=c["vpp"], schedule=c["schedule"]))
    m = gb // (cols["dp"] * cols["mbs"])
    pipe_ok = np.where(cols["vpp"] > 1,
                       (cols["pp"] > 1) & (cols["pp"] * cols["vpp"] <= model.num_layers + 2) & (m % cols["pp"] == 0)
                       & np.isin(cols["schedule"], (SCHEDULE_CODE["interleaved"], SCHEDULE_CODE["zb"])),
                       cols["schedule"] != SCHEDULE_CODE["interleaved"])
    if "schedule" not in fixed:
        pipe_ok &= ~((cols["pp"] == 1) & (cols["schedule"] != SCHEDULE_CODE["1f1b"]))
        pipe_ok &= ~((cols["vpp"] > 1) & (cols["schedule"] != SCHEDULE_CODE["interleaved"]))
        pipe_ok &= cols["schedule"] != SCHEDULE_CODE["gpipe"]
    cols = _where(cols, pipe_ok)
    cols = _cross(cols, _grid(ep=c["ep"], etp=c["etp"]))
    if model.moe is not None:
        e_ok = ((model.moe.num_experts % cols["ep"] == 0)
                & ((cols["tp"] * cols["cp"] * cols["dp"]) % (cols["etp"] * cols["ep"]) == 0)
                & (model.moe.expert_ffn_hidden_size % cols["etp"] == 0))
        if "etp" not in fixed:
            e_ok &= cols["etp"] <= cols["tp"]
        cols = _where(cols, e_ok)
    cols = _cross(cols, _grid(recompute=c["recompute"], zero=c["zero"]))
    S = StrategyBatch(**{k: np.ascontiguousarray(v, dtype=np.int64) for k, v in cols.items()})
    keep = legal_mask(model, train, devices, S)
    return S.take(np.nonzero(keep)[0]) if not keep.all() else S
