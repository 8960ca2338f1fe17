"""Calibrate a cluster file from short real runs on this machine (``asap calibrate``).

``calibrate(cluster, devices=None, out=path)`` starts ``P`` worker processes (one per device: gloo on CPU,
NCCL on CUDA GPUs) that, all at once as in a real run, time

- GEMMs ``torch.matmul`` over a grid of (m, n, k) like the ones strategies produce (fp32 on CPU, bf16 on CUDA),
- a streaming elementwise kernel (``torch.add`` of large tensors) and a copy: memory bandwidth,
- tiny operators (a 1-element ``add``; a small Linear forward + backward under autograd): host overhead per
  operator,
- ``all_reduce`` and ``all_gather`` over group sizes 2, 4, ... P and messages of 4 KiB to 16 MiB (256 MiB on
  GPUs),

each after a warm-up, as the median over repeats of a timed loop; every figure keeps its fastest and slowest
repeat (over all ranks) as its spread. The cost model's constants are then fitted *through the cost model's
own formulas* (``asap.cost.roofline``, ``asap.cost.collectives``): the values that make them reproduce the
measured times best (least squares of log time), and the fit repeated on the fastest and on the slowest
repeat of every point gives each constant's noise band. The result is a cluster file (YAML or JSON by the
extension of ``out``) that every ``--cluster`` option reads, carrying the measurements, the date, the versions
and the machine in its ``measured`` block (``asap.spec.hardware.validate_measured``).

A device on CPU is one process with ``cpu_count // P`` threads (at least one), as ``asap run`` starts them, all
P of them busy at once: the per-device figures are what a P-process run on this machine gets.

Mapping to the cost model (docs/calibrate.md): vendor peaks stay the peaks and the efficiencies absorb the
measurement (``gemm_efficiency = achieved asymptote / peak``, ``hbm_efficiency``, ``net_efficiency = bus
bandwidth / intra_node_gbps``); where this machine beats its nominal figure the peak is raised to the measured
one and the efficiency written as 1. ``collective_latency_s``, ``hop_latency_s`` (held at the family's figure
when only one group size is measured), ``gemm_half_dim`` and ``kernel_overhead_s`` are written as fitted.

Run as ``python -m asap.calibrate --worker CONFIG RANK`` it is one worker (this module imports only the
standard library at the top, so that a worker starts fast).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from asap.subprocs import kill_group, log_tail

CALIBRATION_FORMAT = "asap-calibration/1"
KIB, MIB = 1024, 1024 * 1024

# What each mode measures. GEMM dimensions: m (tokens of a micro-batch), n and k (hidden or FFN sizes divided by
# tp), the roll-off from thin to large shapes that gemm_half_dim describes. target_s: each repeat loops a call
# until it has run about this long, so that the clock's resolution and one-off stalls stay small.
PLANS: dict[tuple[str, bool], dict[str, Any]] = {
    ("cpu", False): dict(gemm_m=(128, 512, 2048), gemm_nk=(128, 512, 1024), repeats=5, target_s=0.02,
                         mem_bytes=256 * MIB, coll_bytes=tuple(4 * KIB * 4 ** i for i in range(7)), coll_repeats=5,
                         coll_target_s=0.03, coll_warmup_s=0.5),
    ("cpu", True): dict(gemm_m=(128, 1024), gemm_nk=(128, 1024), repeats=3, target_s=0.005,
                        mem_bytes=32 * MIB, coll_bytes=(4 * KIB, 64 * KIB, MIB), coll_repeats=5,
                        coll_target_s=0.01, coll_warmup_s=0.3),
    ("cuda", False): dict(gemm_m=(256, 1024, 4096, 16384), gemm_nk=(256, 1024, 4096, 8192), repeats=5,
                          target_s=0.02, mem_bytes=1024 * MIB,
                          coll_bytes=tuple(4 * KIB * 4 ** i for i in range(10)), coll_repeats=5,
                          coll_target_s=0.02, coll_warmup_s=0.2),
    ("cuda", True): dict(gemm_m=(512, 4096), gemm_nk=(512, 4096), repeats=3, target_s=0.005,
                         mem_bytes=256 * MIB, coll_bytes=(4 * KIB, MIB, 64 * MIB), coll_repeats=3,
                         coll_target_s=0.005, coll_warmup_s=0.1),
}
# Calls per repeat of a collective (when shorter than 5 ms) at least: a median over enough calls to see past the
# stalls of a shared machine.
COLL_MIN_CALLS = 20
# All processes' memory tensors together stay below this (three tensors of mem_bytes per process).
_MEM_TOTAL_BYTES = 4 * 1024 * MIB
DEFAULT_TIMEOUT_S = {False: 900.0, True: 180.0}
NOT_MEASURED = ("inter_node_gbps", "attention_efficiency", "fp8_gemm_efficiency", "overlap_tax", "tp_overlap",
                "hbm_gb")


class CalibrationFailed(RuntimeError):
    """The workers did not finish: ``kind`` is crash or timeout; ``reason`` is one line."""

    def __init__(self, kind: str, reason: str, log_tail: str = ""):
        self.kind, self.reason, self.log_tail = kind, reason, log_tail
        super().__init__(reason)


# ------------------------------------------------------------------------------------------------------------
# The driver
# ------------------------------------------------------------------------------------------------------------


def machine_calibration_path(device: str = "cpu") -> Path:
    """Where this machine's own calibration is kept (``asap calibrate`` writes a copy there): the user's data
    folder (platformdirs; ``ASAP_DATA_DIR`` overrides it), ``calibrations/<hostname>-<cpu|cuda>.yaml``."""
    import socket

    base = os.environ.get("ASAP_DATA_DIR")
    if not base:
        from platformdirs import user_data_dir

        base = user_data_dir("asap")
    return Path(base) / "calibrations" / f"{socket.gethostname()}-{device}.yaml"


def find_machine_calibration(device: str = "cpu") -> Path | None:
    """This machine's calibration if there is one and it is this machine's (``check_calibration_file``)."""
    from asap.errors import AsapError
    from asap.spec.hardware import check_calibration_file

    path = machine_calibration_path(device)
    if not path.exists():
        return None
    try:
        check_calibration_file(str(path), this_machine=True)
    except AsapError:
        return None
    return path


def calibrate(cluster: Any, devices: int | None = None, out: str | Path | None = None, quick: bool = False,
              progress: Callable[[str, int, int], None] | None = None, *, device: str = "auto",
              timeout_s: float | None = None, remember: bool = False) -> dict[str, Any]:
    """Measure this machine and write ``out`` (a cluster file); returns ``{cluster_file, measured, time_s}``.

    ``cluster``: the cluster being calibrated (a preset, a file, a mapping or a Cluster) whose accelerator
    gives the family and the nominal peaks the efficiencies are expressed against; ``devices`` overrides its
    device count (``--devices``). Processes: that count, at most 2 x cpu_count on CPU (at least 2) or the GPUs
    visible on CUDA. ``progress(label, done, total)`` is called as the workers go. ``remember`` also keeps a
    copy as this machine's calibration (``machine_calibration_path``), which the torch executor reads.
    """
    from asap.spec.hardware import load_cluster

    t0 = time.perf_counter()
    base, dev, out = check_inputs(cluster, devices, out, device)
    nproc = _processes(base, dev)
    plan = dict(PLANS[(dev, bool(quick))])
    plan["mem_bytes"] = _mem_bytes(plan["mem_bytes"], nproc)
    timeout_s = DEFAULT_TIMEOUT_S[bool(quick)] if timeout_s is None else timeout_s
    raw = _run_workers(plan, nproc, dev, timeout_s, progress)
    doc = build_cluster_document(base, raw, plan, nproc, dev, bool(quick))
    if out is not None:
        write_cluster_file(doc, out)
        load_cluster(str(out))  # what it wrote, every --cluster option reads
    if remember:
        mine = machine_calibration_path(dev)
        mine.parent.mkdir(parents=True, exist_ok=True)
        write_cluster_file(doc, mine)
    else:
        from asap.spec.hardware import cluster_from_dict

        cluster_from_dict(doc)
    return {"cluster_file": str(out) if out is not None else None, "measured": doc["measured"],
            "time_s": time.perf_counter() - t0}


def check_inputs(cluster: Any, devices: int | None, out: str | Path | None, device: str = "auto"):
    """(the cluster with ``devices`` applied, cpu or cuda, the output path): one AsapError line for bad input,
    before anything is started."""
    from asap.errors import AsapError
    from asap.spec.hardware import load_cluster

    base = load_cluster(cluster, devices=devices)
    dev = _device_for(base, device)
    if out is not None:
        out = Path(out)
        if out.suffix.lower() not in (".yaml", ".yml", ".json"):
            raise AsapError("out", f"must end in .yaml, .yml or .json, got {out.name!r}")
        if not out.parent.exists():
            raise AsapError("out", f"folder {str(out.parent)!r} does not exist")
        if out.is_dir():
            raise AsapError("out", f"{str(out)!r} is a folder")
    return base, dev, out


def _device_for(cluster, requested: str) -> str:
    from asap.errors import AsapError

    if requested not in ("auto", "cpu", "cuda"):
        raise AsapError("device", f"must be auto, cpu or cuda, got {requested!r}")
    fam = cluster.accelerator.family
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if fam == "cpu":
        if requested == "cuda":
            raise AsapError("device", f"{cluster.accelerator.name} is a CPU; cuda calibrates GPU clusters")
        return "cpu"
    if fam in ("tpu", "ascend"):
        raise AsapError("cluster.accelerator", f"{cluster.accelerator.name} is a {fam} accelerator; calibrate measures "
                                               "with torch on CPUs and CUDA GPUs only")
    if requested == "cpu" or gpus == 0:
        raise AsapError("cluster.accelerator", f"{cluster.accelerator.name} is a GPU and this machine has none "
                                               "visible: calibrate measures the machine it runs on (use --cluster "
                                               "local-cpu here, or run it on the GPUs)")
    return "cuda"


def _processes(cluster, dev: str) -> int:
    """One process per device: the cluster's count, at most 2 x cpu_count (CPU, at least 2) or the GPUs."""
    if dev == "cuda":
        import torch

        return max(1, min(cluster.num_devices, torch.cuda.device_count()))
    return max(2, min(cluster.num_devices, 2 * (os.cpu_count() or 1)))


