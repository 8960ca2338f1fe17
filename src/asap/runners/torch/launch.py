"""Launch the reference trainer under torchrun and collect what every rank measured.

``launch([RunConfig, ...])`` writes the worker's JSON config, runs ``python -m asap.runners.torch.elastic
--nproc-per-node N --config FILE`` (torchrun ``--standalone``'s agent, its N workers forked from one interpreter:
``asap.runners.torch.elastic``; N = the product of the degrees), and
turns the per-rank files into one ``RunResult`` per config: the global loss of every step, the median step
time after warm-up (each step's time is its slowest rank's), tokens/s, the peak memory of the busiest rank
(peak RSS on CPU, ``max_memory_allocated`` on CUDA), the transformer layers each pipeline chunk was built with
(``layers_per_chunk``, in chunk order: the split of ``asap.spec.layout`` the cost model prices) and, with a
profile directory, one trace per rank.

A run that crashes, runs out of memory or hangs raises ``RunFailed`` with a one-line reason (``RunFailed``,
``RunResult`` and the logged child process are ``asap.runners.common``'s, shared with the JAX backend); a strategy
the trainer cannot run raises ``AsapError`` before anything is launched (``check_supported``).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from asap.errors import AsapError
from asap.runners.common import RUN_PRECISIONS, RunFailed, RunResult, failure_kind, run_logged
from asap.subprocs import log_tail
from asap.spec.model import ModelSpec
from asap.spec.layout import layout, parse_layer_split
from asap.spec.framework import Dispatcher
from asap.spec.strategy import Schedule, Strategy, Zero, parse_strategy, resolve_strategy
from asap.spec.knobs import Recompute
from asap.spec.train import TrainSpec
from asap.spec.words import FailureKind


@dataclass
class RunConfig:
    model: ModelSpec
    strategy: Strategy
    global_batch: int
    seq_len: int
    steps: int = 5
    precision: str = "fp32"
    seed: int = 0
    data: str | None = None
    lr: float = 1e-3
    profile_dir: str | None = None
    capture_dir: str | None = None  # asap align: the first step's per-module numerics (asap.numerics.capture)
    first_step_hook: str | None = None  # "module:function" called around the first step (worker.first_step_hook)
    devices_per_node: int | None = None  # processes per "node" for hierarchical collectives (None: one node)
    documents: list[list[int]] | None = None  # packed samples (document lengths): document-masked attention
    balance: bool = False  # each step's samples placed by asap.balance instead of in file order

    @property
    def train(self) -> TrainSpec:
        return TrainSpec(self.global_batch, self.seq_len, self.precision)

    def job(self) -> dict[str, Any]:
        return {"model": self.model.to_dict(), "strategy": self.strategy.to_dict(), "global_batch": self.global_batch,
                "seq_len": self.seq_len, "steps": self.steps, "precision": self.precision, "seed": self.seed,
                "data": self.data, "lr": self.lr, "profile_dir": self.profile_dir,
                "capture_dir": self.capture_dir, "first_step_hook": self.first_step_hook,
                "devices_per_node": self.devices_per_node,
                **({"documents": self.documents, "sample_order": sample_order(self)} if self.documents else {})}


def sample_order(c: RunConfig) -> list[list[int]]:
    """Per step, the file's sample indices in the row order the trainer takes them (dp rank r trains the r-th
    contiguous block, micro-batch j of it the j-th sub-block): the file's order, or with ``balance`` the
    assignment ``asap.balance.balance`` gives over dp ranks x micro-batches (the same samples, placed so that
    the slowest rank's attention work, a*sum(l^2) + b*S, is least)."""
    from asap.runners.torch.data import step_samples

    assert c.documents is not None  # asked for only with packed samples
    n, s = len(c.documents), c.strategy
    micro = c.global_batch // (s.dp * s.mbs)
    order = []
    for step in range(c.steps):
        idx = step_samples(n, step, c.global_batch)
        if c.balance:
            from asap.balance import attention_cost_coefficients, balance

            coef = attention_cost_coefficients(c.model, "local-cpu", precision=c.precision, seq_len=c.seq_len,
                                               framework="asap")
            placed = balance([c.documents[i] for i in idx], s.dp, micro, coef, time_budget_s=0.2)
            idx = [idx[j] for slot in placed["assignment"] for j in slot]
        order.append(idx)
    return order

# ------------------------------------------------------------------------------------------------------------
# Strategy resolution and the trainer's own limits
# ------------------------------------------------------------------------------------------------------------


def resolve_run_strategy(text: str | dict | None, model: ModelSpec, train: TrainSpec, field_name: str = "strategy",
                         layer_split: str | tuple[int, ...] | None = None) -> Strategy:
    """Like ``resolve_strategy``, with the device count taken from the strategy itself: omitted dp is the
    smallest that the expert folding allows -- 1 for dense models, ep*etp / gcd(ep*etp, tp*cp) for MoE
    (etp defaulting to tp, Megatron-Core's default). ``layer_split`` (``asap run --layer-split``) is the
    strategy's ``layer_split`` key given on its own; giving both is an error."""
    partial = parse_strategy(text, field_name)
    if layer_split not in (None, "", ()):
        if "layer_split" in partial:
            raise AsapError(f"{field_name}.layer_split",
                            "given both as --layer-split and inside --strategy; give it once")
        partial["layer_split"] = parse_layer_split(layer_split, f"{field_name}.layer_split")
    tp, pp, cp = partial.get("tp", 1), partial.get("pp", 1), partial.get("cp", 1)
    if "dp" not in partial:
        folded = partial.get("ep", 1) * partial.get("etp", tp) if model.moe is not None else 1
        partial["dp"] = folded // math.gcd(folded, tp * cp)
    devices = partial["dp"] * tp * pp * cp
    return resolve_strategy(partial, model, train, devices, field_name)


def check_supported(model: ModelSpec, s: Strategy, train: TrainSpec, device_type: str = "cpu",
                    field_name: str = "strategy") -> None:
    """Raise AsapError (one line) for what the reference trainer cannot run, before anything is launched."""
    f = field_name
    if train.precision not in RUN_PRECISIONS:
        raise AsapError("precision", f"real runs support {' and '.join(RUN_PRECISIONS)}, got {train.precision}")
    rope_dim = model.mla.qk_rope_head_dim if model.mla is not None else model.head_dim
    if rope_dim % 2:
        raise AsapError("model.head_dim", f"rotary embeddings need an even head dimension, got {rope_dim}")
    if s.cp > 1 and device_type != "cuda":
        raise AsapError(f"{f}.cp", f"cp={s.cp}: context parallelism runs on CUDA only (torch's ring attention has "
                                   "no CPU kernel) and this run is on the CPU")
    if s.cp > 1 and s.pp > 1:
        raise AsapError(f"{f}.cp", "cp > 1 with pp > 1 is not implemented by the reference trainer")
    if model.mla is not None and s.tp > 1:
        raise AsapError(f"{f}.tp", "MLA attention with tp > 1 is not implemented by the reference trainer")
    if model.tie_embeddings and (s.tp > 1 or s.pp > 1):
        raise AsapError(f"{f}.tp" if s.tp > 1 else f"{f}.pp",
                        f"{model.name} ties its embeddings, which the reference trainer runs with tp=1 and pp=1 only")
    if s.tp > 1 and (s.sp or model.moe is not None) and train.seq_len % s.tp:
        raise AsapError(f"{f}.tp", f"seq_len={train.seq_len} is not divisible by tp={s.tp} "
                                   "(sequence parallelism and the MoE token split shard the sequence)")
    if s.cp > 1 and s.tp > 1 and train.seq_len % (2 * s.cp * s.tp):
        raise AsapError(f"{f}.cp", f"seq_len={train.seq_len} is not divisible by 2*cp*tp={2 * s.cp * s.tp}")
    if s.recompute.kind == Recompute.MODULES:
        from asap.runners.torch.parallel import TRAINER_RECOMPUTE_MODULES

        missing = [m for m in s.recompute.module_labels if m not in TRAINER_RECOMPUTE_MODULES]
        if missing:
            raise AsapError(f"{f}.recompute", f"the reference trainer recomputes the modules "
                                              f"{', '.join(TRAINER_RECOMPUTE_MODULES)}; not {', '.join(missing)}")
    if model.moe is not None and s.ep > 1 and s.dispatcher == Dispatcher.ALLGATHER:
        raise AsapError(f"{f}.dispatcher", "the reference trainer dispatches tokens with alltoall or dedup (the "
                                           "two-level all-to-all); allgather is priced by the cost model only")
    layout(model, s.pp, s.vpp, s.layer_split)  # the chunks the trainer will cut: AsapError if there are none
    m = s.micro_batches(train.global_batch)
    if s.pp > 1:
        if s.schedule == Schedule.ONE_F_ONE_B and m < s.pp:
            raise AsapError(f"{f}.schedule", f"1f1b needs at least pp={s.pp} micro-batches per step, got "
                                             f"{m} (global batch {train.global_batch} / (dp*mbs))")
        if s.schedule == Schedule.ZB and s.zero == Zero.PARAMETERS:
            raise AsapError(f"{f}.zero", "zero=3 with schedule=zb is refused: torch's zero-bubble schedule computes weight "
                                         "gradients after FSDP has resharded (wrong gradients); use zero=2 or another schedule")
        if s.schedule in (Schedule.INTERLEAVED, Schedule.ZB) and m % s.pp:
            raise AsapError(f"{f}.schedule", f"{s.schedule} needs the micro-batches ({m}) divisible by pp={s.pp}")


def check_devices_per_node(s: Strategy, devices_per_node: int | None) -> None:
    """``--devices-per-node K`` groups the processes into nodes of K consecutive ranks: K >= 1 dividing the
    world size; with dispatcher=dedup every expert-parallel group must fill its nodes evenly."""
    if devices_per_node is None:
        return
    if devices_per_node < 1 or s.devices % devices_per_node:
        raise AsapError("devices-per-node", f"must be >= 1 and divide the {s.devices} processes, got {devices_per_node}")
    if s.dispatcher == Dispatcher.DEDUP and s.ep > 1:
        from asap.runners.torch.parallel import ParallelDims, ep_node_layout

        d = ParallelDims.from_strategy(s, devices_per_node)
        ep_node_layout(d.pp, d.edp, d.ep, d.etp, devices_per_node)  # AsapError if the groups split unevenly


HOST_MEMORY_SHARE = 0.9  # of the memory the kernel reports available: the rest for the OS and the launcher
MIN_TEXT_BYTES = 2  # a --data file needs seq_len + this many bytes (inputs and the shifted labels)


def check_inputs(c: RunConfig, device: str) -> None:
    """What a run would otherwise only find out after launching its workers: a data file that cannot be read
    or is too short, a profile folder that cannot be written, packed samples the trainer cannot mask, and (on
    CPU) a job whose memory, as the cost model prices it for the reference trainer, is more than this host has
    available."""
    if c.documents is not None:
        check_documents(c)
    if c.balance and c.documents is None:
        raise AsapError("balance", "needs --lengths FILE (the packed samples to place)")
    if c.data is not None:
        p = Path(c.data)
        if not p.is_file():
            raise AsapError("data", f"'{c.data}' is not a file")
        if not os.access(p, os.R_OK):
            raise AsapError("data", f"'{c.data}' is not readable")
        if p.stat().st_size < c.seq_len + MIN_TEXT_BYTES:
            raise AsapError("data", f"'{c.data}' has {p.stat().st_size} bytes, fewer than seq_len + 2 = "
                                    f"{c.seq_len + MIN_TEXT_BYTES}")
        if c.model.vocab_size < 256:
            raise AsapError("data", f"a text file is read one byte per token and needs vocab_size >= 256, "
                                    f"got {c.model.vocab_size}")
    if c.profile_dir is not None:
        _check_writable_dir(c.profile_dir, "profile")
    if device == "cpu":
        check_host_memory(c)


def check_documents(c: RunConfig) -> None:
    """Document-masked attention runs where the trainer sees whole micro-batches of whole sequences: not under
    pipeline schedules (which split the micro-batches themselves), context parallelism or MLA."""
    assert c.documents is not None  # checked only with packed samples
    s = c.strategy
    for key, bad in (("pp", s.pp > 1), ("cp", s.cp > 1)):
        if bad:
            raise AsapError("lengths", f"packed documents run with {key}=1 only in the reference trainer, got "
                                       f"{key}={getattr(s, key)}")
    if c.model.mla is not None:
        raise AsapError("lengths", "packed documents are not implemented for MLA attention in the reference trainer")
    if len(c.documents) < c.global_batch:
        raise AsapError("lengths", f"{len(c.documents)} samples, fewer than one global batch of {c.global_batch}")
    for i, docs in enumerate(c.documents):
        if sum(docs) > c.seq_len:
            raise AsapError("lengths", f"sample {i} has {sum(docs)} tokens, more than --seq-len {c.seq_len}")


def _check_writable_dir(path: str, field_name: str) -> None:
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / ".asap-write-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise AsapError(field_name, f"cannot write into '{path}': {e.strerror or e}") from None


def host_available_gb() -> float | None:
    """MemAvailable from /proc/meminfo (Linux), None where the kernel does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / 2**30
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_host_memory(c: RunConfig) -> None:
    """Refuse a CPU run whose processes together need more than HOST_MEMORY_SHARE of the available memory, by
    the cost model's peak per device for the reference trainer (framework ``asap``) on this host."""
    from asap.cost.estimate import estimate
    from asap.spec.hardware import CATALOG, Cluster
    from asap.spec.job import Job

    available = host_available_gb()
    if available is None:
        return
    n = c.strategy.devices
    cluster = Cluster(accelerator=CATALOG["local-cpu"], devices_per_node=n, nodes=1, name="this host")
    train = TrainSpec(c.global_batch, c.seq_len, c.precision, framework="asap")
    try:
        need = estimate(Job.resolve(c.model, cluster, train), c.strategy).memory_gb["allocated"] * n
    except AsapError:  # a strategy the cost model does not price: the run's own checks speak for it
        return
    if need > HOST_MEMORY_SHARE * available:
        raise AsapError("model", f"{c.model.name} at global batch {c.global_batch} x {c.seq_len} needs about "
                                 f"{need:.1f} GiB over {n} processes "
                                 f"(the cost model's allocated memory), more than the {available:.1f} GiB this host has "
                                 f"available; use a smaller model, batch or sequence, or more model parallelism")


# ------------------------------------------------------------------------------------------------------------
# Launching
# ------------------------------------------------------------------------------------------------------------


# a build's accelerator runtimes, as torch/version.py states them (``cuda = None`` and ``hip = None`` in a CPU build)
_NO_RUNTIME = re.compile(r"^(cuda|hip)\s*(?::[^=]*)?=\s*None\s*$", re.MULTILINE)


def torch_build_is_cpu_only() -> bool:
    """Whether the installed PyTorch is a CPU build (no CUDA or ROCm runtime), read from its ``torch/version.py``
    without importing torch (seconds of CPU a launcher process need not spend: its workers import it); False
    where the file cannot be read, so that the caller asks torch itself."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    except OSError:
        return False
    return len(set(_NO_RUNTIME.findall(text))) == 2


def detect_device(requested: str = "auto", nproc: int = 1) -> str:
    from asap.runners.common import DEVICE_REQUESTS

    if requested not in DEVICE_REQUESTS:
        raise AsapError("device", f"must be auto, cpu or cuda, got {requested!r}")
    if requested == "cpu" or (requested == "auto" and torch_build_is_cpu_only()):
        return "cpu"
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if requested == "cuda" and n == 0:
        raise AsapError("device", "cuda was asked for but no GPU is visible")
    if n == 0:
        return "cpu"
    if n < nproc:
        raise AsapError("strategy", f"the strategy needs {nproc} GPUs and this machine has {n} "
                                    "(pass --device cpu to run it on CPU processes)")
    return "cuda"


def torchrun_command(nproc: int, config_path: str) -> list[str]:
    """torchrun's agent on the worker (``asap.runners.torch.elastic``: ``torch.distributed.run --standalone``'s
    launch, the workers forked from one interpreter that imported torch once)."""
    return [sys.executable, "-m", "asap.runners.torch.elastic", "--nproc-per-node", str(nproc),
            "--config", config_path]


def _child_env(device: str, nproc: int) -> dict[str, str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[3])  # the folder that holds the asap package
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc)) if device == "cpu" else "1"
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def _failure_from_files(out: Path, log_path: Path, rc: int) -> RunFailed:
    errs = sorted(out.glob("error_job*_rank*.txt"), key=lambda p: p.stat().st_mtime)
    tail = log_tail(log_path)
    # ranks that only saw a peer vanish say so; the cause is elsewhere (another rank's error, or a kill)
    secondary = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "NCCL communicator was aborted",
                 "ProcessGroupNCCL's watchdog", "Socket Timeout")
    primary = [p for p in errs if not any(k in p.read_text(errors="replace").splitlines()[0] for k in secondary)]
    if not primary and (rc in (-9, 137) or "Signal 9" in tail or "SIGKILL" in tail):
        errs = []
    errs = primary or errs
    if errs:
        # the first rank to fail names the cause; others often only see their peers vanish
        first = errs[0].read_text(errors="replace").splitlines()[0]
        kind, _, reason = first.partition("\t")
        rank = errs[0].stem.rsplit("rank", 1)[-1]
        return RunFailed(failure_kind(kind), f"rank {rank}: {reason or first}", tail)
    if rc in (-9, 137) or "Signal 9" in tail or "SIGKILL" in tail:
        return RunFailed(FailureKind.OOM, f"a worker was killed (signal 9), most likely out of memory (exit {rc})", tail)
    last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
    return RunFailed(FailureKind.CRASH, f"torchrun exited with code {rc}" + (f": {last[:300]}" if last else ""), tail)


def launch(configs: list[RunConfig], *, device: str = "auto", timeout_s: float | None = None,
           echo: IO[str] | None = None, workdir: str | None = None, pg_timeout_s: float = 300.0,
           progress: IO[str] | None = None) -> list[RunResult]:
    """Run every config (same world size) in one torchrun launch; one RunResult per config. ``echo`` gets every
    line the workers print, ``progress`` only rank 0's step lines (step, loss, step time)."""
    if not configs:
        return []
    nproc = configs[0].strategy.devices
    if any(c.strategy.devices != nproc for c in configs):
        raise AsapError("strategy", "configs launched together must use the same number of processes")
    dev = detect_device(device, nproc)
    for c in configs:
        check_supported(c.model, c.strategy, c.train, dev)
        check_devices_per_node(c.strategy, c.devices_per_node)
        check_inputs(c, dev)
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="asap-run-")
        workdir = tmp.name
    out = Path(workdir)
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("job*_rank*.json")) + list(out.glob("error_job*_rank*.txt")):
        old.unlink()
    cfg_path = out / "config.json"
    cfg_path.write_text(json.dumps({"device": dev, "out_dir": str(out), "pg_timeout_s": pg_timeout_s,
                                    "jobs": [c.job() for c in configs]}, indent=1))
    log_path = out / "torchrun.log"
    t0 = time.perf_counter()
    try:
        rc, timed_out = run_logged(torchrun_command(nproc, str(cfg_path)), _child_env(dev, nproc), log_path,
                                   timeout_s, echo, progress, STEP_LINE)
        wall = time.perf_counter() - t0
        if timed_out:
            raise RunFailed(FailureKind.TIMEOUT, f"no result after {timeout_s:g} s (a hang?); the run was killed", log_tail(log_path))
        if rc != 0:
            raise _failure_from_files(out, log_path, rc)
        return [_collect(out, j, c, nproc, dev, wall / len(configs)) for j, c in enumerate(configs)]
    finally:
        if tmp is not None:
            tmp.cleanup()


