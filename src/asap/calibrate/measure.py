"""The calibration worker: one process per device, ``python -m asap.calibrate --worker CONFIG RANK``, that times
GEMMs, memory bandwidth, host overhead per operator and collectives over every group size, all ranks at once as
in a real run, and writes its timings as JSON for ``asap.calibrate.orchestrate`` to collect.

This module imports only the standard library at the top (torch inside the worker's functions), so that a
worker starts fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

KIB, MIB = 1024, 1024 * 1024
# Calls per repeat of a collective (when shorter than 5 ms) at least: a median over enough calls to see past the
# stalls of a shared machine.
COLL_MIN_CALLS = 20


def worker_main(cfg_path: str, rank: int) -> int:
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


class _Bench:
    """One rank's measuring context: its device and clock, the process group, the progress file rank 0 keeps,
    and rank 0's loop counts agreed by every rank."""

    def __init__(self, cfg: dict, rank: int, torch, dist):
        from datetime import timedelta

        self.torch, self.dist, self.rank = torch, dist, rank
        self.plan, self.world, self.dev_kind = cfg["plan"], int(cfg["world"]), cfg["device"]
        if self.dev_kind == "cuda":
            torch.cuda.set_device(rank)
            self.dev = torch.device("cuda", rank)
            backend, self.dtype = "nccl", torch.bfloat16
        else:
            torch.set_num_threads(int(cfg["threads"]))
            self.dev = torch.device("cpu")
            backend, self.dtype = "gloo", torch.float32
        dist.init_process_group(backend, init_method=f"file://{cfg['init_file']}", rank=rank, world_size=self.world,
                                timeout=timedelta(seconds=float(cfg["pg_timeout_s"])),
                                **({"device_id": self.dev} if self.dev_kind == "cuda" else {}))
        self.done, self.total = 0, 0
        self.progress_path = Path(cfg["out_dir"]) / "progress.json"
        self.target, self.repeats = float(self.plan["target_s"]), int(self.plan["repeats"])

    def sync(self) -> None:
        if self.dev_kind == "cuda":
            self.torch.cuda.synchronize()
        # CPU ops return when done: nothing to wait for

    def tick(self, label: str, step: int = 1) -> None:
        self.done += step
        if self.rank == 0:
            tmp = self.progress_path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"label": label, "done": self.done, "total": self.total}))
            os.replace(tmp, self.progress_path)

    def agree(self, *xs: int) -> list[int]:
        """Rank 0's loop counts, for every rank: the same work at the same time on all of them."""
        t = self.torch.tensor([int(x) for x in xs], dtype=self.torch.int64,
                              device=self.dev if self.dev_kind == "cuda" else "cpu")
        self.dist.broadcast(t, 0)
        return [int(v) for v in t.tolist()]

    def timed(self, fn, reps: int, tgt: float, warmup: int = 2, barrier=None, min_calls: int = 1,
              per_call: bool = False) -> dict[str, Any]:
        return _timed(fn, self.sync, self.agree, reps, tgt, warmup, barrier or self.dist.barrier,
                      per_call=per_call and self.dev_kind == "cpu", min_calls=min_calls)


