"""``asap run``: a real training run of the reference trainer under torchrun (CPU/gloo or CUDA/NCCL)."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from asap.cli.root import app
from asap.cli.choices import BACKENDS, DEVICE_REQUESTS, RUN_PRECISIONS, choice
from asap.cli.common import print_json
from asap.errors import AsapError


@app.command("run")
def run_command(
    model: str = typer.Option(..., "--model", "-m", help="A preset name, a native model file or a Hugging Face config.json."),
    strategy: str = typer.Option("", "--strategy", "-S", help="key=value pairs: dp, tp, pp, vpp, cp, ep, etp, mbs, recompute, "
                                                       "zero, sp, schedule, layer_split. dp left out: 1 (dense) or the "
                                                       "least that expert folding allows; nproc = dp*tp*pp*cp."),
    layer_split: Optional[str] = typer.Option(None, "--layer-split", help="Transformer layers per pipeline chunk in chunk "
                                                                        "order, e.g. 5,4,4,3 or 5/4/4/3 (the strategy "
                                                                        "key layer_split; default: the split estimate "
                                                                        "prices)."),
    global_batch: int = typer.Option(..., "--global-batch", "-b", help="Sequences per step."),
    seq_len: int = typer.Option(..., "--seq-len", "-s", help="Tokens per sequence."),
    steps: int = typer.Option(5, "--steps", help="Training steps (the first is warm-up when there are several)."),
    precision: Optional[str] = choice(None, "--precision", values=RUN_PRECISIONS, what="precision",
                                     help="The run's precision (default: fp32 on CPU, bf16 on CUDA)."),
    profile: Optional[str] = typer.Option(None, "--profile", help="Write a PyTorch profiler trace per rank into DIR "
                                                                "(jax: a perfetto trace and an XProf .xplane.pb)."),
    backend: str = choice("torch", "--backend", values=BACKENDS, what="backend",
                                help="torch (torchrun, the reference trainer) or jax (one process, GSPMD on a named "
                                     "device mesh)."),
    device: str = choice("auto", "--device", values=DEVICE_REQUESTS, what="device",
                               help="auto: CUDA when there are GPUs."),
    data: Optional[str] = typer.Option(None, "--data", help="A text file (one byte per token) instead of the seeded synthetic stream."),
    lengths: Optional[str] = typer.Option(None, "--lengths", help="Packed samples (a JSON list of document-length "
                                                                   "lists, or document lengths to pack): "
                                                                   "document-masked attention over them, a global "
                                                                   "batch of them per step."),
    balance: bool = typer.Option(False, "--balance", help="With --lengths: place each step's samples over dp ranks x "
                                                         "micro-batches by asap balance (the same samples)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the weights and the data."),
    lr: float = typer.Option(1e-3, "--lr", help="AdamW learning rate."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Kill the run after this many seconds."),
    devices_per_node: Optional[int] = typer.Option(None, "--devices-per-node", help="Group the processes into "
                                                   "\"nodes\" of K consecutive ranks for hierarchical collectives "
                                                   "(dispatcher=dedup); reports the bytes MoE dispatch sends across them."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Echo the workers' output to stderr."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
) -> None:
    """Train MODEL for a few steps under STRATEGY on torch.distributed and report what was measured."""
    from asap.spec.loader import load_model
    from asap.spec.train import TrainSpec
    from asap.runners.torch.launch import (RunConfig, check_devices_per_node, check_inputs, check_supported,
                                           detect_device, resolve_run_strategy)
    from asap.runners.torch.launch import run as run_training

    # --precision, --backend and --device are checked by their options (asap.cli.choices)
    if steps < 1:
        raise AsapError("steps", f"must be >= 1, got {steps}")
    if timeout is not None and timeout <= 0:
        raise AsapError("timeout", f"must be positive, got {timeout}")
    spec = load_model(model)
    train = TrainSpec(global_batch, seq_len, precision or "fp32")
    s = resolve_run_strategy(strategy, spec, train, layer_split=layer_split)
    if backend == "jax":
        for name, given in (("lengths", lengths), ("balance", balance), ("devices-per-node", devices_per_node)):
            if given:
                raise AsapError(name, "is a torch backend option (the jax backend has no packed documents or "
                                      "two-level collectives)")
        _run_jax(spec, s, train, steps, profile, seed, data, lr, timeout, verbose, json_out)
        return
    from asap.runners.common import need_torch

    need_torch("run")
    dev = detect_device(device, s.devices)
    prec = precision or ("bf16" if dev == "cuda" else "fp32")
    train = TrainSpec(global_batch, seq_len, prec)
    check_supported(spec, s, train, dev)
    check_devices_per_node(s, devices_per_node)
    # the data file, the profile folder and host memory: refused here, before any worker starts
    documents = _documents(lengths, seq_len)
    check_inputs(RunConfig(model=spec, strategy=s, global_batch=global_batch, seq_len=seq_len, steps=steps,
                           precision=prec, data=data, profile_dir=profile, documents=documents, balance=balance), dev)
    print(f"[asap run] {spec.name}: {s} on {s.devices} {dev} process(es), {steps} steps, {prec}", file=sys.stderr)
    _report(lambda: run_training(spec, s, global_batch, seq_len, steps, precision=prec, profile_dir=profile,
                                 seed=seed, data=data, lr=lr, device=dev, timeout_s=timeout,
                                 echo=sys.stderr if verbose else None, progress=None if json_out else sys.stderr,
                                 devices_per_node=devices_per_node, documents=documents, balance=balance),
            verbose, json_out)


def _report(launch, verbose: bool, json_out: bool, mesh: dict | None = None) -> None:
    """Run ``launch`` (either backend's), then print what it measured; a failed run is one line, exit 1."""
    from asap.runners.torch.launch import RunFailed

    try:
        res = launch()
    except RunFailed as e:
        print(f"error: run failed ({e.kind}): {e.reason}", file=sys.stderr)
        if verbose and e.log_tail:
            print(e.log_tail, file=sys.stderr)
        raise typer.Exit(1) from None
    if json_out:
        print_json({**res.to_dict(), **({"mesh": res.mesh} if mesh is not None else {})})
        return
    print(f"step time {res.step_time_s:.4f} s (median after warm-up), {res.tokens_per_s:,.0f} tokens/s, "
          f"peak memory {res.peak_memory_gb:.2f} GiB allocated (CUDA max_memory_allocated; CPU: peak resident set)" + (f", mesh {mesh}" if mesh is not None else ""))
    print("losses: " + " ".join(f"{x:.5f}" for x in res.losses))
    if res.attention_max_over_mean is not None:
        print("attention work per dp rank (sum l^2 / rows x S^2): "
              + " ".join(f"{w:.3f}" for w in res.attention_work_per_dp_rank)
              + f"; slowest {res.attention_max_over_mean:.3f}x the mean")
    for t in res.traces:
        print(f"trace: {t}")


def _run_jax(spec, s, train, steps, profile, seed, data, lr, timeout, verbose, json_out) -> None:
    """``--backend jax``: the same run on a JAX mesh in one child process (``asap.runners.jax``)."""
    import importlib.util

    from asap.runners.jax.launch import check_supported_jax, run as run_jax
    from asap.runners.jax.shard import mesh_shape
    from asap.runners.torch.launch import RunConfig, check_inputs

    if importlib.util.find_spec("jax") is None:
        raise AsapError("backend", "the jax backend needs JAX (pip install jax)")
    check_supported_jax(spec, s, train)
    check_inputs(RunConfig(model=spec, strategy=s, global_batch=train.global_batch, seq_len=train.seq_len,
                           steps=steps, precision=train.precision, data=data, profile_dir=profile), "cpu")
    mesh = {k: v for k, v in mesh_shape(s).items() if v > 1} or {"data": 1}
    print(f"[asap run] {spec.name}: {s} on a JAX mesh {mesh}, {steps} steps, {train.precision}", file=sys.stderr)
    _report(lambda: run_jax(spec, s, train.global_batch, train.seq_len, steps, precision=train.precision,
                            profile_dir=profile, seed=seed, data=data, lr=lr, timeout_s=timeout,
                            echo=sys.stderr if verbose else None, progress=None if json_out else sys.stderr),
            verbose, json_out, mesh)


def _documents(path: Optional[str], seq_len: int):
    """``--lengths FILE`` as packed samples (a flat list of documents is packed first), or None."""
    if path is None:
        return None
    from asap.balance import parse_samples, read_lengths

    samples, _ = parse_samples(read_lengths(path), seq_len)
    return samples
