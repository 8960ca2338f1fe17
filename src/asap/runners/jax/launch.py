"""Launch JAX runs in a child process that owns the devices, and read back what it measured.

The child (``python -m asap.runners.jax.worker``) starts with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
set before it imports JAX, so on the CPU it sees N virtual devices however the parent imported JAX; it runs in
its own process group, killed whole on a timeout (``asap.subprocs``). The results are the reference trainer's
``RunResult`` (median step time after warm-up, tokens/s, losses, peak memory, traces), with ``backend`` "jax"
and the mesh each strategy ran on.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

from asap.errors import AsapError
from asap.runners.jax.shard import mesh_shape
from asap.runners.jax.worker import STEP_LINE
from asap.spec.model import ModelSpec
from asap.spec.strategy import Strategy
from asap.spec.train import TrainSpec
from asap.runners.common import RUN_PRECISIONS, RunFailed, RunResult, failure_kind, run_logged
from asap.spec.words import FailureKind
from asap.subprocs import log_tail
from asap.runners.torch.launch import RunConfig, check_inputs


def check_supported_jax(model: ModelSpec, s: Strategy, train: TrainSpec, field_name: str = "strategy") -> None:
    """Raise AsapError (one line) for what the JAX backend cannot run, before the child starts."""
    f = field_name
    if train.precision not in RUN_PRECISIONS:
        raise AsapError("precision", f"real runs support {' and '.join(RUN_PRECISIONS)}, got {train.precision}")
    if s.pp > 1:
        raise AsapError(f"{f}.pp", f"pp={s.pp}: the jax backend has no pipeline schedule (MaxText's stage axis); use pp=1")
    if model.mla is not None:
        raise AsapError("model.mla", "multi-head latent attention is not implemented by the jax backend")
    if model.head_dim % 2:
        raise AsapError("model.head_dim", f"rotary embeddings need an even head dimension, got {model.head_dim}")
    if train.seq_len % s.cp:
        raise AsapError(f"{f}.cp", f"seq_len={train.seq_len} is not divisible by cp={s.cp}")
    shape = mesh_shape(s)  # AsapError when ep does not divide dp
    batch_ways = shape["data"] * shape["fsdp"] * shape["expert"]
    if train.global_batch % batch_ways:
        raise AsapError("global_batch", f"{train.global_batch} sequences do not split over the {batch_ways} "
                                        "data-parallel devices (data x fsdp x expert)")


def child_env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={devices}"])
    env.setdefault("PYTHONWARNINGS", "ignore")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _failure(out: Path, log_path: Path, rc: int) -> RunFailed:
    tail = log_tail(log_path)
    errs = sorted(out.glob("error_job*.txt"))
    if errs:
        kind, _, reason = errs[0].read_text(errors="replace").splitlines()[0].partition("\t")
        return RunFailed(failure_kind(kind), reason, tail)
    if rc in (-9, 137):
        return RunFailed(FailureKind.OOM, f"the JAX process was killed (signal 9), most likely out of memory (exit {rc})", tail)
    last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
    return RunFailed(FailureKind.CRASH, f"the JAX process exited with code {rc}" + (f": {last[:300]}" if last else ""), tail)


def _traces(profile_dir: str | None) -> list[str]:
    """The perfetto export of the run (its XProf ``.xplane.pb`` lies beside it, in the same run folder)."""
    if not profile_dir:
        return []
    return [str(p) for p in sorted(Path(profile_dir).rglob("perfetto_trace.json.gz"))]


def _result(res: dict, c: RunConfig, wall_s: float) -> RunResult:
    from asap.runners.torch.launch import timed_median

    step_time = timed_median(res["step_times_s"], profiled=bool(res.get("trace_dir")))
    r = RunResult(strategy=c.strategy.to_dict(), step_time_s=step_time,
                  tokens_per_s=c.global_batch * c.seq_len / step_time if step_time > 0 else 0.0,
                  losses=res["losses"], peak_memory_gb=res["peak_memory_gb"], traces=_traces(res.get("trace_dir")),
                  step_times_s=res["step_times_s"], peak_memory_gb_per_rank=[res["peak_memory_gb"]],
                  layers_per_chunk=[c.model.num_layers], model=c.model.name, global_batch=c.global_batch,
                  seq_len=c.seq_len, steps=c.steps, precision=c.precision, nproc=res["devices"],
                  device=res.get("platform", "cpu"), backend="jax", wall_time_s=wall_s)
    vars(r)["mesh"] = res["mesh"]  # the named mesh it ran on (not a RunResult field: to_dict leaves it out)
    return r


def launch(configs: list[RunConfig], *, timeout_s: float | None = None, echo: IO[str] | None = None,
           progress: IO[str] | None = None, workdir: str | None = None) -> list[RunResult]:
    """Run every config, one after the other, in one child process of max(devices) JAX devices."""
    if not configs:
        return []
    for c in configs:
        check_supported_jax(c.model, c.strategy, c.train)
        check_inputs(c, "cpu")
    devices = max(c.strategy.devices for c in configs)
    with tempfile.TemporaryDirectory(prefix="asap-jax-") as tmp:
        out = Path(workdir or tmp)
        out.mkdir(parents=True, exist_ok=True)
        cfg_path = out / "config.json"
        cfg_path.write_text(json.dumps({"out_dir": str(out), "jobs": [c.job() for c in configs]}, indent=1))
        log_path = out / "jax.log"
        cmd = [sys.executable, "-m", "asap.runners.jax.worker", "--config", str(cfg_path)]
        t0 = time.perf_counter()
        rc, timed_out = run_logged(cmd, child_env(devices), log_path, timeout_s, echo, progress, STEP_LINE)
        wall = time.perf_counter() - t0
        if timed_out:
            raise RunFailed(FailureKind.TIMEOUT, f"no result after {timeout_s:g} s (a hang?); the run was killed", log_tail(log_path))
        if rc != 0:
            raise _failure(out, log_path, rc)
        return [_result(json.loads((out / f"job{j}.json").read_text()), c, wall / len(configs))
                for j, c in enumerate(configs)]


def run(model: ModelSpec, strategy: Strategy, global_batch: int, seq_len: int, steps: int = 5, *,
        precision: str = "fp32", profile_dir: str | None = None, seed: int = 0, data: str | None = None,
        lr: float = 1e-3, timeout_s: float | None = None, echo: IO[str] | None = None,
        progress: IO[str] | None = None) -> RunResult:
    """One real run on a JAX mesh (the Python face of ``asap run --backend jax``; ``strategy`` as
    ``asap.runners.torch.launch.resolve_run_strategy`` reads the text)."""
    s = strategy
    if steps < 1:
        raise AsapError("steps", f"must be >= 1, got {steps}")
    cfg = RunConfig(model=model, strategy=s, global_batch=global_batch, seq_len=seq_len, steps=steps,
                    precision=precision, seed=seed, data=data, lr=lr,
                    profile_dir=str(Path(profile_dir).resolve()) if profile_dir else None)
    return launch([cfg], timeout_s=timeout_s, echo=echo, progress=progress)[0]
