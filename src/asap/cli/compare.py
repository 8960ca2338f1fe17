"""``asap compare``: two or more strategies (or a hand-picked one and the planner's best) side by side."""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import typer
from rich.table import Table

from asap.cli.root import app
from asap.cli.common import (JOB, OPTIONS, JobOptions, JsonOpt, LearnMemoryOpt, PriceOpt, TokensOpt, job_options,
                             out_console, print_json, print_learned, with_learned)
from asap.budget import budget_of, with_budget
from asap.cli.format import seconds


@app.command()
@job_options
def compare(
    model=JOB,
    cluster=JOB,
    global_batch=JOB,
    seq_len=JOB,
    strategy: Optional[List[str]] = typer.Option(None, "--strategy", "-S", help="A strategy ('tp8 pp2' or key=value,...); give it "
                                                                                "two or more times."),
    plan_best: bool = typer.Option(False, "--plan-best", help="Add the planner's fastest fitting strategy."),
    precision=JOB,
    framework=JOB,
    moe_imbalance=JOB,
    nodes=JOB,
    devices=JOB,
    slices=JOB,
    lengths=JOB,
    fused_kernels=JOB,
    tokens: Optional[str] = TokensOpt,
    price_per_device_hour: Optional[float] = PriceOpt,
    memory_margin=JOB,
    memory: Optional[str] = LearnMemoryOpt,
    json_out: bool = JsonOpt,
    options: JobOptions = OPTIONS,  # the job options above, together (``job_options``)
):
    """Estimate each strategy and show them term by term, with the difference that decides it in one sentence."""
    from asap.compare import compare as run_compare
    from asap.cost.estimate import estimate_spelled as run_estimate  # the CLI's text is parsed here
    from asap.spec.strategy import format_compact

    job, learned = with_learned(options.load(), memory)
    budget, price = budget_of(tokens, price_per_device_hour)
    m, c, t = job.model, job.cluster, job.train
    texts = list(strategy or [])
    estimates = [run_estimate(job, s) for s in texts]
    if plan_best:
        from asap.search.planner import plan as run_plan

        best = run_plan(job, top=1).candidates[0]
        estimates.append(best)
    names = [format_compact(e.strategy, c.num_devices, m.moe is not None, job.framework) for e in estimates]
    if plan_best:
        names[-1] = f"best: {names[-1]}"
    result = run_compare(estimates, names)
    result["estimates"] = [with_budget(d, c.num_devices, budget, price) for d in result["estimates"]]
    if json_out:
        print_json({**result, **learned})
        return
    out_console.print(f"[bold]{m.name}[/] on {c.num_devices} x {c.accelerator.name}, global batch {t.global_batch} x "
                      f"{t.seq_len} tokens", soft_wrap=True)
    out_console.print(compare_table(result, names))
    out_console.print(result["verdict"], soft_wrap=True, highlight=False)
    print_learned(learned)


def signed(d: float, fmt) -> str:
    """A difference in its row's own format, with its sign; differences under 1e-9 of a unit are 0."""
    if abs(d) < 1e-9:
        return "0"
    return ("+" if d > 0 else "-") + fmt(abs(d))


def compare_table(result: dict, names: list[str]) -> Table:
    """Rows: the headline figures, then every exposed term and every busy total; a Δ column for two."""
    ests = result["estimates"]
    two = len(ests) == 2
    table = Table(title="side by side", title_justify="left", caption_justify="left",
                  caption="exposed: on the critical path (the exposed terms add up to the step); busy: total time, "
                          "overlapped or not")
    table.add_column("term")
    for i, n in enumerate(names):
        table.add_column(f"{'ABCDEFGH'[i] if i < 8 else i}: {n}", justify="right", overflow="fold",
                         min_width=max(len(tok) for tok in f"X: {n}".split()))
    if two:
        table.add_column("B - A", justify="right")
    # (label, the figure of one estimate's dict (the per-key getters bind k as a default), how it prints)
    rows: list[tuple[str, Callable[..., Any], Callable[[Any], str]]]
    rows = [("step", lambda e: e["step_time_s"], seconds),
            ("tokens/s", lambda e: e["tokens_per_s"], lambda x: f"{x:,.0f}"),
            ("MFU (of the bf16 peak)", lambda e: e["mfu"], lambda x: f"{x:.1%}"),
            ("peak memory GiB reserved", lambda e: e["peak_memory_gb"], lambda x: f"{x:.1f}"),
            ("fits", lambda e: e["fits"], lambda x: "yes" if x else "no")]
    rows += [(f"exposed {k}", lambda e, k=k: e["exposed_s"].get(k, 0.0), seconds) for k in ests[0]["exposed_s"]]
    rows += [(f"busy {k}", lambda e, k=k: e["breakdown_s"].get(k, 0.0), seconds) for k in ests[0]["breakdown_s"]]
    rows += [(f"memory {k} GiB" + (" (allocated: the tensors)" if k == "allocated" else ""), lambda e, k=k: e["memory_gb"].get(k, 0.0), lambda x: f"{x:.2f}")
             for k in ests[0]["memory_gb"]]
    if "time_to_train_days" in ests[0]:
        rows += [("days to train", lambda e: e["time_to_train_days"], lambda x: f"{x:,.1f}"),
                 ("device-hours", lambda e: e["device_hours"], lambda x: f"{x:,.0f}")]
    for label, get, fmt in rows:
        vals = [get(e) for e in ests]
        cells = [fmt(v) for v in vals]
        if two:
            cells.append("" if isinstance(vals[0], bool) else signed(vals[1] - vals[0], fmt))
        table.add_row(label, *cells)
    table.add_row("bottleneck", *[e["bottleneck"] for e in ests], *([""] if two else []))
    return table
