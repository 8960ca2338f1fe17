"""``asap estimate``, ``asap validate`` and ``asap presets``."""

from __future__ import annotations

from typing import Optional

import typer
from rich.progress import Progress
from rich.table import Table

from asap.cli import app
from asap.cli.common import err_console, out_console, print_json

ModelOpt = typer.Option(..., "--model", "-m", help="Preset name, native model file (YAML/JSON) or HF config.json.")
ClusterOpt = typer.Option(..., "--cluster", "-c", help="Cluster preset, accelerator name, or cluster file.")
NodesOpt = typer.Option(None, "--nodes", help="Override the cluster's node count.")
DevicesOpt = typer.Option(None, "--devices", help="Override the cluster's device count.")
BatchOpt = typer.Option(..., "--global-batch", "-b", help="Global batch in sequences.")
SeqOpt = typer.Option(..., "--seq-len", "-s", help="Sequence length in tokens.")
PrecisionOpt = typer.Option("bf16", "--precision", help="bf16 | fp16 | fp8 | fp32")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document on stdout.")
FrameworkOpt = typer.Option(None, "--framework",
                            help="megatron | deepspeed | torchtitan | maxtext | mindspore (| asap, the reference "
                                 "trainer): the stack whose semantics the cost model follows (default by accelerator "
                                 "family: GPU megatron, TPU maxtext, Ascend mindspore, CPU asap).")
LengthsOpt = typer.Option(None, "--lengths", help="A JSON file of packed samples (lists of document lengths) or "
                                                  "document lengths: price the attention work they leave on the "
                                                  "slowest data-parallel rank (see asap balance).")
MoEImbalanceOpt = typer.Option(1.0, "--moe-imbalance", min=1.0,
                               help="Tokens on the busiest expert rank over the mean (1.0: force-balanced routing).")


def load_job(model: str, cluster: str, nodes: Optional[int], devices: Optional[int], global_batch: int,
             seq_len: int, precision: str, framework: Optional[str] = None, moe_imbalance: float = 1.0):
    """The three inputs every planning command shares, validated with one-line errors."""
    from asap.spec.hardware import load_cluster
    from asap.spec.loader import load_model
    from asap.spec.train import TrainSpec

    m = load_model(model)
    c = load_cluster(cluster, nodes=nodes, devices=devices)
    t = TrainSpec(global_batch, seq_len, precision, framework, moe_imbalance)
    c.accelerator.peak_flops("bf16" if precision == "fp8" else precision)
    if precision == "fp8":
        c.accelerator.peak_flops("fp8")
    return m, c, t


def with_lengths(c, t, path: Optional[str]):
    """(train spec carrying the attention work of ``path``'s samples for every dp degree, its AttentionWork
    and the parsed document), or (t, None, None) without a file."""
    from dataclasses import replace

    from asap.balance import attention_work, read_lengths

    if path is None:
        return t, None, None
    data = read_lengths(path)
    dps = [d for d in range(1, c.num_devices + 1) if c.num_devices % d == 0]
    aw = attention_work(data, t.global_batch, t.seq_len, dps)
    return replace(t, attention_work=aw.train_pairs()), aw, data


def lengths_report(m, c, t, est, aw, data, path: str) -> dict:
    """What the lengths file costs this strategy: the slowest rank's attention work against even ranks, and
    what ``asap balance`` would leave (each re-priced by the same estimate)."""
    from dataclasses import replace

    from asap.balance import attention_cost_coefficients, balanced_attention_work
    from asap.cost.estimate import estimate as run_estimate

    s = est.strategy
    dp = s.dp
    work = aw.slowest.get(dp, 1.0)
    even = run_estimate(m, c, replace(t, attention_work=((dp, aw.mean),)), s)
    micro = t.global_batch // (dp * s.mbs)
    coef = attention_cost_coefficients(m, c, precision=t.precision, seq_len=t.seq_len, framework=t.framework)
    bal_work = balanced_attention_work(data, t.global_batch, t.seq_len, dp, micro, coef)
    bal = run_estimate(m, c, replace(t, attention_work=((dp, bal_work),)), s)
    return {**aw.to_dict(), "file": path, "attention_work": work,
            "max_over_mean": work / aw.mean if aw.mean > 0 else 1.0,
            "imbalance_s": est.step_time_s - even.step_time_s,
            "balanced": {"attention_work": bal_work, "step_time_s": bal.step_time_s,
                         "predicted_gain": 1.0 - bal.step_time_s / est.step_time_s,
                         "command": f"asap balance --lengths {path} --dp {dp} --micro-batches {micro} "
                                    f"--seq-len {t.seq_len}"}}


