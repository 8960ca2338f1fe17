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


def canonical_mask(S: StrategyBatch, fixed: dict[str, Any]) -> np.ndarray:
    """Drop redundant spellings of the same run: a schedule choice without a pipeline, sp off when tp > 1
    (unless the caller asked), zb only with vpp = 1, and ZeRO-2 where it is no different from ZeRO-1 here."""
    keep = np.ones(len(S), dtype=bool)
    if "schedule" not in fixed:
        keep &= ~((S.pp == 1) & (S.schedule != SCHEDULE_CODE["1f1b"]))
        keep &= ~((S.vpp > 1) & (S.schedule != SCHEDULE_CODE["interleaved"]))
    if "sp" not in fixed:
        keep &= S.sp == (S.tp > 1)
    if "etp" not in fixed:
        keep &= S.etp <= S.tp
    return keep


def enumerate_space(model: ModelSpec, devices: int, devices_per_node: int, train: TrainSpec,
                    fixed: dict[str, Any] | None = None) -> StrategyBatch:
    """Every legal strategy with the ``fixed`` keys pinned; empty batch if none."""
    fixed = dict(fixed or {})
    for k in fixed:
        if k not in KEYS:
            raise AsapError(f"fix.{k}", f"unknown key (known: {', '.join(KEYS)})")
    cands = candidate_values(model, devices, devices_per_node, train, fixed)
    order = ["tp", "pp", "cp", "vpp", "ep", "etp", "mbs", "recompute", "zero", "sp", "schedule"]
    # tp, pp, cp first and prune by the device count before the full product
    tpg, ppg, cpg = np.meshgrid(cands["tp"], cands["pp"], cands["cp"], indexing="ij")
    tpg, ppg, cpg = tpg.ravel(), ppg.ravel(), cpg.ravel()
    shape_ok = devices % (tpg * ppg * cpg) == 0
    if "dp" in fixed:
        shape_ok &= tpg * ppg * cpg * int(fixed["dp"]) == devices
    tpg, ppg, cpg = tpg[shape_ok], ppg[shape_ok], cpg[shape_ok]
    rest = [np.asarray(cands[k]) for k in order[3:]]
    grids = np.meshgrid(np.arange(len(tpg)), *[np.arange(len(r)) for r in rest], indexing="ij")
    idx = [g.ravel() for g in grids]
    cols = {"tp": tpg[idx[0]], "pp": ppg[idx[0]], "cp": cpg[idx[0]]}
    for k, r, ix in zip(order[3:], rest, idx[1:]):
        cols[k] = r[ix]
    cols["dp"] = devices // (cols["tp"] * cols["pp"] * cols["cp"])
    S = StrategyBatch(**{k: np.asarray(v, dtype=np.int64) for k, v in cols.items()})
    keep = legal_mask(model, train, devices, S) & canonical_mask(S, fixed)
    return S.take(np.nonzero(keep)[0])
