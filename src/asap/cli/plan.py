"""``asap plan``: the fastest fitting strategies for a model, a cluster and a batch."""

from __future__ import annotations

from typing import Optional

import typer
from rich.progress import Progress
from rich.table import Table

from asap.cli import app
from asap.cli.common import err_console, out_console, print_json
from asap.cli.estimate import BatchOpt, ClusterOpt, DevicesOpt, JsonOpt, ModelOpt, NodesOpt, PrecisionOpt, SeqOpt, load_job


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
    ilp_time_limit: float = typer.Option(0.5, "--ilp-time-limit", min=0.05, help="HiGHS time limit per ILP (s)."),
    precision: str = PrecisionOpt,
    nodes: Optional[int] = NodesOpt,
    devices: Optional[int] = DevicesOpt,
    json_out: bool = JsonOpt,
):
    """Search every legal parallel configuration and rank the fitting ones, fastest first."""
    from asap.search.planner import plan as run_plan
    from asap.spec.strategy import parse_strategy

    m, c, t = load_job(model, cluster, nodes, devices, global_batch, seq_len, precision)
    fixed = parse_strategy(fix, field="fix")
    with Progress(console=err_console, transient=True) as progress:
        task = progress.add_task("pricing configurations", total=None, visible=False)

        def on_chunk(done: int, total: int) -> None:  # shown only for searches that take more than a chunk
            progress.update(task, completed=done, total=total, visible=total > 131072)

        result = run_plan(m, c, t, fixed, top=top, include_oom=include_oom, progress=on_chunk,
                          ilp_candidates=ilp_candidates, ilp_time_limit_s=ilp_time_limit)
    if json_out:
        print_json(result.to_dict())
        return
    out_console.print(f"[bold]{m.name}[/] on {c.num_devices} x {c.accelerator.name}: searched {result.searched:,} "
                      f"configurations ({result.fitting:,} fit) in {result.search_time_s:.2f} s")
    table = Table(title="fastest configurations")
    for col in ("#", "tp", "pp", "vpp", "cp", "ep", "dp", "mbs", "recompute", "zero", "step s", "MFU", "GiB",
                "bottleneck"):
        table.add_column(col, justify="right" if col not in ("recompute", "bottleneck") else "left")
    for i, e in enumerate(result.candidates, 1):
        s = e.strategy
        table.add_row(str(i), str(s.tp), str(s.pp), str(s.vpp), str(s.cp), str(s.ep), str(s.dp), str(s.mbs),
                      s.recompute, str(s.zero), f"{e.step_time_s:.3f}", f"{e.mfu:.1%}", f"{e.peak_memory_gb:.1f}",
                      e.bottleneck)
    out_console.print(table)
    for e, mesh in zip(result.candidates, result.meshes):
        if mesh:
            out_console.print("MaxText mesh: " + " ".join(f"{k}={v}" for k, v in mesh.items() if v != 1 or "ici" in k))
            break
    for i, (e, split) in enumerate(zip(result.candidates, result.stage_splits), 1):
        if split and "layers_per_stage" in split:
            b = split["bubble_s"]
            uni = split.get("uniform") or {}
            out_console.print(f"#{i} stage split (ILP, {split['solver']}): layers {split['layers_per_stage']}, "
                              f"recompute {['y' if r else '-' for r in split['recompute_per_stage']]}; pipeline "
                              f"{split['pipeline_time_s']:.3f} s vs uniform {uni.get('pipeline_time_s', float('nan')):.3f} s; "
                              f"bubble ideal {b['ideal']:.3f} s, imbalance {b['imbalance']:.3f} s, recompute {b['recompute']:.3f} s")
            if split.get("simulated_pipeline_time_s") is not None:
                out_console.print(f"   simulated schedule: {split['simulated_pipeline_time_s']:.3f} s "
                                  f"(uniform {uni.get('simulated_pipeline_time_s') or float('nan'):.3f} s)")