def timed_median(per_step: list[float], profiled: bool) -> float:
    """The median of the timed steps: the first (warm-up) and the profiled last one dropped
    (``asap.measure``); a run too short for that keeps what it has."""
    from asap.measure import step_stats

    for warm, prof in ((1, [-1] if profiled else []), (1, []), (0, [])):
        try:
            return step_stats(per_step, warm, prof).step_time_s
        except ValueError:
            continue
    raise RunFailed(FailureKind.CRASH, "the run timed no step")


STEP_LINE = "[asap.train] step "  # what worker.run_job logs on rank 0 after each step


def _collect(out: Path, j: int, c: RunConfig, nproc: int, device: str, wall: float) -> RunResult:
    ranks = []
    for r in range(nproc):
        p = out / f"job{j}_rank{r}.json"
        if not p.exists():
            raise RunFailed(FailureKind.CRASH, f"rank {r} wrote no result for job {j}")
        ranks.append(json.loads(p.read_text()))
    per_step = [max(rk["step_times_s"][i] for rk in ranks) for i in range(c.steps)]
    traces = [rk["trace"] for rk in ranks if rk.get("trace")]
    step_time = timed_median(per_step, profiled=bool(traces))
    mem = [rk["peak_memory_gb"] for rk in ranks]
    built: dict[int, list[int]] = {}
    for rk in ranks:  # the tp/dp/cp replicas of a chunk build the same layers
        for sid, ids in rk.get("chunk_layers", {}).items():
            built.setdefault(int(sid), ids)
    return RunResult(strategy=c.strategy.to_dict(), step_time_s=step_time,
                     tokens_per_s=c.global_batch * c.seq_len / step_time if step_time > 0 else 0.0,
                     losses=ranks[0]["losses"], peak_memory_gb=max(mem), traces=traces, step_times_s=per_step,
                     peak_memory_gb_per_rank=mem, aux_losses=ranks[0].get("aux_losses", []),
                     layers_per_chunk=[len(built[sid]) for sid in sorted(built)], model=c.model.name,
                     internode_dispatch_bytes=sum(rk.get("internode_dispatch_bytes", 0) for rk in ranks),
                     dispatch_remote_domains=sum(rk.get("dispatch_remote_domains", 0) for rk in ranks),
                     **attention_work_figures(ranks),
                     global_batch=c.global_batch, seq_len=c.seq_len, steps=c.steps, precision=c.precision,
                     nproc=nproc, device=device, backend=ranks[0].get("backend", ""), wall_time_s=wall)