def estimate_table(est) -> Table:
    table = Table(title=f"step {est.step_time_s:.3f} s · {est.tokens_per_s_per_device:,.0f} tok/s/device · "
                        f"MFU {est.mfu:.1%} · {est.peak_memory_gb:.1f} GiB {'fits' if est.fits else 'DOES NOT FIT'}")
    table.add_column("part")
    table.add_column("total s", justify="right")
    table.add_column("exposed s", justify="right")
    table.add_column("share", justify="right")
    for k, v in est.breakdown_s.items():
        exp = est.exposed_s.get(k, 0.0)
        table.add_row(k, f"{v:.3f}", f"{exp:.3f}", f"{exp / est.step_time_s:.1%}")
    return table


@app.command()
def estimate(
    model: str = ModelOpt,
    cluster: str = ClusterOpt,
    global_batch: int = BatchOpt,
    seq_len: int = SeqOpt,
    strategy: str = typer.Option("", "--strategy", "-S", help="key=value,... (dp tp pp vpp cp ep etp mbs recompute zero "
                                                              "sp schedule dispatcher a2a_overlap layer_split)"),
    precision: str = PrecisionOpt,
    framework: Optional[str] = FrameworkOpt,
    moe_imbalance: float = MoEImbalanceOpt,
    nodes: Optional[int] = NodesOpt,
    devices: Optional[int] = DevicesOpt,
    lengths: Optional[str] = LengthsOpt,
    explain: bool = typer.Option(False, "--explain", help="Show memory terms and the evidence for the bottleneck."),
    json_out: bool = JsonOpt,
):
    """Predict step time, throughput, MFU and peak memory of one parallel strategy."""
    from asap.cost.estimate import estimate as run_estimate

    from asap.spec.hardware import figures_provenance

    m, c, t = load_job(model, cluster, nodes, devices, global_batch, seq_len, precision, framework, moe_imbalance)
    t, aw, data = with_lengths(c, t, lengths)
    est = run_estimate(m, c, t, strategy)
    figures = figures_provenance(c)
    extra = {"lengths": lengths_report(m, c, t, est, aw, data, lengths)} if aw is not None else {}
    if json_out:
        print_json({**est.to_dict(), "figures": figures, **extra})
        return
    out_console.print(f"[bold]{m.name}[/] on {c.num_devices} x {c.accelerator.name} · {est.strategy}")
    out_console.print(estimate_table(est))
    out_console.print(f"bottleneck: [bold]{est.bottleneck}[/]")
    if extra:
        out_console.print(lengths_line(extra["lengths"]), highlight=False)
    out_console.print(figures_line(figures), highlight=False)
    if explain:
        mem = Table(title="peak memory per device (GiB)")
        mem.add_column("term")
        mem.add_column("GiB", justify="right")
        for k, v in est.memory_gb.items():
            mem.add_row(k, f"{v:.2f}")
        out_console.print(mem)
        for line in est.evidence:
            out_console.print(f"  · {line}")


def lengths_line(r: dict) -> str:
    b = r["balanced"]
    return (f"lengths: {r['samples']} samples over {r['steps']} steps; the slowest rank's attention work is "
            f"{r['max_over_mean']:.2f}x the mean ({r['imbalance_s']:.3f} s of the step); balanced: "
            f"{b['step_time_s']:.3f} s ({b['predicted_gain']:.1%} faster) with: {b['command']}")


def figures_line(figures: dict) -> str:
    if figures["source"] == "catalog":
        return f"figures: the catalog's ({figures['catalog'][0].split(': ', 1)[-1]}); no calibration of this cluster"
    return (f"figures: measured on {figures['machine']} {figures['date']} with {figures['processes']} processes "
            f"({', '.join(figures['measured'])}); the catalog's: {', '.join(figures['catalog']) or 'none'}")


