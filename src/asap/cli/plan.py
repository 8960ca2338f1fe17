"""``asap plan``: the fastest fitting strategies for a model, a cluster and a batch."""

from __future__ import annotations

from typing import Optional

import typer
from rich.progress import Progress
from rich.table import Table

from asap.cli.root import app
from asap.cli.common import err_console, out_console, print_json
from asap.errors import AsapError
from asap.cli.estimate import (BatchOpt, ClusterOpt, DevicesOpt, FrameworkOpt, FusedOpt, JsonOpt, LengthsOpt,
                               MemoryMarginOpt, ModelOpt, MoEImbalanceOpt, NodesOpt, PrecisionOpt, PriceOpt, SeqOpt,
                               TokensOpt, budget_of, load_job, seconds, with_budget, with_lengths)


@app.command()
def plan(
    model: str = ModelOpt,
    cluster: str = ClusterOpt,
    global_batch: int = BatchOpt,
    seq_len: int = SeqOpt,
    fix: str = typer.Option("", "--fix", help="Pin any subset of the strategy keys: key=value,..."),
    top: int = typer.Option(5, "--top", min=1, help="How many candidates to return."),
    include_oom: bool = typer.Option(False, "--include-oom", help="Rank configurations that do not fit too."),
    all_rows: bool = typer.Option(False, "--all", help="Every ranked row, not only the fastest of each (tp, pp, cp, ep) "
                                                       "shape."),
    ilp_candidates: int = typer.Option(1, "--ilp-candidates", min=0,
                                       help="How many of the best pipelined candidates get the stage-split ILP."),
    ilp_time_limit: Optional[float] = typer.Option(None, "--ilp-time-limit", min=0.05,
                                                   help="A wall-clock limit per ILP (s); default none, since it "
                                                        "makes the plan depend on machine load."),
    ilp_work_limit: int = typer.Option(500, "--ilp-work-limit", min=1,
                                       help="Branch-and-bound nodes per ILP (a deterministic work limit)."),
    time_limit: float = typer.Option(60.0, "--time-limit", help="The whole search's budget (s): past it the plan "
                                                                  "ranks what it priced and says it stopped early."),
    precision: str = PrecisionOpt,
    framework: Optional[str] = FrameworkOpt,
    moe_imbalance: float = MoEImbalanceOpt,
    nodes: Optional[int] = NodesOpt,
    devices: Optional[int] = DevicesOpt,
    lengths: Optional[str] = LengthsOpt,
    fused_kernels: Optional[bool] = FusedOpt,
    tokens: Optional[str] = TokensOpt,
    price_per_device_hour: Optional[float] = PriceOpt,
    memory_margin: float = MemoryMarginOpt,
    emit: Optional[str] = typer.Option(None, "--emit", help="Also write the best plan as FORMAT's launch config "
                                                             "(megatron, torchtitan, maxtext, mindformers, deepspeed)."),
    json_out: bool = JsonOpt,
):
    """Search every legal parallel configuration and rank the fitting ones, fastest first."""
    from asap.spec.strategy import parse_strategy

    if emit is not None:
        from asap.emit import FRAMEWORK_OF, check_format

        check_format(emit)  # an unknown format: one line before the search
        framework = framework or FRAMEWORK_OF[emit]  # plan with the options the format's stack has
    m, c, t = load_job(model, cluster, nodes, devices, global_batch, seq_len, precision, framework, moe_imbalance,
                       fused_kernels, memory_margin)
    budget, price = budget_of(tokens, price_per_device_hour)
    t, aw, _ = with_lengths(c, t, lengths)
    fixed = parse_strategy(fix, field="fix")
    result = _search(m, c, t, fixed, top=top, include_oom=include_oom, ilp_candidates=ilp_candidates,
                     ilp_time_limit_s=ilp_time_limit, distinct=not all_rows, time_limit_s=time_limit,
                     ilp_work_limit_nodes=ilp_work_limit)
    emitted = _emit_best(emit, m, c, t, result) if emit is not None else None
    if json_out:
        _print_json(result, c, budget, price, emitted, aw, lengths)
    elif emitted:
        _print_emitted(emitted)
    else:
        _print_text(result, m, c, t, include_oom, budget, price)