def attention_work_figures(ranks: list[dict]) -> dict[str, Any]:
    """Per data-parallel rank (the first rank of each, as its tp replicas train the same rows)."""
    by_dp: dict[int, float] = {}
    for rk in ranks:
        if rk.get("attention_work") is not None:
            by_dp.setdefault(int(rk["dp_rank"]), float(rk["attention_work"]))
    if not by_dp:
        return {}
    work = [by_dp[k] for k in sorted(by_dp)]
    mean = sum(work) / len(work)
    return {"attention_work_per_dp_rank": work, "attention_max_over_mean": max(work) / mean if mean > 0 else 1.0}


def run(model: ModelSpec, strategy: Strategy, global_batch: int, seq_len: int, steps: int = 5, *,
        precision: str = "fp32", profile_dir: str | None = None, seed: int = 0, data: str | None = None,
        lr: float = 1e-3, device: str = "auto", timeout_s: float | None = None, echo: IO[str] | None = None,
        workdir: str | None = None, devices_per_node: int | None = None,
        progress: IO[str] | None = None, documents: list[list[int]] | None = None,
        balance: bool = False) -> RunResult:
    """One real run (the Python face of ``asap run``); ``documents``: packed samples (``--lengths``), placed
    by ``asap balance`` with ``balance``; ``strategy`` as ``resolve_run_strategy`` reads ``asap run``'s text."""
    s = strategy
    if steps < 1:
        raise AsapError("steps", f"must be >= 1, got {steps}")
    cfg = RunConfig(model=model, strategy=s, global_batch=global_batch, seq_len=seq_len, steps=steps,
                    precision=precision, seed=seed, data=data, lr=lr,
                    profile_dir=str(Path(profile_dir).resolve()) if profile_dir else None,
                    devices_per_node=devices_per_node, documents=documents, balance=balance)
    return launch([cfg], device=device, timeout_s=timeout_s, echo=echo, workdir=workdir, progress=progress)[0]
