"""``python -m asap.execute.launchers.deepspeed_main --asap-config ds.json --asap-model model.json ...``

DeepSpeed's engine (``deepspeed.initialize(config=...)``) on the emitted JSON, training asap's reference
transformer (``asap.runners.torch.model``, the same initialisation from the same seed, and the same synthetic tokens,
as ``asap run``) for ``--asap-steps`` optimizer steps. Started under torchrun, srun or ``deepspeed``. The
engine prints its own timing line (``wall_clock_breakdown`` and ``steps_per_print: 1`` are added when the JSON
does not set them); this script prints ``loss=`` per step (the global mean over data-parallel ranks) and, with
``--asap-profile DIR``, writes rank traces with torch.profiler. ``--asap-cpu``: ``DS_ACCELERATOR=cpu``, gloo and
float32 (bf16 matmuls are very slow on CPUs); a GPU run never takes it.
"""

from __future__ import annotations

import argparse
import json
import os


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--asap-config", required=True)
    p.add_argument("--asap-model", required=True, help="the model as asap's native JSON (ModelSpec.to_dict)")
    p.add_argument("--asap-steps", type=int, default=3)
    p.add_argument("--asap-seq-len", type=int, required=True)
    p.add_argument("--asap-seed", type=int, default=0)
    p.add_argument("--asap-lr", type=float, default=1e-3)
    p.add_argument("--asap-profile", default=None)
    p.add_argument("--asap-cpu", action="store_true")
    return p.parse_args(argv)


def load_config(path: str, cpu: bool) -> dict:
    with open(path) as f:
        cfg = json.load(f)
    cfg.setdefault("wall_clock_breakdown", True)
    cfg.setdefault("steps_per_print", 1)
    if cpu:
        cfg["bf16"] = {"enabled": False}
        cfg["fp16"] = {"enabled": False}
    return cfg


def train(args) -> None:
    if args.asap_cpu:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import torch
    import torch.distributed as dist

    if args.asap_cpu:
        from asap.execute import cpu_shims

        cpu_shims.patch_deepspeed_no_compiled_ops()

    from asap.spec.loader import load_model
    from asap.runners.torch.data import local_rows, make_source
    from asap.runners.torch.model import build_model, cross_entropy

    deepspeed.init_distributed("gloo" if args.asap_cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = load_config(args.asap_config, args.asap_cpu)
    with open(args.asap_model) as f:
        spec = load_model(json.load(f))
    model = build_model(spec, args.asap_seq_len, args.asap_seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.asap_lr)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=cfg)
    dp = engine.dp_world_size
    ga, mbs = engine.gradient_accumulation_steps(), engine.train_micro_batch_size_per_gpu()
    source = make_source(spec.vocab_size, args.asap_seed)
    prof = _profiler(args.asap_profile, args.asap_steps)
    for step in range(args.asap_steps):
        rows = local_rows(source.batch(step, cfg["train_batch_size"], args.asap_seq_len), engine.global_rank % dp, dp)
        total = torch.zeros(())
        for j in range(ga):
            mb = rows[j * mbs:(j + 1) * mbs].to(engine.device)
            loss = cross_entropy(engine(mb[:, :-1]), mb[:, 1:])
            engine.backward(loss)
            engine.step()
            total += loss.detach().float().cpu()
        mean = total / ga
        dist.all_reduce(mean)
        if rank == 0:
            print(f"asap step {step + 1}/{args.asap_steps} loss={float(mean) / world:.5f}", flush=True)
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()
    dist.barrier()


def _profiler(folder: str | None, steps: int):
    """torch.profiler over the last step, one Kineto trace per rank in ``folder``."""
    if not folder:
        return None
    import torch
    import torch.distributed as dist

    os.makedirs(folder, exist_ok=True)
    rank = dist.get_rank()

    def save(p):
        p.export_chrome_trace(os.path.join(folder, f"rank{rank}_trace.json"))

    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                  schedule=torch.profiler.schedule(wait=max(0, steps - 1), warmup=0, active=1),
                                  on_trace_ready=save, record_shapes=True)
    prof.start()
    return prof


if __name__ == "__main__":
    train(parse())