def _mem_bytes(per_process: int, nproc: int) -> int:
    cap = _MEM_TOTAL_BYTES // (3 * nproc)
    return int(max(4 * MIB, min(per_process, cap)) // MIB * MIB)


def group_sizes(nproc: int) -> list[int]:
    """Powers of two from 2 up to the process count."""
    out, g = [], 2
    while g <= nproc:
        out.append(g)
        g *= 2
    return out


def _child_env(dev: str, nproc: int) -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1])  # the folder that holds the asap package
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONWARNINGS"] = "ignore"
    threads = max(1, (os.cpu_count() or 1) // nproc) if dev == "cpu" else 1
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def _run_workers(plan: dict, nproc: int, dev: str, timeout_s: float,
                 progress: Callable[[str, int, int], None] | None) -> list[dict[str, Any]]:
    """Start the workers in their own process groups, follow rank 0's progress, collect every rank's file;
    on a crash, a timeout or an interruption every group is killed."""

    with tempfile.TemporaryDirectory(prefix="asap-calibrate-") as tmp:
        work = Path(tmp)
        threads = max(1, (os.cpu_count() or 1) // nproc) if dev == "cpu" else 1
        cfg = {"plan": plan, "world": nproc, "device": dev, "threads": threads, "out_dir": str(work),
               "init_file": str(work / "store"), "pg_timeout_s": max(60.0, min(timeout_s, 600.0)),
               "groups": group_sizes(nproc)}
        cfg_path = work / "config.json"
        cfg_path.write_text(json.dumps(cfg))
        env = _child_env(dev, nproc)
        procs: list[subprocess.Popen] = []
        logs = []
        t_end = time.monotonic() + timeout_s
        try:
            for rank in range(nproc):
                log = open(work / f"rank{rank}.log", "w")
                logs.append(log)
                procs.append(subprocess.Popen([sys.executable, "-m", "asap.calibrate", "--worker", str(cfg_path),
                                               str(rank)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))
            last = None
            while True:
                rcs = [p.poll() for p in procs]
                bad = [(r, rc) for r, rc in enumerate(rcs) if rc not in (None, 0)]
                if bad:
                    time.sleep(0.2)  # let the first failing rank finish writing its reason
                    raise _failure(work, bad)
                if all(rc == 0 for rc in rcs):
                    break
                if time.monotonic() > t_end:
                    raise CalibrationFailed("timeout", f"no result after {timeout_s:g} s (a hang?); the workers "
                                                       "were killed", log_tail(work / "rank0.log", 30))
                if progress is not None:
                    state = _read_progress(work / "progress.json")
                    if state is not None and state != last:
                        progress(*state)
                        last = state
                time.sleep(0.05)
            if progress is not None:
                state = _read_progress(work / "progress.json")
                if state is not None:
                    progress(state[0], state[2], state[2])
            results = []
            for rank in range(nproc):
                path = work / f"result{rank}.json"
                if not path.exists():
                    raise CalibrationFailed("crash", f"rank {rank} exited without its result",
                                            log_tail(work / f"rank{rank}.log", 30))
                results.append(json.loads(path.read_text()))
            return results
        finally:
            for p in procs:
                if p.poll() is None:
                    kill_group(p)
            for log in logs:
                log.close()


def _read_progress(path: Path):
    try:
        d = json.loads(path.read_text())
        return str(d["label"]), int(d["done"]), int(d["total"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _failure(work: Path, bad: list[tuple[int, int]]) -> CalibrationFailed:
    errs = sorted(work.glob("error_rank*.txt"), key=lambda p: p.stat().st_mtime)
    secondary = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Socket Timeout")
    primary = [p for p in errs if not any(k in p.read_text(errors="replace") for k in secondary)]
    errs = primary or errs
    if errs:
        rank = errs[0].stem.rsplit("rank", 1)[-1]
        line = (errs[0].read_text(errors="replace").splitlines() or ["?"])[0]
        return CalibrationFailed("crash", f"rank {rank}: {line}", log_tail(work / f"rank{rank}.log", 30))
    rank, rc = bad[0]
    tail = log_tail(work / f"rank{rank}.log", 30)
    if rc in (-9, 137):
        return CalibrationFailed("crash", f"rank {rank} was killed (signal 9), most likely out of memory", tail)
    last = next((ln.strip() for ln in reversed(tail.splitlines()) if ln.strip()), "")
    return CalibrationFailed("crash", f"rank {rank} exited with code {rc}" + (f": {last[:300]}" if last else ""), tail)


# ------------------------------------------------------------------------------------------------------------
# From the workers' timings to a cluster file
# ------------------------------------------------------------------------------------------------------------


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


def build_cluster_document(base, raw: list[dict], plan: dict, nproc: int, dev: str, quick: bool) -> dict[str, Any]:
    """The cluster file's mapping: the base cluster with fitted constants, and the ``measured`` block."""
    import numpy as np

    from asap.version import __version__
    from asap.cost import collectives as coll
    from asap.cost import roofline
    from asap.spec.hardware import EFFICIENCY_KEYS, FAMILIES, machine_identity

    acc = base.accelerator
    fam = acc.efficiency
    prec = _peak_key(dev)
    gemm = _merge(raw, "gemm")
    memory = {d["name"]: d for d in _merge(raw, "memory")}
    host = {d["name"]: d for d in _merge(raw, "host")}
    collectives = _merge(raw, "collectives")
    sync_points = _merge(raw, "sync") if raw[0].get("sync") else []

    # ---- host overhead per operator: a dispatched operator under autograd, what a training step is made of
    lin = host["linear_fwd_bwd"]
    ops = max(int(lin.get("ops") or 1), 1)
    per_op = {k: lin[k] / ops for k in ("time_s", "low_s", "high_s")}
    overhead = _band(per_op["time_s"], per_op["low_s"], per_op["high_s"])
    acc_fit = _with_eff(acc, kernel_overhead_s=overhead["value"])

    # ---- memory bandwidth: the model's elementwise kernel (bytes / (hbm_gbps * hbm_efficiency) + overhead)
    add = memory["add"]

    def hbm_fit(t, a):
        (eff,) = _fit(lambda p: roofline.elementwise_time_s(_with_eff(a, hbm_efficiency=p[0]), add["bytes"]),
                      [fam.hbm_efficiency], [1e-6], [1e4], [t])
        return eff

    hbm = {key: hbm_fit(add[f"{key}_s"], _with_eff(acc, kernel_overhead_s=overhead[v]))
           for key, v in (("time", "value"), ("low", "low"), ("high", "high"))}  # fastest time: highest bandwidth
    hbm_gbps_achieved = _band(*(hbm[key] * acc.hbm_gbps for key in ("time", "low", "high")))
    acc_fit = _with_eff(acc_fit, hbm_efficiency=hbm["time"])

    # ---- GEMMs: gemm_efficiency (against the peak) and gemm_half_dim through roofline.gemm_time_s
    m = np.array([g["m"] for g in gemm], dtype=float)
    n = np.array([g["n"] for g in gemm], dtype=float)
    k = np.array([g["k"] for g in gemm], dtype=float)

    def gemm_fit(times, a):
        return _fit(lambda p: roofline.gemm_time_s(_with_eff(a, gemm_efficiency=p[0], gemm_half_dim=p[1]), prec,
                                                   m, n, k),
                    [fam.gemm_efficiency, fam.gemm_half_dim], [1e-6, 1e-2], [1e4, 1e5], times)

    e0, dh = gemm_fit([g["time_s"] for g in gemm], acc_fit)
    e0_fast, dh_fast = gemm_fit([g["low_s"] for g in gemm], acc_fit)
    e0_slow, dh_slow = gemm_fit([g["high_s"] for g in gemm], acc_fit)
    peak = acc.peak_flops(prec) / 1e12
    gemm_tflops = _band(e0 * peak, e0_slow * peak, e0_fast * peak)
    half_dim = _band(dh, dh_fast, dh_slow)
    for g in gemm:
        g["tflops"] = 2.0 * g["m"] * g["n"] * g["k"] / g["time_s"] / 1e12
    acc_fit = _with_eff(acc_fit, gemm_efficiency=e0, gemm_half_dim=dh)

    # ---- collectives: net_efficiency (against intra_node_gbps), collective_latency_s and hop_latency_s
    # through collectives.all_reduce_s / all_gather_s, and, per group size, NCCL's busbw convention
    fit_cluster = base.with_devices(nproc) if nproc <= base.num_devices else base
    fit_cluster = replace(fit_cluster, scale_up_domain=max(fit_cluster.scale_up_domain, nproc), measured=None)
    groups = sorted({c["group"] for c in collectives})
    net: dict[str, Any] = {}
    if collectives:
        fit_pts = [c for c in collectives if c["op"] != "broadcast"]  # the formulas price reductions and gathers
        ops_ = [c["op"] for c in fit_pts]
        sizes = np.array([c["bytes"] for c in fit_pts], dtype=float)
        gs = np.array([c["group"] for c in fit_pts], dtype=float)
        is_ar = np.array([o == "all_reduce" for o in ops_])
        fit_hop = len(groups) > 1  # a growth per rank needs two group sizes at least

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
        net = {"busbw_gbps": _band(mid[0] * intra, slow[0] * intra, fast[0] * intra),
               "collective_latency_s": _band(mid[1], fast[1], slow[1]),
               "hop_latency_s": {**_band(mid[2], fast[2], slow[2]), "measured": fit_hop}}
        acc_fit = _with_eff(acc_fit, net_efficiency=mid[0], collective_latency_s=mid[1], hop_latency_s=mid[2])

    # ---- the written accelerator: peaks stay nominal unless this machine beats them
    peaks = dict(acc.peak_tflops)
    eff_gemm = e0
    if e0 > 1.0:
        raised = e0 * peak
        for key in (("fp32", "bf16", "fp16") if dev == "cpu" else ("bf16", "fp16")):
            if key in peaks or dev == "cpu":
                peaks[key] = raised
        eff_gemm = 1.0
    hbm_gbps, eff_hbm = acc.hbm_gbps, hbm["time"]
    if eff_hbm > 1.0:
        hbm_gbps, eff_hbm = eff_hbm * acc.hbm_gbps, 1.0
    intra, eff_net = acc.intra_node_gbps, fam.net_efficiency
    if net:
        eff_net = net["busbw_gbps"]["value"] / intra
        if eff_net > 1.0:
            intra, eff_net = net["busbw_gbps"]["value"], 1.0
    # the host: per operator, the DTensor extra, and the wait of a blocking call between bursts of compute (the
    # median over group sizes); on a CPU the per-operator cost is the host's alone (no device launch gap)
    dtensor = host.get("dtensor_op_extra")
    functional = host.get("functional_call_extra")
    sync_s = statistics.median(p["time_s"] for p in sync_points) if sync_points else 0.0
    constants = {"gemm_efficiency": eff_gemm, "gemm_half_dim": dh, "hbm_efficiency": eff_hbm,
                 "kernel_overhead_s": 0.0 if dev == "cpu" else overhead["value"], "host_op_s": overhead["value"],
                 "sync_s": sync_s, **({"dtensor_op_s": dtensor["time_s"]} if dtensor else {}),
                 **({"dtensor_call_s": functional["time_s"]} if functional else {})}
    if net:
        constants.update(net_efficiency=eff_net, collective_latency_s=net["collective_latency_s"]["value"])
        if net["hop_latency_s"]["measured"]:
            constants["hop_latency_s"] = net["hop_latency_s"]["value"]
    family_default = FAMILIES.get(acc.family)
    for key in EFFICIENCY_KEYS:  # a base cluster file's own overrides of what was not measured carry over
        val = getattr(fam, key)
        if key not in constants and family_default is not None and val != getattr(family_default, key):
            constants[key] = val
    constants = {k: _round(v) for k, v in constants.items()}
    accelerator = {"name": _calibrated_name(acc.name), "family": acc.family,
                   "peak_tflops": {k: _round(v) for k, v in peaks.items()}, "hbm_gb": acc.hbm_gb,
                   "hbm_gbps": _round(hbm_gbps), "intra_node_gbps": _round(intra),
                   "inter_node_gbps": acc.inter_node_gbps, "devices_per_node": acc.devices_per_node,
                   "scale_up_domain": acc.scale_up_domain, "interconnect": acc.interconnect}
    blocks = [d for name, d in host.items() if name.startswith("block_")]
    host_op = overhead
    if blocks:  # a real layer's operators cost more than a bare Linear's: fitted through the unit pricing
        fitted_op = _host_op_from_blocks(blocks, accelerator, constants, prec)
        host_op = {k: max(fitted_op[k], overhead[k]) for k in ("value", "low", "high")}
        constants["host_op_s"] = _round(host_op["value"])

    # ---- what the written constants predict for every point measured (the model's own error here)
    written = _written_accelerator(accelerator, constants)
    model_gemm = roofline.gemm_time_s(written, prec, m, n, k)
    for g, t in zip(gemm, model_gemm):
        g["model_s"] = float(t)
    for mem in memory.values():
        mem["gbps"] = mem["bytes"] / mem["time_s"] / 1e9
        mem["model_s"] = float(roofline.elementwise_time_s(written, mem["bytes"]))
    by_group = []
    if collectives:
        cl = replace(fit_cluster, accelerator=written)
        for c in collectives:
            f = coll.all_reduce_s if c["op"] == "all_reduce" else coll.all_gather_s
            c["model_s"] = float(f(cl, float(c["bytes"]), c["group"], 1))
        for op in ("all_reduce", "all_gather", "broadcast"):
            for g in groups:
                pts = [c for c in collectives if c["op"] == op and c["group"] == g]
                if pts:
                    by_group.append(_group_fit(op, g, pts))
    fitted = {"kernel_overhead_s": overhead, "host_op_s": host_op, "hbm_gbps": hbm_gbps_achieved,
              "gemm_tflops": gemm_tflops, "gemm_half_dim": half_dim, **net}
    if dtensor:
        fitted["dtensor_op_s"] = _band(dtensor["time_s"], dtensor["low_s"], dtensor["high_s"])
    if functional:
        fitted["dtensor_call_s"] = _band(functional["time_s"], functional["low_s"], functional["high_s"])
    if sync_points:
        fitted["sync_s"] = _band(sync_s, min(p["low_s"] for p in sync_points), max(p["high_s"] for p in sync_points))
    rel_err = {"gemm": _median_abs_rel([(g["model_s"], g["time_s"]) for g in gemm]),
               "memory": _median_abs_rel([(d["model_s"], d["time_s"]) for d in memory.values()])}
    if collectives:
        rel_err["collectives"] = _median_abs_rel([(c["model_s"], c["time_s"]) for c in collectives])
    noise = {"method": "a timing is the median over ranks of each rank's median over its calls (collectives on CPU, calls of 20 us "
                       "or more, timed one by one; compute and CUDA as loop means); low/high: the fastest and the "
                       "slowest repeat (a loop of calls) of any rank; rel_spread = (high - low) / median; a fitted "
                       "figure's low/high: the fit redone on every point's low and on every point's high; mean_s and "
                       "tail (share of calls over 3x the median): the stalls a median leaves out",
             "median_rel_spread": {
                 "gemm": statistics.median(g["rel_spread"] for g in gemm),
                 "memory": statistics.median(d["rel_spread"] for d in memory.values()),
                 "host": statistics.median(d["rel_spread"] for d in host.values()),
                 **({"collectives": statistics.median(c["rel_spread"] for c in collectives)} if collectives else {})},
             "fitted_rel_range": {k: (v["high"] - v["low"]) / v["value"] for k, v in fitted.items() if v["value"]}}
    if sync_points:
        noise["median_rel_spread"]["sync"] = statistics.median(p["rel_spread"] for p in sync_points)
    host_out = {"add_op_s": _clean_stats(host["tiny_add"]),
                "linear_fwd_bwd_s": _clean_stats(lin), "linear_fwd_bwd_ops": ops,
                "per_op_s": {k: v for k, v in per_op.items()},
                **({"dtensor_op_extra_s": _clean_stats(dtensor)} if dtensor else {}),
                **({"functional_call_extra_s": _clean_stats(functional)} if functional else {}),
                "sync_wait_s": [{"group": p["group"], **_clean_stats(p)} for p in sync_points]}
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
    info = raw[0].get("info", {})
    measured = {
        "format": CALIBRATION_FORMAT,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": {"asap": __version__, "python": platform.python_version(), "numpy": np.__version__,
                     **info.get("versions", {})},
        "machine": {**machine_identity(), **info.get("machine", {})},
        "base_cluster": base.name or acc.name, "device": dev, "backend": "nccl" if dev == "cuda" else "gloo",
        "processes": nproc, "threads_per_process": int(raw[0].get("threads", 1)), "quick": quick,
        "precision": prec,
        "gemm": [_clean_item(g, ("m", "n", "k")) for g in gemm],
        "memory": {name: _clean_item(d, ("bytes",)) for name, d in memory.items()},
        "host": _rounded(host_out),
        "collectives": [_rounded(b) for b in by_group],
        "fitted": _rounded(fitted),
        "model_median_abs_rel_error": _rounded(rel_err),
        "noise": _rounded(noise),
        "warnings": warnings,
        "not_measured": list(NOT_MEASURED) + ([] if net else ["net_efficiency", "collective_latency_s",
                                                              "hop_latency_s"]),
    }
    return {"accelerator": accelerator, "devices_per_node": base.devices_per_node, "nodes": base.nodes,
            "scale_up_domain": base.scale_up_domain, "efficiency": constants, "measured": measured}


def _host_op_from_blocks(blocks: list[dict], accelerator: dict, constants_so_far: dict,
                         precision: str) -> dict[str, float]:
    """The host's time per operator of a real layer: each block's measured forward + backward less what the cost
    model's own unit pricing gives for its computation (``asap.cost.units``, with the constants fitted above),
    over the operators it dispatched; the median over the blocks (and over their fastest / slowest repeats)."""
    from asap.cost.batch import StrategyBatch
    from asap.cost.units import unit_times
    from asap.spec.hardware import cluster_from_dict
    from asap.spec.layout import Unit
    from asap.spec.strategy import complete_strategy
    from asap.spec.train import TrainSpec

    cluster = cluster_from_dict({"accelerator": dict(accelerator, devices_per_node=1), "devices_per_node": 1,
                                 "nodes": 1, "efficiency": dict(constants_so_far, host_op_s=0.0, sync_s=0.0)})
    S = StrategyBatch.from_strategies([complete_strategy({"dp": 1}, 1)])
    per_op = {"value": [], "low": [], "high": []}
    for b in blocks:
        train = TrainSpec(1, int(b["seq"]), precision, framework="asap")
        ut = unit_times(block_spec(int(b["hidden"]), int(b["seq"])), cluster, train, S)
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


def _calibrated_name(name: str) -> str:
    return name if name.endswith("-calibrated") else f"{name}-calibrated"


def _median_abs_rel(pairs) -> float:
    return statistics.median(abs(a / b - 1.0) for a, b in pairs) if pairs else 0.0


def _clean_stats(d: dict) -> dict:
    return {k: d[k] for k in ("time_s", "low_s", "high_s", "rel_spread", "mean_s", "tail", "repeats", "calls") if k in d}


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


# ------------------------------------------------------------------------------------------------------------
# The worker (``python -m asap.calibrate --worker CONFIG RANK``)
# ------------------------------------------------------------------------------------------------------------


def _worker_main(cfg_path: str, rank: int) -> int:
    cfg = json.loads(Path(cfg_path).read_text())
    out = Path(cfg["out_dir"])
    try:
        result = _measure(cfg, rank)
        tmp = out / f"result{rank}.json.tmp"
        tmp.write_text(json.dumps(result))
        os.replace(tmp, out / f"result{rank}.json")
        return 0
    except BaseException as e:  # one line for the parent, the traceback in the log
        import traceback

        traceback.print_exc()
        msg = " ".join(f"{type(e).__name__}: {e}".split())[:500]
        (out / f"error_rank{rank}.txt").write_text(msg + "\n")
        return 1


def _measure(cfg: dict, rank: int) -> dict[str, Any]:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    plan, world, dev_kind = cfg["plan"], int(cfg["world"]), cfg["device"]
    if dev_kind == "cuda":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        backend, dtype = "nccl", torch.bfloat16

        def sync():
            torch.cuda.synchronize()
    else:
        torch.set_num_threads(int(cfg["threads"]))
        dev = torch.device("cpu")
        backend, dtype = "gloo", torch.float32

        def sync():  # CPU ops return when done: nothing to wait for
            return None
    dist.init_process_group(backend, init_method=f"file://{cfg['init_file']}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=float(cfg["pg_timeout_s"])),
                            **({"device_id": dev} if dev_kind == "cuda" else {}))
    groups = [g for g in cfg["groups"] if g <= world]
    ms = [(m, n, k) for m in plan["gemm_m"] for n in plan["gemm_nk"] for k in plan["gemm_nk"]]
    total = len(ms) + 2 + 2 + 1 + len(groups) * (int(plan["coll_repeats"]) + 1)
    # every rank in one group of each size (consecutive ranks), for the synchronised-call measurement
    partitions = {g: [dist.new_group(list(range(i, i + g))) for i in range(0, world - world % g, g)] for g in groups}
    state = {"done": 0}
    progress_path = Path(cfg["out_dir"]) / "progress.json"
    target, repeats = float(plan["target_s"]), int(plan["repeats"])

    def tick(label: str, step: int = 1) -> None:
        state["done"] += step
        if rank == 0:
            tmp = progress_path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"label": label, "done": state["done"], "total": total}))
            os.replace(tmp, progress_path)

    def agree(*xs: int) -> list[int]:
        """Rank 0's loop counts, for every rank: the same work at the same time on all of them."""
        t = torch.tensor([int(x) for x in xs], dtype=torch.int64, device=dev if dev_kind == "cuda" else "cpu")
        dist.broadcast(t, 0)
        return [int(v) for v in t.tolist()]

    def timed(fn, reps: int, tgt: float, warmup: int = 2, barrier=None, min_calls: int = 1,
              per_call: bool = False) -> dict[str, Any]:
        return _timed(fn, sync, agree, reps, tgt, warmup, barrier or dist.barrier,
                      per_call=per_call and dev_kind == "cpu", min_calls=min_calls)

    tick("starting", 0)
    result: dict[str, Any] = {"rank": rank, "threads": torch.get_num_threads(), "gemm": [], "memory": [],
                              "host": [], "collectives": [], "sync": []}
    # GEMMs
    for (m, n, k) in ms:
        a = torch.randn(m, k, device=dev, dtype=dtype)
        b = torch.randn(k, n, device=dev, dtype=dtype)
        c = torch.empty(m, n, device=dev, dtype=dtype)
        result["gemm"].append({"m": m, "n": n, "k": k, **timed(lambda: torch.matmul(a, b, out=c), repeats, target)})
        del a, b, c
        tick(f"GEMM {m}x{n}x{k}")
    # memory bandwidth: a streaming add (2 reads, 1 write) and a copy (1 read, 1 write)
    numel = int(plan["mem_bytes"]) // 4
    x = torch.ones(numel, device=dev, dtype=torch.float32)
    y = torch.ones(numel, device=dev, dtype=torch.float32)
    z = torch.empty(numel, device=dev, dtype=torch.float32)
    result["memory"].append({"name": "add", "bytes": 3 * numel * 4,
                             **timed(lambda: torch.add(x, y, out=z), repeats, target, warmup=1)})
    tick("memory add")
    result["memory"].append({"name": "copy", "bytes": 2 * numel * 4, **timed(lambda: z.copy_(x), repeats, target,
                                                                             warmup=1)})
    tick("memory copy")
    del x, y, z
    # host overhead: a 1-element add, and a small Linear forward + backward under autograd
    p = torch.ones(1, device=dev)
    q = torch.ones(1, device=dev)
    r = torch.empty(1, device=dev)
    result["host"].append({"name": "tiny_add", "ops": 1, **timed(lambda: torch.add(p, q, out=r), repeats, target)})
    tick("host: tiny add")
    lin = torch.nn.Linear(16, 16, device=dev)
    inp = torch.randn(8, 16, device=dev)

    def step():
        lin(inp).sum().backward()

    ops = _count_ops(step)
    result["host"].append({"name": "linear_fwd_bwd", "ops": ops, **timed(step, repeats, target)})
    tick("host: linear fwd+bwd")
    result["host"].append(_dtensor_add(torch, dist, dev, dev_kind, world, timed, repeats, target))
    tick("host: DTensor add")
    for hidden, seq in HOST_BLOCKS:
        result["host"].append(_block_step(torch, dev, dtype, hidden, seq, timed, repeats, target))
    tick("host: transformer blocks")
    # collectives: per group, every (op, size) point's repeats taken in turn, so that a burst of stalls (they
    # last a few tenths of a second here) falls on one repeat of many points, not on every repeat of one
    ag_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    coll_reps = int(plan["coll_repeats"])
    for g in groups:
        # every rank in a group of g at once (consecutive ranks), as a run's tensor- or data-parallel groups
        # communicate side by side: the figures are a loaded machine's, not one lone group's
        sub = partitions[g][rank // g] if rank < len(partitions[g]) * g else None
        member = sub is not None
        points, fns = [], []
        for op in ("all_reduce", "all_gather", "broadcast"):
            for size in plan["coll_bytes"]:
                size = int(size) // (4 * g) * (4 * g)
                if op == "all_reduce":
                    buf = torch.ones(size // 4, device=dev, dtype=torch.float32)

                    def fn(buf=buf, sub=sub):
                        dist.all_reduce(buf, group=sub)
                elif op == "broadcast":  # from the group's first rank (torch's ZeRO-1 broadcasts each tensor)
                    buf = torch.ones(size // 4, device=dev, dtype=torch.float32)

                    def fn(buf=buf, sub=sub, src=rank // g * g):
                        dist.broadcast(buf, src=src, group=sub)
                else:
                    full = torch.empty(size // 4, device=dev, dtype=torch.float32)
                    part = torch.ones(size // 4 // g, device=dev, dtype=torch.float32)

                    def fn(full=full, part=part, sub=sub):
                        ag_single(full, part, group=sub)
                points.append((op, size))
                fns.append(fn)
        # a group's first calls run slow for a few tenths of a second (fresh connections, a process that has been
        # waiting): warm it up before timing anything on it
        warm = torch.ones(16 * KIB, device=dev, dtype=torch.float32)
        bar = (lambda sub=sub: dist.barrier(group=sub)) if member else None
        _timed_many([lambda: dist.all_reduce(warm, group=sub)], sync, agree, 1, float(plan["coll_warmup_s"]), 2,
                    bar, per_call=False, member=member)
        timings = _timed_many(fns, sync, agree, coll_reps, float(plan["coll_target_s"]), 2, bar,
                              per_call=dev_kind == "cpu", min_calls=COLL_MIN_CALLS, member=member,
                              on_round=lambda i, g=g: tick(f"collectives g={g}: round {i + 1} of {coll_reps}"))
        dist.barrier()
        for (op, size), t in zip(points, timings):
            result["collectives"].append({"op": op, "group": g, "bytes": size, **t})
        del fns, points, timings
    # blocking calls between bursts of compute, every rank in a group of g at once, as a training step
    # interleaves them: what one costs beyond the compute and the call timed apart (peers late, descheduled)
    burn_a = torch.randn(64, 64, device=dev, dtype=dtype)
    small = torch.ones(64, device=dev, dtype=torch.float32)
    for g in groups:
        own = partitions[g][rank // g] if rank < len(partitions[g]) * g else None
        result["sync"].append({"group": g, **_sync_wait(torch, dist, sync, agree, own, burn_a, small, plan)})
        tick(f"synchronised calls g={g}")
    pair = partitions[groups[0]][rank // groups[0]] if rank < len(partitions[groups[0]]) * groups[0] else None
    result["host"].append(_functional_call_extra(torch, dist, dev, pair, timed, plan))
    if rank == 0:
        result["info"] = _info(torch, dev_kind)
    dist.barrier()
    dist.destroy_process_group()
    return result


# Compute between two blocking calls in the synchronised-call measurement: about what a small step's layer
# spends between its collectives
SYNC_BURST_S = 0.5e-3


def _sync_wait(torch, dist, sync, agree, group, a, small, plan) -> dict[str, Any]:
    """Seconds per call that (compute burst, blocking all-reduce in ``group``) costs beyond the burst alone and
    the call alone, each loop timed with every rank busy the same way at once; ``times_s`` per repeat."""
    one = time.perf_counter()
    torch.mm(a, a)
    sync()
    per_mm = max(time.perf_counter() - one, 1e-6)
    n_mm, calls = agree(max(1, int(SYNC_BURST_S / per_mm)), max(20, int(float(plan["coll_target_s"]) / 2e-3)))

    def burst():
        for _ in range(n_mm):
            torch.mm(a, a)
        sync()

    def call():
        if group is not None:
            dist.all_reduce(small, group=group)
        sync()

    def loop(fn):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls

    for fn in (burst, call):  # warm-up
        loop(fn)
    times = []
    for _ in range(int(plan["coll_repeats"])):
        t_burst, t_call = loop(burst), loop(call)
        t_both = loop(lambda: (burst(), call()))
        times.append(max(0.0, t_both - t_burst - t_call))
    return {"times_s": times, "burst_s": SYNC_BURST_S, "calls": calls * len(times)}


# Transformer blocks (hidden size, tokens) of the reference trainer, timed forward + backward: what a small step's
# layer costs its host. Head size 32, 4 heads of which 2 KV, SwiGLU of twice the hidden size.
HOST_BLOCKS = ((128, 64), (256, 128))


def block_spec(hidden: int, seq: int):
    """The ``ModelSpec`` of one ``HOST_BLOCKS`` block (one layer): what the cost model prices it as."""
    from asap.spec.model import model_from_dict

    return model_from_dict(dict(name=f"block-{hidden}x{seq}", num_layers=1, hidden_size=hidden,
                                ffn_hidden_size=2 * hidden, num_attention_heads=hidden // 32, num_kv_heads=max(1, hidden // 64),
                                vocab_size=64, activation="swiglu"))


def _block_step(torch, dev, dtype, hidden: int, seq: int, timed, repeats: int, target: float) -> dict[str, Any]:
    from asap.train.model import ModelArgs, TransformerBlock, rope_table

    args = ModelArgs.from_spec(block_spec(hidden, seq), seq)
    block = TransformerBlock(0, args).to(device=dev, dtype=dtype)
    rope = rope_table(args.rope_dim, seq, args.rope_theta).to(dev)
    x = torch.randn(1, seq, hidden, device=dev, dtype=dtype, requires_grad=True)

    def step():
        block(x, rope).sum().backward()

    return {"name": f"block_{hidden}x{seq}", "hidden": hidden, "seq": seq, "ops": _count_ops(step),
            **timed(step, repeats, target)}


def _functional_call_extra(torch, dist, dev, group, timed, plan) -> dict[str, Any]:
    """What a collective costs more through torch's functional collectives (the path DTensor's redistributes
    take: the work queued on the process group's thread, then waited on) than called directly: an all-gather
    of 32 KiB in the smallest group, every rank in one, both ways; per call."""
    import torch.distributed._functional_collectives as fc

    x = torch.ones(8 * KIB, device=dev)
    g = dist.get_world_size(group) if group is not None else 1
    out = torch.empty(g * x.numel(), device=dev)
    gather = getattr(fc, "all_gather_single", None) or fc.all_gather_tensor

    def direct():
        if group is not None:
            dist.all_gather_into_tensor(out, x, group=group)

    def functional():
        if group is not None:
            fc.wait_tensor(gather(x, 0, group))

    reps, tgt = int(plan["coll_repeats"]), float(plan["coll_target_s"])
    d, f = timed(direct, reps, tgt, min_calls=COLL_MIN_CALLS), timed(functional, reps, tgt, min_calls=COLL_MIN_CALLS)
    return {"name": "functional_call_extra", "ops": 1, "calls": f["calls"],
            "times_s": [max(0.0, b - a) for a, b in zip(d["times_s"], f["times_s"])]}


def _dtensor_add(torch, dist, dev, dev_kind: str, world: int, timed, repeats: int, target: float) -> dict[str, Any]:
    """The extra host time of an operator on DTensors: a column-parallel linear's forward and backward on
    DTensors (a Shard(0) weight over all ranks, as torch's ColwiseParallel builds it; local compute only)
    against the same on plain tensors, over the DTensor operators it dispatches."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard

    mesh = init_device_mesh(dev_kind, (world,))
    x = torch.randn(8, 16, device=dev)
    w = torch.randn(16, 16, device=dev)
    dx = DTensor.from_local(x, mesh, [Replicate()], run_check=False)
    dw = torch.nn.Parameter(DTensor.from_local(w, mesh, [Shard(0)], run_check=False))
    pw = torch.nn.Parameter(w.clone())

    def on_dtensors():
        torch.nn.functional.linear(dx, dw).to_local().sum().backward()

    def on_tensors():
        torch.nn.functional.linear(x, pw).sum().backward()

    n_dt = max(_count_ops(on_dtensors, of_type=DTensor), 1)
    plain = timed(on_tensors, repeats, target)
    dt = timed(on_dtensors, repeats, target)
    extra = [max(0.0, d - p) / n_dt for d, p in zip(dt["times_s"], plain["times_s"])]
    return {"name": "dtensor_op_extra", "ops": n_dt, "times_s": extra, "calls": dt["calls"]}


# Collective calls at least this long are timed one by one on CPU (the median over calls: gloo over a virtual
# machine's loopback has a heavy tail of multi-millisecond stalls that a loop average would fold in at random).
# Compute is timed as loop means: a throughput, which is what a device gets when more processes than cores share
# the machine (the median of single calls would pick the calls that ran without being descheduled).
_PER_CALL_MIN_S = 20e-6


def _timed(fn, sync, agree, reps: int, tgt: float, warmup: int, barrier, per_call: bool,
           min_calls: int = 1) -> dict[str, Any]:
    """``reps`` timings of one ``fn`` (see ``_timed_many``)."""
    return _timed_many([fn], sync, agree, reps, tgt, warmup, barrier, per_call, min_calls)[0]


def _timed_many(fns, sync, agree, reps: int, tgt: float, warmup: int, barrier, per_call: bool, min_calls: int = 1,
                member: bool = True, on_round=None) -> list[dict[str, Any]]:
    """``reps`` timings of each of ``fns`` after ``warmup`` calls, the repeats of all of them taken in turn.

    Each repeat of a function runs ``inner`` calls (rank 0's choice, so that every rank does the same work: about
    ``tgt`` seconds, at least ``min_calls`` calls when they are shorter than 5 ms). With ``per_call`` (collectives
    on CPU), calls of 20 us or more are timed one by one and a repeat gives their median; otherwise a repeat gives
    the mean of its loop (compute: a throughput; CUDA, whose clock needs a synchronisation). Returns, per
    function, the per-repeat figures (``times_s``) and, timed one by one, the median and mean over every call and
    the share of calls over 3x that median (``tail``: stalls, e.g. a virtual CPU woken late). A rank that is not
    a ``member`` of the group only takes part in rank 0's choice of the loop counts."""
    plan = []
    for fn in fns:
        if not member:
            plan += [0, 0]
            continue
        for _ in range(warmup):
            fn()
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        one = max(time.perf_counter() - t0, 1e-7)
        want = max(1, int(tgt / one), min_calls if one < 5e-3 else 1)
        plan += [min(100000, want), int(per_call and one >= _PER_CALL_MIN_S)]
    plan = agree(*plan)
    if not member:
        return [{"times_s": []} for _ in fns]
    times: list[list[float]] = [[] for _ in fns]
    calls: list[list[float]] = [[] for _ in fns]
    clock = time.perf_counter
    for r in range(reps):
        for i, fn in enumerate(fns):
            inner, one_by_one = plan[2 * i], plan[2 * i + 1]
            barrier()
            sync()
            if one_by_one:
                rep = []
                for _ in range(inner):
                    t0 = clock()
                    fn()
                    rep.append(clock() - t0)
                times[i].append(statistics.median(rep))
                calls[i] += rep
            else:
                t0 = clock()
                for _ in range(inner):
                    fn()
                sync()
                times[i].append((clock() - t0) / inner)
        if on_round is not None:
            on_round(r)
    out = []
    for i in range(len(fns)):
        d: dict[str, Any] = {"times_s": times[i], "calls": plan[2 * i] * reps}
        if calls[i]:
            med = statistics.median(calls[i])
            d.update(median_s=med, mean_s=statistics.fmean(calls[i]),
                     tail=sum(c > 3 * med for c in calls[i]) / len(calls[i]))
        out.append(d)
    return out


def _count_ops(step, of_type=None) -> int:
    """Operators one call of ``step`` dispatches (forward and backward), counted by a dispatch mode; with
    ``of_type``, only those with an argument of that tensor subclass (DTensor)."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_leaves

        class Count(TorchDispatchMode):
            n = 0

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if of_type is None or any(isinstance(a, of_type) for a in tree_leaves((args, kwargs or {}))):
                    Count.n += 1
                return func(*args, **(kwargs or {}))

        with Count():
            step()
        return max(Count.n, 1)
    except Exception:
        return 1


def _info(torch, dev_kind: str) -> dict[str, Any]:
    versions = {"torch": torch.__version__}
    machine: dict[str, Any] = {}
    if dev_kind == "cuda":
        versions["cuda"] = torch.version.cuda
        with contextlib.suppress(Exception):  # an NCCL-less build: the version is simply not recorded
            versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        machine["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {"versions": versions, "machine": machine}


def _fmt_bytes(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n / KIB:g} KiB"


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(_worker_main(sys.argv[2], int(sys.argv[3])))
    print("usage: python -m asap.calibrate --worker CONFIG RANK (use `asap calibrate`)", file=sys.stderr)
    sys.exit(2)
