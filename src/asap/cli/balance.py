"""``asap balance``: spread packed samples over data-parallel ranks and micro-batches by attention cost."""

from __future__ import annotations

from typing import Optional

import typer
from rich.console import JustifyMethod
from rich.table import Table

from asap.cli.root import app
from asap.cli.choices import PRECISIONS, choice
from asap.cli.common import err_console, out_console, print_json
from asap.errors import AsapError


@app.command("balance")
def balance_command(
    lengths: Optional[str] = typer.Option(None, "--lengths", "-l",
                                          help="JSON file: a list of packed samples (each a list of document "
                                               "lengths in tokens) or a flat list of document lengths (packed "
                                               "first, first-fit decreasing into --seq-len)."),
    dp: Optional[int] = typer.Option(None, "--dp", help="Data-parallel ranks."),
    micro_batches: Optional[int] = typer.Option(None, "--micro-batches", help="Micro-batches per rank and step."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", "-s", help="Tokens per packed sample."),
    model: Optional[str] = typer.Option(None, "--model", "-m",
                                        help="The model whose attention and GEMMs price a sample (default: "
                                             "llama3-8b, said so in the output)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c",
                                          help="The cluster whose accelerator prices a sample (default: h100-sxm)."),
    precision: str = choice("bf16", "--precision", values=PRECISIONS, what="precision",
                                  help="The precision that prices a sample."),
    time_budget: float = typer.Option(1.0, "--time-budget", help="Seconds the swap refinement may take."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
):
    """Assign packed samples to ranks x micro-batches so that no rank waits on a slower one."""
    from asap.balance import balance_lengths, read_lengths

    for name, v in (("lengths", lengths), ("dp", dp), ("micro-batches", micro_batches), ("seq-len", seq_len)):
        if v is None:
            raise AsapError(name, f"missing: --{name}")
    assert lengths is not None and dp is not None and micro_batches is not None and seq_len is not None  # as above
    for name, v in (("dp", dp), ("micro-batches", micro_batches), ("seq-len", seq_len)):
        if v <= 0:
            raise AsapError(name, f"must be a positive integer, got {v}")
    if cluster is not None and model is None:
        err_console.print("note: --cluster without --model prices the default model (llama3-8b)", highlight=False)
    data = read_lengths(lengths)
    result = balance_lengths(data, dp, micro_batches, seq_len, model=model, cluster=cluster, precision=precision,
                             time_budget_s=time_budget)
    if json_out:
        print_json(result)
        return
    out_console.print(summary_table(result))
    c = result["coefficients"]
    note = " (default model: no --model given)" if c["default"] else ""
    out_console.print(f"{result['samples']} samples{' (packed from document lengths)' if result['packed'] else ''}"
                      f", micro-batch size {result['micro_batch_size']}; cost = {c['a']:.3g} s x sum(len^2) + "
                      f"{c['b']:.3g} s x tokens, {c['model']} on {c['cluster']}{note}; predicted gain "
                      f"{100 * result['predicted_gain']:.1f}% of the slowest rank's time, found in "
                      f"{result['time_s']:.2f} s", highlight=False)


def summary_table(result) -> Table:
    table = Table(title=f"balance over {result['dp']} ranks x {result['micro_batches']} micro-batches")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("", "left"), ("rank max/mean", "right"), ("rank max (s)", "right"), ("rank mean (s)", "right"),
        ("micro-batch max/mean", "right"), ("micro-batch max (s)", "right"))
    for col, just in columns:
        table.add_column(col, justify=just)
    for label in ("before", "after"):
        f = result[label]
        table.add_row(label + (" (round-robin)" if label == "before" else ""), f"{f['max_over_mean']:.4f}",
                      f"{f['max_s']:.4g}", f"{f['mean_s']:.4g}", f"{f['micro_batch_max_over_mean']:.4f}",
                      f"{f['micro_batch_max_s']:.4g}")
    return table
