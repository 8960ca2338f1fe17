"""The driver of ``asap calibrate``: check the inputs, start one worker process per device
(``asap.calibrate.measure``), follow rank 0's progress, collect every rank's timings, and hand them to
``asap.calibrate.document`` for the cluster file; on a crash, a timeout or an interruption every worker's
process group is killed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from asap.calibrate.document import build_cluster_document, write_cluster_file
from asap.calibrate.measure import KIB, MIB
from asap.spec.words import FailureKind
from asap.subprocs import kill_group, log_tail

if TYPE_CHECKING:
    from asap.spec.hardware import Cluster

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


# All processes' memory tensors together stay below this (three tensors of mem_bytes per process).
_MEM_TOTAL_BYTES = 4 * 1024 * MIB


DEFAULT_TIMEOUT_S = {False: 900.0, True: 180.0}


class CalibrationFailed(RuntimeError):
    """The workers did not finish: ``kind`` is crash or timeout; ``reason`` is one line."""

    def __init__(self, kind: FailureKind, reason: str, log_tail: str = ""):
        self.kind, self.reason, self.log_tail = kind, reason, log_tail
        super().__init__(reason)


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
    from asap.calibrate.check import check_calibration_file

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


def check_inputs(cluster: Any, devices: int | None, out: str | Path | None,
                 device: str = "auto") -> tuple[Cluster, str, Path | None]:
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
    src = str(Path(__file__).resolve().parents[2])  # the folder that holds the asap package
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
                    raise CalibrationFailed(FailureKind.TIMEOUT, f"no result after {timeout_s:g} s (a hang?); the workers "
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
                    raise CalibrationFailed(FailureKind.CRASH, f"rank {rank} exited without its result",
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
        who = errs[0].stem.rsplit("rank", 1)[-1]
        line = (errs[0].read_text(errors="replace").splitlines() or ["?"])[0]
        return CalibrationFailed(FailureKind.CRASH, f"rank {who}: {line}", log_tail(work / f"rank{who}.log", 30))
    rank, rc = bad[0]
    tail = log_tail(work / f"rank{rank}.log", 30)
    if rc in (-9, 137):
        return CalibrationFailed(FailureKind.CRASH, f"rank {rank} was killed (signal 9), most likely out of memory", tail)
    last = next((ln.strip() for ln in reversed(tail.splitlines()) if ln.strip()), "")
    return CalibrationFailed(FailureKind.CRASH, f"rank {rank} exited with code {rc}" + (f": {last[:300]}" if last else ""), tail)
