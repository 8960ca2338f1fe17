"""The cluster file ``asap calibrate`` writes: the base cluster with the fitted constants (``asap.calibrate.fit``),
the accelerator's peaks raised where this machine beats them, and the ``measured`` block (the measurements, what
the written constants predict for each, the noise, the date, the versions and the machine;
``asap.spec.calibration_file.validate_measured`` reads it back).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from asap.calibrate.fit import (Fits, _band, _clean_stats, _group_fit, _host_op_from_blocks, _median_abs_rel, _merge,
                                _peak_key, _written_accelerator, fit_constants)

CALIBRATION_FORMAT = "asap-calibration/1"
NOT_MEASURED = ("inter_node_gbps", "attention_efficiency", "fp8_gemm_efficiency", "overlap_tax", "tp_overlap",
                "hbm_gb")


def build_cluster_document(base, raw: list[dict], plan: dict, nproc: int, dev: str, quick: bool) -> dict[str, Any]:
    """The cluster file's mapping: the base cluster with fitted constants, and the ``measured`` block."""
    acc, prec = base.accelerator, _peak_key(dev)
    gemm = _merge(raw, "gemm")
    memory = {d["name"]: d for d in _merge(raw, "memory")}
    host = {d["name"]: d for d in _merge(raw, "host")}
    collectives = _merge(raw, "collectives")
    sync_points = _merge(raw, "sync") if raw[0].get("sync") else []
    fits = fit_constants(base, nproc, prec, gemm, memory, host, collectives)
    # the host: the wait of a blocking call between bursts of compute (the median over group sizes)
    sync_s = statistics.median(p["time_s"] for p in sync_points) if sync_points else 0.0
    accelerator, effs = written_accelerator(acc, dev, prec, fits)
    constants = written_constants(acc, dev, fits, host, sync_s, *effs)
    blocks = [d for name, d in host.items() if name.startswith("block_")]
    host_op = fits.overhead
    if blocks:  # a real layer's operators cost more than a bare Linear's: fitted through the unit pricing
        fitted_op = _host_op_from_blocks(blocks, accelerator, constants, prec)
        host_op = {k: max(fitted_op[k], fits.overhead[k]) for k in ("value", "low", "high")}
        constants["host_op_s"] = _round(host_op["value"])
    # what the written constants predict for every point measured (the model's own error here)
    by_group, rel_err = model_errors(_written_accelerator(accelerator, constants), prec, gemm, memory, collectives,
                                     fits)
    fitted = fitted_bands(fits, host_op, host, sync_points, sync_s)
    measured = {
        "format": CALIBRATION_FORMAT,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **provenance(raw, base, dev, nproc, quick, prec),
        "gemm": [_clean_item(g, ("m", "n", "k")) for g in gemm],
        "memory": {name: _clean_item(d, ("bytes",)) for name, d in memory.items()},
        "host": _rounded(host_figures(host, fits, sync_points)),
        "collectives": [_rounded(b) for b in by_group],
        "fitted": _rounded(fitted),
        "model_median_abs_rel_error": _rounded(rel_err),
        "noise": _rounded(noise_figures(gemm, memory, host, collectives, sync_points, fitted)),
        "warnings": calibration_warnings(dev, nproc, rel_err),
        "not_measured": list(NOT_MEASURED) + ([] if fits.net else ["net_efficiency", "collective_latency_s",
                                                                   "hop_latency_s"]),
    }
    return {"accelerator": accelerator, "devices_per_node": base.devices_per_node, "nodes": base.nodes,
            "scale_up_domain": base.scale_up_domain, "efficiency": constants, "measured": measured}


def provenance(raw: list[dict], base, dev: str, nproc: int, quick: bool, prec: str) -> dict[str, Any]:
    """The measured block's versions, machine and setup (the keys between ``date`` and ``gemm``)."""
    import numpy as np

    from asap.calibrate.check import machine_identity
    from asap.version import __version__

    info = raw[0].get("info", {})
    return {"versions": {"asap": __version__, "python": platform.python_version(), "numpy": np.__version__,
                         **info.get("versions", {})},
            "machine": {**machine_identity(), **info.get("machine", {})},
            "base_cluster": base.name or base.accelerator.name, "device": dev,
            "backend": "nccl" if dev == "cuda" else "gloo", "processes": nproc,
            "threads_per_process": int(raw[0].get("threads", 1)), "quick": quick, "precision": prec}


