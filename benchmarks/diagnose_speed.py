"""How long `asap diagnose` takes on a ~100 MB trace (the bar: under 20 s on a 2-core machine).

Synthesizes a Kineto-shaped GPU trace of the given size -- ProfilerStep windows; nested CPU ops with recorded
shapes (aten::linear > aten::addmm, aten::add_, nccl all-reduce); cudaLaunchKernel runtime events with
correlation ids; GEMM, elementwise and NCCL kernels on three streams; the flow events Kineto writes -- then
times the diagnosis end to end (read, parse, link, unions, operator table, bottleneck).

    python benchmarks/diagnose_speed.py [--mb 100] [--gzip] [--keep PATH]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

PID, TID, DEVICE = 4242, 4242, 0


def _events_for_step(step: int, t0: float, rng: random.Random, next_id: list[int], out: list[str]) -> float:
    """Append one training step's events; return the step's end time (us)."""
    t = t0
    step_start = t
    body: list[str] = []
    gpu_t = t0 + 50.0
    for _layer in range(40):
        for kind in ("linear", "add", "allreduce"):
            ext = next_id[0]
            next_id[0] += 1
            corr = ext + 10_000_000
            if kind == "linear":
                m, k, n = 4096, 1024 * rng.choice((1, 2, 4)), 1024
                outer = {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": PID, "tid": TID, "ts": t,
                         "dur": 60.0, "args": {"External id": ext, "Input Dims": [[m, k], [n, k], [n]],
                                               "Input type": ["c10::BFloat16"] * 3, "Sequence number": ext}}
                inner = {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": PID, "tid": TID, "ts": t + 5,
                         "dur": 50.0, "args": {"External id": ext + 1, "Input Dims": [[n], [m, k], [k, n], [], []],
                                               "Input type": ["c10::BFloat16"] * 3 + ["Scalar", "Scalar"],
                                               "Concrete Inputs": ["", "", "", "1", "1"]}}
                kname = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
                kdur, stream = 2 * m * k * n / 600e12 * 1e6, 7
                body += [json.dumps(outer), json.dumps(inner)]
                launch_t = t + 20
                t += 70
            elif kind == "add":
                body.append(json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": PID, "tid": TID,
                                        "ts": t, "dur": 12.0,
                                        "args": {"External id": ext, "Input Dims": [[4096, 1024], [4096, 1024], []],
                                                 "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]}}))
                kname = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
                         "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)")
                kdur, stream = 3 * 4096 * 1024 * 2 / 3.0e12 * 1e6, 7
                launch_t = t + 4
                t += 15
            else:
                body.append(json.dumps({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": PID,
                                        "tid": TID, "ts": t, "dur": 20.0,
                                        "args": {"External id": ext, "Collective name": "allreduce", "dtype": "BFloat16",
                                                 "In msg nelems": 4096 * 1024, "Out msg nelems": 4096 * 1024}}))
                kname = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
                kdur, stream = 4096 * 1024 * 2 / 150e9 * 1e6, 20
                launch_t = t + 6
                t += 25
            body.append(json.dumps({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID,
                                    "tid": TID, "ts": launch_t, "dur": 4.0,
                                    "args": {"External id": ext, "cbid": 211, "correlation": corr}}))
            body.append(json.dumps({"ph": "s", "id": corr, "pid": PID, "tid": TID, "ts": launch_t, "cat": "ac2g",
                                    "name": "ac2g"}))
            start = max(gpu_t, launch_t + 5)
            body.append(json.dumps({"ph": "X", "cat": "kernel", "name": kname, "pid": DEVICE, "tid": stream,
                                    "ts": start, "dur": kdur,
                                    "args": {"External id": ext, "queued": 0, "device": DEVICE, "context": 1,
                                             "stream": stream, "correlation": corr, "registers per thread": 168,
                                             "shared memory": 213188, "blocks per SM": 1.0, "warps per SM": 12.0,
                                             "grid": [132, 1, 1], "block": [384, 1, 1],
                                             "est. achieved occupancy %": 19}}))
            body.append(json.dumps({"ph": "f", "id": corr, "pid": DEVICE, "tid": stream, "ts": start, "cat": "ac2g",
                                    "name": "ac2g", "bp": "e"}))
            if stream == 7:
                gpu_t = start + kdur
    end = max(t, gpu_t) + 30
    out.append(json.dumps({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": PID,
                           "tid": TID, "ts": step_start, "dur": end - step_start, "args": {"External id": next_id[0]}}))
    next_id[0] += 1
    out.extend(body)
    return end


def synthesize(path: Path, megabytes: float, compress: bool) -> int:
    """Write a Kineto-shaped trace of about `megabytes` MB of JSON; return the number of events."""
    rng = random.Random(0)
    events: list[str] = []
    size = 0
    t = 1.7e15
    step, next_id = 1, [1]
    target = megabytes * 1e6
    while size < target:
        before = len(events)
        t = _events_for_step(step, t, rng, next_id, events)
        size += sum(len(e) + 2 for e in events[before:])
        step += 1
    header = ('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", '
              '"totalGlobalMem": 85045477376}], "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8}, '
              '"traceEvents": [\n')
    text = header + ",\n".join(events) + "\n]}\n"
    data = text.encode()
    path.write_bytes(gzip.compress(data, compresslevel=1) if compress else data)
    return len(events)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="size of the trace's JSON in MB")
    parser.add_argument("--gzip", action="store_true", help="write and read it as .json.gz")
    parser.add_argument("--keep", type=Path, help="write the trace here and keep it")
    args = parser.parse_args()
    from asap.profile import diagnose
    from asap.profile import trace as trace_module

    folder = tempfile.mkdtemp()
    path = args.keep or Path(folder) / ("synthetic.json.gz" if args.gzip else "synthetic.json")
    t = time.perf_counter()
    n = synthesize(path, args.mb, args.gzip)
    print(f"synthesized {n} events, {path.stat().st_size / 1e6:.1f} MB on disk in {time.perf_counter() - t:.1f} s",
          file=sys.stderr)
    parser_name = "orjson" if trace_module._orjson is not None else "json (standard library)"
    t = time.perf_counter()
    d = diagnose([path], accelerator="h100-sxm")
    elapsed = time.perf_counter() - t
    print(f"diagnose: {elapsed:.2f} s for {path.stat().st_size / 1e6:.1f} MB ({parser_name}); "
          f"{d.n_steps} steps, step {d.step_time_s * 1e3:.2f} ms, bottleneck {d.bottleneck}")
    if not args.keep:
        os.remove(path)
    return 0 if elapsed < 20 else 1


if __name__ == "__main__":
    sys.exit(main())
