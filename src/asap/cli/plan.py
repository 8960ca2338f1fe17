"""``asap plan``: the fastest fitting strategies for a model, a cluster and a batch."""

from __future__ import annotations

from typing import Optional

import typer
from rich.progress import Progress
from rich.table import Table

from asap.cli import app
from asap.cli.common import err_console, out_console, print_json
from asap.errors import AsapError
from asap.cli.estimate import (BatchOpt, ClusterOpt, DevicesOpt, FrameworkOpt, JsonOpt, LengthsOpt, ModelOpt,
                               MoEImbalanceOpt, NodesOpt, PrecisionOpt, SeqOpt, load_job, with_lengths)


@app.command()
def plan(
    model: str = ModelOpt,
    cluster: str = ClusterOpt,
    global_batch: int = BatchOpt,
    seq_len: int = SeqOpt,
    fix: str = typer.Option("", "--fix", help="Pin any subset of the strategy keys: key=value,..."),
    top: int = typer.Option(5, "--top", min=1, help="How many candidates to return."),
    include_oom: bool = typer.Option(False, "--include-oom", help="Rank configurations that do not fit too."),
    ilp_candidates: int = typer.Option(1, "--ilp-candidates", min=0,
                                       help="How many of the best pipelined candidates get the stage-split ILP."),
    ilp_time_limit: float = typer.Option(0.2, "--ilp-time-limit", min=0.05, help="HiGHS time limit per ILP (s)."),
    precision: str = PrecisionOpt,
    framework: Optional[str] = FrameworkOpt,
    moe_imbalance: float = MoEImbalanceOpt,
    nodes: Optional[int] = NodesOpt,
    devices: Optional[int] = DevicesOpt,
    lengths: Optional[str] = LengthsOpt,
    emit: Optional[str] = typer.Option(None, "--emit", help="Also write the best plan as FORMAT's launch config "
                                                             "(megatron, torchtitan, maxtext, mindformers, deepspeed)."),
    json_out: bool = JsonOpt,
):
    """Search every legal parallel configuration and rank the fitting ones, fastest first."""
    from asap.search.planner import plan as run_plan
    from asap.spec.strategy import parse_strategy

    if emit is not None:
        from asap.emit import FRAMEWORK_OF, check_format

        check_format(emit)  # an unknown format: one line before the search
        framework = framework or FRAMEWORK_OF[emit]  # plan with the options the format's stack has
    m, c, t = load_job(model, cluster, nodes, devices, global_batch, seq_len, precision, framework, moe_imbalance)
    t, aw, _ = with_lengths(c, t, lengths)
    fixed = parse_strategy(fix, field="fix")
    with Progress(console=err_console, transient=True) as progress:
        task = progress.add_task("pricing configurations", total=None, visible=False)

        def on_chunk(done: int, total: int) -> None:  # shown only for searches that take more than a chunk
            progress.update(task, completed=done, total=total, visible=total > 131072)

        result = run_plan(m, c, t, fixed, top=top, include_oom=include_oom, progress=on_chunk,
                          ilp_candidates=ilp_candidates, ilp_time_limit_s=ilp_time_limit)
    emitted = _emit_best(emit, m, c, t, result) if emit is not None else None
    if json_out:
        print_json({**result.to_dict(), **({"emit": emitted} if emitted else {}),
                    **({"lengths": {**aw.to_dict(), "file": lengths}} if aw is not None else {})})
        return
    if emitted:
        print(emitted["text"])
        return
    out_console.print(f"[bold]{m.name}[/] on {c.num_devices} x {c.accelerator.name}: searched {result.searched:,} "
                      f"configurations ({result.fitting:,} fit) in {result.search_time_s:.2f} s")
    from asap.cost.estimate import framework_of

    out_console.print(candidates_table(result, c.num_devices, m.moe is not None, framework_of(t, c)))
    for e, mesh in zip(result.candidates, result.meshes):
        if mesh:
            out_console.print("MaxText mesh: " + " ".join(f"{k}={v}" for k, v in mesh.items() if v != 1 or "ici" in k))
            break
    for i, (e, split) in enumerate(zip(result.candidates, result.stage_splits), 1):
        if split and split.get("layers_per_stage"):
            out_console.print(stage_split_line(i, e, split))


def _emit_best(fmt: str, m, c, t, result) -> dict:
    """The best candidate in FORMAT's own options (``asap emit``), planned with the stack the format is."""
    from asap.cli.emit import emit_strategy

    if not result.candidates:
        raise AsapError("emit", "no fitting candidate to emit")
    return {"format": fmt, "text": emit_strategy(fmt, m, c, t, result.candidates[0].strategy)}


def candidates_table(result, devices: int, moe: bool, framework=None) -> Table:
    """One row per candidate: its strategy (the keys that differ from estimate's defaults; the JSON output has
    every key in ``strategy_string``) and the figures estimate gives for it."""
    from asap.spec.strategy import non_default_keys

    table = Table(title="fastest configurations (asap estimate --strategy <strategy> gives each row)",
                  caption="≈: within the cost model's held-out error of the best (step_time_range_s overlaps): "
                          "a tie the model cannot break; measure to decide.")
    for col in ("#", "strategy", "step s", "range s", "MFU", "GiB", "bottleneck"):
        table.add_column(col, justify="left" if col in ("strategy", "bottleneck") else "right")
    for i, (e, tie) in enumerate(zip(result.candidates, result.ties()), 1):
        low, high = e.step_time_range_s
        table.add_row(f"{i}{' ≈' if tie and i > 1 else ''}", non_default_keys(e.strategy, devices, moe, framework),
                      f"{e.step_time_s:.3f}", f"{low:.2f}-{high:.2f}", f"{e.mfu:.1%}", f"{e.peak_memory_gb:.1f}",
                      e.bottleneck)
    return table


def stage_split_line(i: int, e, split: dict) -> str:
    layers = "/".join(str(x) for x in split["layers_per_stage"])
    if split.get("adopted"):
        return (f"#{i}: layers placed by the stage ILP ({split['solver']}), {layers}: "
                f"{split['default_split_step_time_s']:.3f} s with the default split")
    if "adopted" in split:
        return f"#{i}: the stage ILP's split {layers} is not faster than the default split under the estimate; kept"
    return f"#{i}: the stage ILP keeps the default split ({split['solver']})"