def written_accelerator(acc, dev: str, prec: str, fits: Fits) -> tuple[dict[str, Any], tuple[float, float, float]]:
    """The written accelerator, whose peaks stay nominal unless this machine beats them (then the peak is the
    measured figure and the efficiency 1), and the (gemm, hbm, net) efficiencies written with it."""
    peaks = dict(acc.peak_tflops)
    eff_gemm = fits.gemm_efficiency
    if eff_gemm > 1.0:
        raised = eff_gemm * (acc.peak_flops(prec) / 1e12)
        for key in (("fp32", "bf16", "fp16") if dev == "cpu" else ("bf16", "fp16")):
            if key in peaks or dev == "cpu":
                peaks[key] = raised
        eff_gemm = 1.0
    hbm_gbps, eff_hbm = acc.hbm_gbps, fits.hbm["time"]
    if eff_hbm > 1.0:
        hbm_gbps, eff_hbm = eff_hbm * acc.hbm_gbps, 1.0
    intra, eff_net = acc.intra_node_gbps, acc.efficiency.net_efficiency
    if fits.net:
        eff_net = fits.net["busbw_gbps"]["value"] / intra
        if eff_net > 1.0:
            intra, eff_net = fits.net["busbw_gbps"]["value"], 1.0
    accelerator = {"name": _calibrated_name(acc.name), "family": acc.family,
                   "peak_tflops": {k: _round(v) for k, v in peaks.items()}, "hbm_gb": acc.hbm_gb,
                   "hbm_gbps": _round(hbm_gbps), "intra_node_gbps": _round(intra),
                   "inter_node_gbps": acc.inter_node_gbps, "devices_per_node": acc.devices_per_node,
                   "scale_up_domain": acc.scale_up_domain, "interconnect": acc.interconnect}
    return accelerator, (eff_gemm, eff_hbm, eff_net)


def written_constants(acc, dev: str, fits: Fits, host: dict[str, dict], sync_s: float, eff_gemm: float,
                      eff_hbm: float, eff_net: float) -> dict[str, float]:
    """The efficiency constants written: the fitted ones (on a CPU the per-operator cost is the host's alone, no
    device launch gap), the DTensor extras, and a base cluster file's own overrides of what was not measured."""
    from asap.spec.hardware import EFFICIENCY_KEYS, FAMILIES

    fam = acc.efficiency
    dtensor, functional = host.get("dtensor_op_extra"), host.get("functional_call_extra")
    constants = {"gemm_efficiency": eff_gemm, "gemm_half_dim": fits.gemm_half_dim, "hbm_efficiency": eff_hbm,
                 "kernel_overhead_s": 0.0 if dev == "cpu" else fits.overhead["value"],
                 "host_op_s": fits.overhead["value"], "sync_s": sync_s,
                 **({"dtensor_op_s": dtensor["time_s"]} if dtensor else {}),
                 **({"dtensor_call_s": functional["time_s"]} if functional else {})}
    net = fits.net
    if net:
        constants.update(net_efficiency=eff_net, collective_latency_s=net["collective_latency_s"]["value"])
        if net["hop_latency_s"]["measured"]:
            constants["hop_latency_s"] = net["hop_latency_s"]["value"]
    family_default = FAMILIES.get(acc.family)
    for key in EFFICIENCY_KEYS:  # a base cluster file's own overrides of what was not measured carry over
        val = getattr(fam, key)
        if key not in constants and family_default is not None and val != getattr(family_default, key):
            constants[key] = val
    return {k: _round(v) for k, v in constants.items()}


def model_errors(written, prec: str, gemm: list[dict], memory: dict[str, dict], collectives: list[dict],
                 fits: Fits) -> tuple[list[dict], dict[str, float]]:
    """Each point's ``model_s`` under the written constants (written into it), the per-group lines of the
    collectives, and the median relative error of the model per kind of point."""
    from dataclasses import replace

    import numpy as np

    from asap.cost import collectives as coll
    from asap.cost import roofline

    m, n, k = (np.array([g[d] for g in gemm], dtype=float) for d in "mnk")
    for point, t in zip(gemm, roofline.gemm_time_s(written, prec, m, n, k), strict=True):
        point["model_s"] = float(t)
    for mem in memory.values():
        mem["gbps"] = mem["bytes"] / mem["time_s"] / 1e9
        mem["model_s"] = float(roofline.elementwise_time_s(written, mem["bytes"]))
    by_group = []
    if collectives:
        cl = replace(fits.fit_cluster, accelerator=written)
        for c in collectives:
            f = coll.all_reduce_s if c["op"] == "all_reduce" else coll.all_gather_s
            c["model_s"] = float(f(cl, float(c["bytes"]), c["group"], 1))
        for op in ("all_reduce", "all_gather", "broadcast"):
            for g in fits.groups:
                pts = [c for c in collectives if c["op"] == op and c["group"] == g]
                if pts:
                    by_group.append(_group_fit(op, g, pts))
    rel_err = {"gemm": _median_abs_rel([(g["model_s"], g["time_s"]) for g in gemm]),
               "memory": _median_abs_rel([(d["model_s"], d["time_s"]) for d in memory.values()])}
    if collectives:
        rel_err["collectives"] = _median_abs_rel([(c["model_s"], c["time_s"]) for c in collectives])
    return by_group, rel_err