def _measure(cfg: dict, rank: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    b = _Bench(cfg, rank, torch, dist)
    plan, world = b.plan, b.world
    groups = [g for g in cfg["groups"] if g <= world]
    ms = [(m, n, k) for m in plan["gemm_m"] for n in plan["gemm_nk"] for k in plan["gemm_nk"]]
    b.total = len(ms) + 2 + 2 + 1 + len(groups) * (int(plan["coll_repeats"]) + 1)
    # every rank in one group of each size (consecutive ranks), for the synchronised-call measurement
    partitions = {g: [dist.new_group(list(range(i, i + g))) for i in range(0, world - world % g, g)] for g in groups}
    b.tick("starting", 0)
    result: dict[str, Any] = {"rank": rank, "threads": torch.get_num_threads(), "gemm": _measure_gemms(b, ms),
                              "memory": _measure_memory(b), "host": _measure_host(b), "collectives": [], "sync": []}
    for g in groups:
        result["collectives"] += _measure_collectives(b, g, partitions[g])
    # blocking calls between bursts of compute, every rank in a group of g at once, as a training step
    # interleaves them: what one costs beyond the compute and the call timed apart (peers late, descheduled)
    burn_a = torch.randn(64, 64, device=b.dev, dtype=b.dtype)
    small = torch.ones(64, device=b.dev, dtype=torch.float32)
    for g in groups:
        own = partitions[g][rank // g] if rank < len(partitions[g]) * g else None
        result["sync"].append({"group": g, **_sync_wait(torch, dist, b.sync, b.agree, own, burn_a, small, plan)})
        b.tick(f"synchronised calls g={g}")
    pair = partitions[groups[0]][rank // groups[0]] if rank < len(partitions[groups[0]]) * groups[0] else None
    result["host"].append(_functional_call_extra(torch, dist, b.dev, pair, b.timed, plan))
    if rank == 0:
        result["info"] = _info(torch, b.dev_kind)
    dist.barrier()
    dist.destroy_process_group()
    return result


def _measure_gemms(b: _Bench, ms: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    out = []
    for (m, n, k) in ms:
        out.append({"m": m, "n": n, "k": k, **_time_gemm(b, m, n, k)})
        b.tick(f"GEMM {m}x{n}x{k}")
    return out


def _time_gemm(b: _Bench, m: int, n: int, k: int) -> dict[str, Any]:
    """One (m x k) @ (k x n) GEMM into a preallocated output; its operands are freed on return."""
    x = b.torch.randn(m, k, device=b.dev, dtype=b.dtype)
    y = b.torch.randn(k, n, device=b.dev, dtype=b.dtype)
    z = b.torch.empty(m, n, device=b.dev, dtype=b.dtype)
    return b.timed(lambda: b.torch.matmul(x, y, out=z), b.repeats, b.target)


def _measure_memory(b: _Bench) -> list[dict[str, Any]]:
    """Memory bandwidth: a streaming add (2 reads, 1 write) and a copy (1 read, 1 write)."""
    torch, out = b.torch, []
    numel = int(b.plan["mem_bytes"]) // 4
    x = torch.ones(numel, device=b.dev, dtype=torch.float32)
    y = torch.ones(numel, device=b.dev, dtype=torch.float32)
    z = torch.empty(numel, device=b.dev, dtype=torch.float32)
    out.append({"name": "add", "bytes": 3 * numel * 4,
                **b.timed(lambda: torch.add(x, y, out=z), b.repeats, b.target, warmup=1)})
    b.tick("memory add")
    out.append({"name": "copy", "bytes": 2 * numel * 4, **b.timed(lambda: z.copy_(x), b.repeats, b.target,
                                                                  warmup=1)})
    b.tick("memory copy")
    return out


def _measure_host(b: _Bench) -> list[dict[str, Any]]:
    """Host overhead: a 1-element add, a small Linear forward + backward under autograd, the DTensor extra and
    the reference trainer's transformer blocks."""
    torch, dev, out = b.torch, b.dev, []
    p = torch.ones(1, device=dev)
    q = torch.ones(1, device=dev)
    r = torch.empty(1, device=dev)
    out.append({"name": "tiny_add", "ops": 1, **b.timed(lambda: torch.add(p, q, out=r), b.repeats, b.target)})
    b.tick("host: tiny add")
    lin = torch.nn.Linear(16, 16, device=dev)
    inp = torch.randn(8, 16, device=dev)

    def step():
        lin(inp).sum().backward()

    ops = _count_ops(step)
    out.append({"name": "linear_fwd_bwd", "ops": ops, **b.timed(step, b.repeats, b.target)})
    b.tick("host: linear fwd+bwd")
    out.append(_dtensor_add(torch, b.dist, dev, b.dev_kind, b.world, b.timed, b.repeats, b.target))
    b.tick("host: DTensor add")
    for hidden, seq in HOST_BLOCKS:
        out.append(_block_step(torch, dev, b.dtype, hidden, seq, b.timed, b.repeats, b.target))
    b.tick("host: transformer blocks")
    return out


def _collective_calls(b: _Bench, g: int, sub) -> tuple[list[tuple[str, int]], list]:
    """Every (op, size) point of one group size and the call that times it."""
    torch, dist, dev = b.torch, b.dist, b.dev
    ag_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    points: list[tuple[str, int]] = []
    fns: list[Callable[[], Any]] = []  # each call's arguments bound as defaults
    for op in ("all_reduce", "all_gather", "broadcast"):
        for size in b.plan["coll_bytes"]:
            size = int(size) // (4 * g) * (4 * g)
            if op == "all_reduce":
                buf = torch.ones(size // 4, device=dev, dtype=torch.float32)

                def all_reduce(buf=buf, sub=sub):
                    dist.all_reduce(buf, group=sub)
                fns.append(all_reduce)
            elif op == "broadcast":  # from the group's first rank (torch's ZeRO-1 broadcasts each tensor)
                buf = torch.ones(size // 4, device=dev, dtype=torch.float32)

                def broadcast(buf=buf, sub=sub, src=b.rank // g * g):
                    dist.broadcast(buf, src=src, group=sub)
                fns.append(broadcast)
            else:
                full = torch.empty(size // 4, device=dev, dtype=torch.float32)
                part = torch.ones(size // 4 // g, device=dev, dtype=torch.float32)

                def all_gather(full=full, part=part, sub=sub):
                    ag_single(full, part, group=sub)
                fns.append(all_gather)
            points.append((op, size))
    return points, fns


def _measure_collectives(b: _Bench, g: int, partition: list) -> list[dict[str, Any]]:
    """Collectives over groups of ``g``: every (op, size) point's repeats taken in turn, so that a burst of
    stalls (they last a few tenths of a second here) falls on one repeat of many points, not on every repeat of
    one. Every rank is in a group of g at once (consecutive ranks), as a run's tensor- or data-parallel groups
    communicate side by side: the figures are a loaded machine's, not one lone group's."""
    torch, dist, plan, rank = b.torch, b.dist, b.plan, b.rank
    coll_reps = int(plan["coll_repeats"])
    sub = partition[rank // g] if rank < len(partition) * g else None
    member = sub is not None
    points, fns = _collective_calls(b, g, sub)
    # a group's first calls run slow for a few tenths of a second (fresh connections, a process that has been
    # waiting): warm it up before timing anything on it
    warm = torch.ones(16 * KIB, device=b.dev, dtype=torch.float32)
    bar = (lambda sub=sub: dist.barrier(group=sub)) if member else None
    _timed_many([lambda: dist.all_reduce(warm, group=sub)], b.sync, b.agree, 1, float(plan["coll_warmup_s"]), 2,
                bar, per_call=False, member=member)
    timings = _timed_many(fns, b.sync, b.agree, coll_reps, float(plan["coll_target_s"]), 2, bar,
                          per_call=b.dev_kind == "cpu", min_calls=COLL_MIN_CALLS, member=member,
                          on_round=lambda i, g=g: b.tick(f"collectives g={g}: round {i + 1} of {coll_reps}"))
    dist.barrier()
    return [{"op": op, "group": g, "bytes": size, **t} for (op, size), t in zip(points, timings, strict=True)]


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
    from asap.runners.torch.model import ModelArgs, TransformerBlock, rope_table

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
            "times_s": [max(0.0, b - a) for a, b in zip(d["times_s"], f["times_s"], strict=True)]}


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
    extra = [max(0.0, d - p) / n_dt for d, p in zip(dt["times_s"], plain["times_s"], strict=True)]
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
