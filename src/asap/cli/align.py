"""``asap align``: two real runs on the same seed and data, compared operator by operator and loss by loss."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from asap.cli.root import app
from asap.cli.choices import DEVICE_REQUESTS, RUN_PRECISIONS, choice
from asap.cli.common import print_json
from asap.errors import AsapError


@app.command("align")
def align_command(
    model: str = typer.Option(..., "--model", "-m", help="A preset name, a native model file or a Hugging Face config.json."),
    strategy_a: str = typer.Option(..., "--a", help="The reference strategy (key=value pairs, as asap run --strategy)."),
    strategy_b: str = typer.Option(..., "--b", help="The strategy compared with it."),
    precision_a: str = choice("fp32", "--a-precision", values=RUN_PRECISIONS, what="precision",
                                    help="The precision of run a."),
    precision_b: str = choice("fp32", "--b-precision", values=RUN_PRECISIONS, what="precision",
                                    help="The precision of run b."),
    global_batch: int = typer.Option(..., "--global-batch", "-b", help="Sequences per step."),
    seq_len: int = typer.Option(..., "--seq-len", "-s", help="Tokens per sequence."),
    steps: int = typer.Option(3, "--steps", help="Training steps of each run (losses compared at every step)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the weights and the data (the same for both runs)."),
    device: str = choice("auto", "--device", values=DEVICE_REQUESTS, what="device",
                               help="auto: CUDA when there are GPUs."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Kill a run after this many seconds."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Echo the workers' output to stderr."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
) -> None:
    """Does strategy B (at its precision) reproduce strategy A's numerics? If not, the first operator that diverges."""
    from asap.numerics.align import align
    from asap.spec.loader import load_model
    from asap.runners.torch.launch import RunFailed

    if timeout is not None and timeout <= 0:
        raise AsapError("timeout", f"must be positive, got {timeout}")
    from asap.runners.common import need_torch

    need_torch("align")
    spec = load_model(model)
    try:
        result = align(spec, strategy_a, strategy_b, precision_a=precision_a, precision_b=precision_b,
                       global_batch=global_batch, seq_len=seq_len, steps=steps, seed=seed, device=device,
                       timeout_s=timeout, echo=sys.stderr if verbose else None)
    except RunFailed as e:
        print(f"error: run failed ({e.kind}): {e.reason}", file=sys.stderr)
        raise typer.Exit(1) from None
    if json_out:
        print_json(result)
        return
    _print_summary(result)


def _print_summary(r: dict) -> None:
    print(f"{'aligned' if r['aligned'] else 'NOT aligned'}: {r['ops_compared']} operators compared, "
          f"largest loss difference {r['max_loss_rel_diff']:.3g} (relative)")
    print("loss a: " + " ".join(f"{x:.6f}" for x in r["loss_a"]))
    print("loss b: " + " ".join(f"{x:.6f}" for x in r["loss_b"]))
    d = r["first_divergence"]
    if d is not None:
        err = "shapes differ" if d["rel_error"] is None else f"relative error {d['rel_error']:.3g}"
        print(f"first divergence: {d['op']} ({err} > tolerance {d['tolerance']:.3g})")
