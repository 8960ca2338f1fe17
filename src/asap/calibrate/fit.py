"""From the workers' timings to the cost model's constants: each fitted *through the cost model's own formulas*
(``asap.cost.roofline``, ``asap.cost.collectives``, ``asap.cost.units``), the values that make them reproduce the
measured times best (least squares of log time); the fit repeated on the fastest and on the slowest repeat of
every point gives each constant's noise band (``_band``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any, Callable

from asap.calibrate.measure import block_spec


@dataclass
class Fits:
    """The constants fitted on the merged timings, each with its band (``_band``: value, low, high)."""

    ops: int  # operators of the small Linear's forward + backward
    per_op: dict[str, float]  # its time per operator: time_s, low_s, high_s
    overhead: dict[str, float]  # the host's time per operator (kernel_overhead_s)
    hbm: dict[str, float]  # hbm_efficiency fitted on the median, fastest and slowest times
    hbm_gbps: dict[str, float]  # the bandwidth achieved
    gemm_efficiency: float
    gemm_half_dim: float
    gemm: dict[str, dict[str, float]]  # gemm_tflops and gemm_half_dim bands
    net: dict[str, Any]  # busbw_gbps, collective_latency_s, hop_latency_s bands ({} without collectives)
    fit_cluster: Any  # the cluster the collectives were priced on
    groups: list[int]  # the group sizes measured


def fit_constants(base, nproc: int, prec: str, gemm: list[dict], memory: dict[str, dict], host: dict[str, dict],
                  collectives: list[dict]) -> Fits:
    """Host overhead, then memory bandwidth, then the GEMMs, then the network, each fit using the ones before."""
    acc = base.accelerator
    lin = host["linear_fwd_bwd"]
    ops = max(int(lin.get("ops") or 1), 1)
    per_op = {k: lin[k] / ops for k in ("time_s", "low_s", "high_s")}
    overhead = _band(per_op["time_s"], per_op["low_s"], per_op["high_s"])
    acc_fit = _with_eff(acc, kernel_overhead_s=overhead["value"])
    hbm, hbm_gbps = fit_memory(acc, memory["add"], overhead)
    acc_fit = _with_eff(acc_fit, hbm_efficiency=hbm["time"])
    e0, dh, gemm_bands = fit_gemm(acc, acc_fit, gemm, prec)
    acc_fit = _with_eff(acc_fit, gemm_efficiency=e0, gemm_half_dim=dh)
    fit_cluster = base.with_devices(nproc) if nproc <= base.num_devices else base
    fit_cluster = replace(fit_cluster, scale_up_domain=max(fit_cluster.scale_up_domain, nproc), measured=None)
    groups = sorted({c["group"] for c in collectives})
    net = fit_network(fit_cluster, acc, acc_fit, collectives, len(groups) > 1) if collectives else {}
    return Fits(ops=ops, per_op=per_op, overhead=overhead, hbm=hbm, hbm_gbps=hbm_gbps, gemm_efficiency=e0,
                gemm_half_dim=dh, gemm=gemm_bands, net=net, fit_cluster=fit_cluster, groups=groups)


def fit_memory(acc, add: dict, overhead: dict) -> tuple[dict[str, float], dict[str, float]]:
    """hbm_efficiency through the model's elementwise kernel (bytes / (hbm_gbps * hbm_efficiency) + overhead),
    on the median, fastest and slowest times (the fastest time: the highest bandwidth); and the bandwidth band."""
    from asap.cost import roofline

    fam = acc.efficiency

    def hbm_fit(t, a):
        (eff,) = _fit(lambda p: roofline.elementwise_time_s(_with_eff(a, hbm_efficiency=p[0]), add["bytes"]),
                      [fam.hbm_efficiency], [1e-6], [1e4], [t])
        return eff

    hbm = {key: hbm_fit(add[f"{key}_s"], _with_eff(acc, kernel_overhead_s=overhead[v]))
           for key, v in (("time", "value"), ("low", "low"), ("high", "high"))}
    return hbm, _band(*(hbm[key] * acc.hbm_gbps for key in ("time", "low", "high")))


def fit_gemm(acc, acc_fit, gemm: list[dict], prec: str) -> tuple[float, float, dict[str, dict[str, float]]]:
    """gemm_efficiency (against the peak) and gemm_half_dim through roofline.gemm_time_s; each point's TFLOP/s
    is written into it."""
    import numpy as np

    from asap.cost import roofline

    fam = acc.efficiency
    m, n, k = (np.array([g[d] for g in gemm], dtype=float) for d in "mnk")

    def gemm_fit(times):
        return _fit(lambda p: roofline.gemm_time_s(_with_eff(acc_fit, gemm_efficiency=p[0], gemm_half_dim=p[1]),
                                                   prec, m, n, k),
                    [fam.gemm_efficiency, fam.gemm_half_dim], [1e-6, 1e-2], [1e4, 1e5], times)

    e0, dh = gemm_fit([g["time_s"] for g in gemm])
    e0_fast, dh_fast = gemm_fit([g["low_s"] for g in gemm])
    e0_slow, dh_slow = gemm_fit([g["high_s"] for g in gemm])
    peak = acc.peak_flops(prec) / 1e12
    for g in gemm:
        g["tflops"] = 2.0 * g["m"] * g["n"] * g["k"] / g["time_s"] / 1e12
    return e0, dh, {"gemm_tflops": _band(e0 * peak, e0_slow * peak, e0_fast * peak),
                    "gemm_half_dim": _band(dh, dh_fast, dh_slow)}


def fit_network(fit_cluster, acc, acc_fit, collectives: list[dict], fit_hop: bool) -> dict[str, Any]:
    """net_efficiency (against intra_node_gbps), collective_latency_s and hop_latency_s through
    collectives.all_reduce_s / all_gather_s (a growth per rank, hop_latency_s, needs two group sizes at least:
    ``fit_hop``; else the family's figure is held)."""
    import numpy as np

    from asap.cost import collectives as coll

    fam = acc.efficiency
    fit_pts = [c for c in collectives if c["op"] != "broadcast"]  # the formulas price reductions and gathers
    sizes = np.array([c["bytes"] for c in fit_pts], dtype=float)
    gs = np.array([c["group"] for c in fit_pts], dtype=float)
    is_ar = np.array([c["op"] == "all_reduce" for c in fit_pts])

    def predict(p, a):
        hop = p[2] if fit_hop else fam.hop_latency_s
        cl = replace(fit_cluster, accelerator=_with_eff(a, net_efficiency=p[0], collective_latency_s=p[1],
                                                        hop_latency_s=hop))
        ar = coll.all_reduce_s(cl, sizes, gs, np.ones_like(gs))
        ag = coll.all_gather_s(cl, sizes, gs, np.ones_like(gs))
        return np.where(is_ar, ar, ag)

    def net_fit(times):
        x0 = [fam.net_efficiency, fam.collective_latency_s] + ([fam.hop_latency_s] if fit_hop else [])
        lo = [1e-6, 1e-8] + ([1e-9] if fit_hop else [])
        hi = [1e4, 10.0] + ([10.0] if fit_hop else [])
        p = _fit(lambda q: predict(q, acc_fit), x0, lo, hi, times)
        return p + ([] if fit_hop else [fam.hop_latency_s])

    mid = net_fit([per_call_s(c) for c in fit_pts])
    fast = net_fit([c["low_s"] for c in fit_pts])
    slow = net_fit([c["high_s"] for c in fit_pts])
    intra = acc.intra_node_gbps
    return {"busbw_gbps": _band(mid[0] * intra, slow[0] * intra, fast[0] * intra),
            "collective_latency_s": _band(mid[1], fast[1], slow[1]),
            "hop_latency_s": {**_band(mid[2], fast[2], slow[2]), "measured": fit_hop}}


def _stats(items: list[dict]) -> dict[str, float]:
    """One timing over the ranks that measured it. ``time_s``: the median over ranks of each rank's median over
    every call (over its repeats when the calls were not timed one by one); ``low_s``/``high_s``: the fastest and
    the slowest repeat's median of any rank (the spread a rerun can be expected within); ``mean_s`` and ``tail``
    (share of calls over 3x the median) where calls were timed one by one."""
    per_rank = [it for it in items if it.get("times_s")]
    medians = [it.get("median_s", statistics.median(it["times_s"])) for it in per_rank]
    flat = [x for it in per_rank for x in it["times_s"]]
    med = statistics.median(medians)
    out = {"time_s": med, "low_s": min(min(flat), med), "high_s": max(max(flat), med),
           "rel_spread": (max(max(flat), med) - min(min(flat), med)) / max(med, 1e-12), "repeats": len(flat),
           "calls": sum(int(it.get("calls", 0)) for it in per_rank)}
    if all("mean_s" in it for it in per_rank):
        out["mean_s"] = statistics.median(it["mean_s"] for it in per_rank)
        out["tail"] = statistics.median(it["tail"] for it in per_rank)
    return out


def _merge(raw: list[dict], section: str) -> list[dict]:
    """Item i of ``section`` over every rank that measured it: its fields, with the timings turned into stats."""
    timing = ("times_s", "median_s", "mean_s", "tail", "calls")
    out = []
    for i, item in enumerate(raw[0][section]):
        d = {k: v for k, v in item.items() if k not in timing}
        d.update(_stats([r[section][i] for r in raw if i < len(r[section])]))
        out.append(d)
    return out


def _fit(predict: Callable[[Any], Any], x0: list[float], lower: list[float], upper: list[float],
         measured) -> list[float]:
    """The parameters (positive; fitted in log space within [lower, upper]) that make ``predict`` closest to
    ``measured`` times in log (relative) terms."""
    import numpy as np
    from scipy.optimize import least_squares

    y = np.log(np.asarray(measured, dtype=float))
    lo, hi = np.log(lower), np.log(upper)
    p0 = np.clip(np.log(x0), lo + 1e-9, hi - 1e-9)

    def resid(p):
        pred = np.asarray(predict(np.exp(p)), dtype=float)
        return np.log(np.maximum(pred, 1e-30)) - y

    res = least_squares(resid, p0, bounds=(lo, hi), x_scale=1.0, method="trf")
    return [float(v) for v in np.exp(res.x)]


def _with_eff(acc, **constants):
    return replace(acc, efficiency=replace(acc.efficiency, **constants))


def _peak_key(dev: str) -> str:
    return "bf16" if dev == "cuda" else "fp32"


def _host_op_from_blocks(blocks: list[dict], accelerator: dict, constants_so_far: dict,
                         precision: str) -> dict[str, float]:
    """The host's time per operator of a real layer: each block's measured forward + backward less what the cost
    model's own unit pricing gives for its computation (``asap.cost.units``, with the constants fitted above),
    over the operators it dispatched; the median over the blocks (and over their fastest / slowest repeats)."""
    from asap.cost.batch import StrategyBatch
    from asap.cost.units import unit_times
    from asap.spec.hardware import cluster_from_dict
    from asap.spec.job import Job
    from asap.spec.layout import Unit
    from asap.spec.strategy import complete_strategy
    from asap.spec.train import TrainSpec

    cluster = cluster_from_dict({"accelerator": dict(accelerator, devices_per_node=1), "devices_per_node": 1,
                                 "nodes": 1, "efficiency": dict(constants_so_far, host_op_s=0.0, sync_s=0.0)})
    S = StrategyBatch.from_strategies([complete_strategy({"dp": 1}, 1)])
    per_op: dict[str, list[float]] = {"value": [], "low": [], "high": []}
    for b in blocks:
        train = TrainSpec(1, int(b["seq"]), precision, framework="asap")
        ut = unit_times(Job.resolve(block_spec(int(b["hidden"]), int(b["seq"])), cluster, train), S)
        compute = float(ut.parts["compute"][0, Unit.DENSE])
        for key, t in (("value", b["time_s"]), ("low", b["low_s"]), ("high", b["high_s"])):
            per_op[key].append(max(t - compute, 0.0) / max(int(b["ops"]), 1))
    return {k: statistics.median(v) for k, v in per_op.items()}


def _band(value: float, *others: float) -> dict[str, float]:
    """A fitted figure and the range of its refits on the fastest and the slowest repeats (value included)."""
    return {"value": value, "low": min(value, *others), "high": max(value, *others)}


def per_call_s(point: dict[str, Any]) -> float:
    """What a run pays per call on average: the mean over the calls timed one by one (their stalls included:
    a step waits for every one of them), else the median of the loop means."""
    return float(point.get("mean_s") or point["time_s"])


def _group_fit(op: str, g: int, pts: list[dict]) -> dict[str, Any]:
    """Latency (intercept) and bus bandwidth (slope) of one collective over one group size, NCCL's busbw
    convention: all-reduce moves 2 (g-1)/g S, all-gather (g-1)/g S of its gathered buffer S, at busbw, after a
    fixed latency; a least-squares line in relative terms (each point weighted by 1 / its time) through the
    mean time per call (``per_call_s``)."""
    import numpy as np

    factor = 2.0 * (g - 1) / g if op == "all_reduce" else (g - 1) / g
    x = np.array([factor * p["bytes"] for p in pts], dtype=float)
    t = np.array([per_call_s(p) for p in pts], dtype=float)
    w = 1.0 / t
    A = np.stack([np.ones_like(x), x], axis=1) * w[:, None]
    lat, inv_bw = np.linalg.lstsq(A, t * w, rcond=None)[0]
    if inv_bw <= 0:  # sizes too small to show a slope: all latency
        lat, inv_bw = float(np.median(t)), 0.0
    elif lat < 0:  # no visible intercept: the line through the origin
        lat, inv_bw = 0.0, float(np.sum(w * w * x * t) / np.sum(w * w * x * x))
    points = [{"bytes": int(p["bytes"]), **_clean_stats(p), "busbw_gbps": factor * p["bytes"] / per_call_s(p) / 1e9,
               "model_s": p.get("model_s")} for p in pts]
    return {"op": op, "group": int(g), "latency_s": float(lat),
            "busbw_gbps": float(1.0 / inv_bw / 1e9) if inv_bw > 0 else None, "points": points}


def predict_collective_s(entry: dict[str, Any], size_bytes: float) -> float:
    """What one ``measured.collectives`` entry's line says ``size_bytes`` takes (its latency + bytes / busbw)."""
    g = entry["group"]
    factor = 2.0 * (g - 1) / g if entry["op"] == "all_reduce" else (g - 1) / g
    bw = entry.get("busbw_gbps")
    return entry["latency_s"] + (factor * size_bytes / (bw * 1e9) if bw else 0.0)


def _written_accelerator(accelerator: dict, constants: dict):
    from asap.spec.hardware import cluster_from_dict

    return cluster_from_dict({"accelerator": accelerator, "efficiency": constants}).accelerator


def _median_abs_rel(pairs) -> float:
    return statistics.median(abs(a / b - 1.0) for a, b in pairs) if pairs else 0.0


def _clean_stats(d: dict) -> dict:
    return {k: d[k] for k in ("time_s", "low_s", "high_s", "rel_spread", "mean_s", "tail", "repeats", "calls") if k in d}