@app.command()
def validate(
    cases: Optional[str] = typer.Option(None, "--cases", help="A calibration-case file (default: the shipped cases)."),
    framework: Optional[str] = typer.Option(None, "--framework",
                                            help="The stack for cases that do not name theirs (train.framework)."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the table as Markdown (docs/accuracy.md)."),
    json_out: bool = JsonOpt,
):
    """Compare predicted with published step times of real training runs; print each error and the MAPE."""
    from asap.validate import load_cases, validate as run_validate

    case_list = load_cases(cases)
    if framework is not None:
        from asap.spec.framework import get_framework

        get_framework(framework, "", "framework")  # one clear line for an unknown name
        case_list = [dict(c, train={"framework": framework, **c["train"]}) if isinstance(c.get("train"), dict) else c
                     for c in case_list]
    with Progress(console=err_console, transient=True, disable=json_out) as progress:
        task = progress.add_task("validating", total=len(case_list))
        result = run_validate(case_list, progress=lambda n: progress.update(task, completed=n))
    if json_out:
        print_json(result)
        return
    if markdown:
        print(validation_markdown(result))
        return
    out_console.print(validation_table(result))
    out_console.print(f"MAPE {result['mape']:.1%} over {result['n']} cases; worst {result['worst_case']} "
                      f"({result['max_abs_error']:.1%})")


def _shape(s) -> str:
    moe = f" {s['dispatcher']}{' +a2a-overlap' if s['a2a_overlap'] else ''}" if s["ep"] > 1 else ""
    return (f"tp{s['tp']} pp{s['pp']} vpp{s['vpp']} cp{s['cp']} ep{s['ep']} dp{s['dp']} mbs{s['mbs']} "
            f"{s['recompute']} z{s['zero']}{moe}")


def validation_markdown(result) -> str:
    lines = ["| case | published s | predicted s | error | strategy (best completion) |", "|---|---:|---:|---:|---|"]
    for r in result["cases"]:
        lines.append(f"| {r['id']} | {r['published_step_time_s']:.3f} | {r['predicted_step_time_s']:.3f} | "
                     f"{r['error']:+.1%} | {_shape(r['strategy'])} |")
    lines.append("")
    lines.append(f"MAPE {result['mape']:.1%} over {result['n']} cases; worst {result['worst_case']} "
                 f"({result['max_abs_error']:.1%}).")
    return "\n".join(lines)


def validation_table(result) -> Table:
    table = Table(title="published vs predicted step time")
    for col, just in (("case", "left"), ("published s", "right"), ("predicted s", "right"), ("error", "right"),
                      ("strategy (best completion)", "left")):
        table.add_column(col, justify=just)
    for r in result["cases"]:
        table.add_row(r["id"], f"{r['published_step_time_s']:.3f}", f"{r['predicted_step_time_s']:.3f}",
                      f"{r['error']:+.1%}", _shape(r["strategy"]))
    return table


@app.command()
def presets(json_out: bool = JsonOpt):
    """List model presets (with parameter counts) and cluster presets."""
    from asap.spec.hardware import CATALOG, CLUSTER_PRESETS
    from asap.spec.loader import load_model
    from asap.spec.presets import MODEL_PRESETS

    models = []
    for name, (_, published, with_mtp, source) in MODEL_PRESETS.items():
        m = load_model(name)
        models.append({"name": name, "params": m.num_params(include_mtp=with_mtp),
                       "active_params": m.num_active_params(), "published_params": published or None,
                       "source": source})
    clusters = [{"name": k, **v} for k, v in CLUSTER_PRESETS.items()]
    accelerators = [{"name": a.name, "family": a.family, "peak_tflops": a.peak_tflops, "hbm_gb": a.hbm_gb,
                     "hbm_gbps": a.hbm_gbps, "intra_node_gbps": a.intra_node_gbps,
                     "inter_node_gbps": a.inter_node_gbps, "source": a.source} for a in CATALOG.values()]
    if json_out:
        print_json({"models": models, "clusters": clusters, "accelerators": accelerators})
        return
    table = Table(title="model presets")
    table.add_column("name")
    table.add_column("params", justify="right")
    table.add_column("active", justify="right")
    for m in models:
        table.add_row(m["name"], f"{m['params'] / 1e9:,.2f} B", f"{m['active_params'] / 1e9:,.2f} B")
    out_console.print(table)
    table = Table(title="cluster presets")
    table.add_column("name")
    table.add_column("accelerator")
    table.add_column("devices", justify="right")
    for c in clusters:
        table.add_row(c["name"], c["accelerator"], str(c["devices_per_node"] * c["nodes"]))
    out_console.print(table)