def fitted_bands(fits: Fits, host_op: dict, host: dict[str, dict], sync_points: list[dict],
                 sync_s: float) -> dict[str, Any]:
    dtensor, functional = host.get("dtensor_op_extra"), host.get("functional_call_extra")
    fitted = {"kernel_overhead_s": fits.overhead, "host_op_s": host_op, "hbm_gbps": fits.hbm_gbps, **fits.gemm,
              **fits.net}
    if dtensor:
        fitted["dtensor_op_s"] = _band(dtensor["time_s"], dtensor["low_s"], dtensor["high_s"])
    if functional:
        fitted["dtensor_call_s"] = _band(functional["time_s"], functional["low_s"], functional["high_s"])
    if sync_points:
        fitted["sync_s"] = _band(sync_s, min(p["low_s"] for p in sync_points), max(p["high_s"] for p in sync_points))
    return fitted


NOISE_METHOD = ("a timing is the median over ranks of each rank's median over its calls (collectives on CPU, calls "
                "of 20 us or more, timed one by one; compute and CUDA as loop means); low/high: the fastest and "
                "the slowest repeat (a loop of calls) of any rank; rel_spread = (high - low) / median; a fitted "
                "figure's low/high: the fit redone on every point's low and on every point's high; mean_s and tail "
                "(share of calls over 3x the median): the stalls a median leaves out")


def noise_figures(gemm: list[dict], memory: dict[str, dict], host: dict[str, dict], collectives: list[dict],
                  sync_points: list[dict], fitted: dict[str, Any]) -> dict[str, Any]:
    noise: dict[str, Any] = {"method": NOISE_METHOD,
             "median_rel_spread": {
                 "gemm": statistics.median(g["rel_spread"] for g in gemm),
                 "memory": statistics.median(d["rel_spread"] for d in memory.values()),
                 "host": statistics.median(d["rel_spread"] for d in host.values()),
                 **({"collectives": statistics.median(c["rel_spread"] for c in collectives)} if collectives else {})},
             "fitted_rel_range": {k: (v["high"] - v["low"]) / v["value"] for k, v in fitted.items() if v["value"]}}
    if sync_points:
        noise["median_rel_spread"]["sync"] = statistics.median(p["rel_spread"] for p in sync_points)
    return noise


def host_figures(host: dict[str, dict], fits: Fits, sync_points: list[dict]) -> dict[str, Any]:
    dtensor, functional = host.get("dtensor_op_extra"), host.get("functional_call_extra")
    return {"add_op_s": _clean_stats(host["tiny_add"]),
            "linear_fwd_bwd_s": _clean_stats(host["linear_fwd_bwd"]), "linear_fwd_bwd_ops": fits.ops,
            "per_op_s": dict(fits.per_op),
            **({"dtensor_op_extra_s": _clean_stats(dtensor)} if dtensor else {}),
            **({"functional_call_extra_s": _clean_stats(functional)} if functional else {}),
            "sync_wait_s": [{"group": p["group"], **_clean_stats(p)} for p in sync_points]}


def calibration_warnings(dev: str, nproc: int, rel_err: dict[str, float]) -> list[str]:
    warnings = []
    cpus = os.cpu_count() or 1
    if dev == "cpu" and nproc > cpus:
        warnings.append(f"{nproc} processes on {cpus} CPUs: devices time-share cores, so per-device figures are "
                        "shares of the machine and spread widely; groups larger than the CPU count wait on "
                        "descheduled peers")
    for key, err in rel_err.items():
        if err > 0.3:
            warnings.append(f"the cost model's formulas follow the {key} measurements only to a median "
                            f"{err:.0%} (see model_s beside each point)")
    return warnings


def _calibrated_name(name: str) -> str:
    return name if name.endswith("-calibrated") else f"{name}-calibrated"


def _clean_item(d: dict, keys: tuple[str, ...]) -> dict:
    out = {k: int(d[k]) for k in keys}
    for key in ("time_s", "low_s", "high_s", "rel_spread", "mean_s", "tail", "tflops", "gbps", "model_s", "repeats",
                "calls"):
        if key in d:
            out[key] = d[key]
    return _rounded(out)


def _round(x: float, digits: int = 4) -> float:
    """Four significant digits: the noise is well above that."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x == 0 or not math.isfinite(x):
        return x
    if isinstance(x, int):
        return x
    return float(f"{x:.{digits}g}")


def _rounded(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_rounded(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        obj = obj.item()
    return _round(obj) if isinstance(obj, float) else obj


def write_cluster_file(doc: dict[str, Any], out: Path) -> None:
    """YAML (.yaml/.yml) or JSON (.json), written whole or not at all."""
    from asap.spec.files import write_whole

    m = doc["measured"]
    if out.suffix.lower() == ".json":
        text = json.dumps(doc, indent=1) + "\n"
    else:
        import yaml

        head = (f"# asap calibrate: {m['machine'].get('hostname')} on {m['date']} "
                f"({m['device']}, {m['processes']} processes, torch {m['versions'].get('torch')}).\n"
                "# Usable as --cluster FILE; `asap calibrate --check FILE` says whether it was made on this machine.\n")
        text = head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)
    write_whole(out, text, "out")