def _search(m, c, t, fixed: dict, **options):
    """``asap.search.planner.plan`` over the job, with a progress bar on stderr (a terminal's) for searches that
    take more than a chunk."""
    from asap.search.planner import plan as run_plan

    with Progress(console=err_console, transient=True, disable=not err_console.is_terminal) as progress:
        task = progress.add_task("pricing configurations", total=None, visible=False)

        def on_chunk(done: int, total: int) -> None:  # shown only for searches that take more than a chunk
            progress.update(task, completed=done, total=total, visible=total > 131072)

        return run_plan(m, c, t, fixed, progress=on_chunk, **options)


def _print_json(result, c, budget, price, emitted: dict | None, aw, lengths: str | None) -> None:
    """The plan as one JSON document: the search's result, each candidate's budget, the emitted config and the
    lengths file's summary where there are."""
    out = result.to_dict()
    out["candidates"] = [with_budget(d, c.num_devices, budget, price) for d in out["candidates"]]
    print_json({**out, **({"emit": emitted} if emitted else {}),
                **({"lengths": {**aw.to_dict(), "file": lengths}} if aw is not None else {})})


def _print_emitted(emitted: dict) -> None:
    """``--emit``: the launch config on stdout, a note on stderr for each faster candidate it cannot express."""
    for sk in emitted["skipped"]:
        err_console.print(f"note: a faster candidate {sk['strategy_string']} is not expressible: {sk['reason']}",
                          markup=False, highlight=False, soft_wrap=True)
    print(emitted["text"])


def _print_text(result, m, c, t, include_oom: bool, budget, price) -> None:
    """The plan for a reader: what was searched, the candidates, the Pareto front, the MaxText mesh of the first
    candidate that has one, and the stage ILP's word on each pipelined candidate."""
    from asap.cost.estimate import framework_of
    from asap.spec.words import count_text

    out_console.print(f"[bold]{m.name}[/] ({count_text(m.num_params())} parameters) on {c.num_devices} x "
                      f"{c.accelerator.name}: searched {result.searched:,} configurations ({result.fitting:,} fit) "
                      f"in {result.search_time_s:.2f} s", soft_wrap=True)
    if result.stopped_early:
        out_console.print(f"[yellow]stopped early[/]: {result.stop_reason} (--time-limit raises the budget)",
                          soft_wrap=True)
    fw = framework_of(t, c)
    out_console.print(candidates_table(result, c.num_devices, m.moe is not None, fw, include_oom, budget, price))
    if len(result.pareto) > 1:
        out_console.print(pareto_table(result, c.num_devices, m.moe is not None, fw))
    for e, mesh in zip(result.candidates, result.meshes):
        if mesh:
            out_console.print("MaxText mesh: " + " ".join(f"{k}={v}" for k, v in mesh.items() if v != 1 or "ici" in k))
            break
    for i, (e, split) in enumerate(zip(result.candidates, result.stage_splits), 1):
        if split and split.get("layers_per_stage"):
            out_console.print(stage_split_line(i, e, split))


def _emit_best(fmt: str, m, c, t, result) -> dict:
    """The best candidate the format can express, in its own options (``asap emit``), planned with the stack
    the format is; the faster candidates it cannot express are listed with the reason."""
    from asap.cli.emit import emit_strategy

    if not result.candidates:
        raise AsapError("emit", "no fitting candidate to emit")
    skipped = []
    for e in result.candidates:
        try:
            text = emit_strategy(fmt, m, c, t, e.strategy)
        except AsapError as err:
            skipped.append({"strategy_string": str(e.strategy), "reason": str(err)})
            continue
        return {"format": fmt, "text": text, "strategy_string": str(e.strategy), "skipped": skipped}
    raise AsapError("emit", f"none of the {len(result.candidates)} best candidates can be written as {fmt}: "
                            f"{skipped[0]['reason']}")


def candidates_table(result, devices: int, moe: bool, framework=None, include_oom: bool = False,
                     tokens: Optional[float] = None, price: Optional[float] = None) -> Table:
    """One row per candidate: its strategy (the keys that differ from estimate's defaults; the JSON output has
    every key in ``strategy_string``) and the figures estimate gives for it."""
    from asap.budget import training_budget
    from asap.spec.strategy import non_default_keys

    shape = "the fastest of each tp, pp, cp, ep shape (--all: every row)" if result.distinct else "every row"
    table = Table(title=f"fastest configurations: {shape}", title_justify="left", caption_justify="left",
                  caption="asap estimate --strategy <strategy> gives each row. ≈: its margin over the best is within "
                          "the model's error on the terms in which they differ (tie_with_best), a tie the model cannot "
                          "break: measure to decide.")
    cols = ["#", "strategy", "step", "likely range", "tokens/s", "MFU", "GiB", "bottleneck"]
    cols += ["fits"] if include_oom else []
    cols += ["days", "device-hours"] + (["cost"] if price is not None else []) if tokens is not None else []
    for col in cols:
        table.add_column(col, justify="left" if col in ("strategy", "bottleneck", "fits") else "right")
    for i, (e, tie) in enumerate(zip(result.candidates, result.ties()), 1):
        low, high = e.step_time_range_s
        row = [f"{i}{' ≈' if tie and i > 1 else ''}", non_default_keys(e.strategy, devices, moe, framework),
               seconds(e.step_time_s), f"{seconds(low)}-{seconds(high)}", f"{e.tokens_per_s:,.0f}", f"{e.mfu:.1%}",
               f"{e.peak_memory_gb:.1f}", e.bottleneck]
        row += (["yes" if e.fits else "[red]no[/]"] if include_oom else [])
        if tokens is not None:
            b = training_budget(e.tokens_per_s, devices, tokens, price)
            row += [f"{b['time_to_train_days']:,.1f}", f"{b['device_hours']:,.0f}"]
            row += [f"${b['cost']:,.0f}"] if price is not None else []
        table.add_row(*row)
    return table


FRONT_MEMORY_STEP = 0.10  # a shown front row needs this much less memory than the one above it
FRONT_ROWS = 10


def thin_front(front: list) -> list:
    """The front's fastest row, then each next one needing FRONT_MEMORY_STEP less memory, at most FRONT_ROWS."""
    shown = front[:1]
    for e in front[1:]:
        if e.peak_memory_gb <= shown[-1].peak_memory_gb * (1.0 - FRONT_MEMORY_STEP):
            shown.append(e)
    return shown[:FRONT_ROWS]


def pareto_table(result, devices: int, moe: bool, framework=None) -> Table:
    """The configurations no other beats on both step time and memory: the trade a user chooses along."""
    from asap.spec.strategy import non_default_keys

    shown = thin_front(result.pareto)
    table = Table(title="Pareto front: step time against peak memory", title_justify="left", caption_justify="left",
                  caption=f"each row is faster than those below it and needs more memory; {len(shown)} of "
                          f"{len(result.pareto)} shown, at least {FRONT_MEMORY_STEP:.0%} less memory each "
                          f"(--json: all)")
    for col in ("strategy", "step", "GiB"):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for e in shown:
        table.add_row(non_default_keys(e.strategy, devices, moe, framework), seconds(e.step_time_s),
                      f"{e.peak_memory_gb:.1f}")
    return table


def stage_split_line(i: int, e, split: dict) -> str:
    layers = "/".join(str(x) for x in split["layers_per_stage"])
    if split.get("adopted"):
        return (f"#{i}: layers placed by the stage ILP ({split['solver']}), {layers}: "
                f"{split['default_split_step_time_s']:.3f} s with the default split")
    if "adopted" in split:
        return f"#{i}: the stage ILP's split {layers} is not faster than the default split under the estimate; kept"
    return f"#{i}: the stage ILP keeps the default split ({split['solver']})"
