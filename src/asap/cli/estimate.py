"""``asap estimate``, ``asap validate`` and ``asap presets``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, cast

import typer
from rich.table import Table

from asap.cli.root import app
from asap.cli.choices import FRAMEWORK_ALIASES, FRAMEWORKS, choice
from asap.cli.common import (JOB, OPTIONS, JobOptions, JsonOpt, LearnMemoryOpt, PriceOpt, TokensOpt, err_console,
                             job_options, out_console, print_json, print_learned, with_learned)
from asap.cli.format import (compact_of, does_not_fit_lines, estimate_table, figures_line, headline, lengths_line,
                             mfu_peak_name, readable_keys, seconds)
from asap.budget import budget_of, with_budget
from asap.spec.knobs import keys_help

if TYPE_CHECKING:
    from rich.text import JustifyMethod


@app.command()
@job_options
def estimate(
    model=JOB,
    cluster=JOB,
    global_batch=JOB,
    seq_len=JOB,
    strategy: str = typer.Option("", "--strategy", "-S", help="'tp8 pp2 rc:sel' (the compact notation, as the "
                                                              "tables print it) or key=value,... (keys: "
                                                              f"{keys_help()}; README 'Strategy keys')"),
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
    explain: bool = typer.Option(False, "--explain", help="Show memory terms and the evidence for the bottleneck."),
    any_stack: bool = typer.Option(False, "--any-stack",
                                   help="Price a what-if the chosen stack cannot run (its rules, docs/cost_model.md "
                                        "'What each stack can run', are otherwise refused in one line)."),
    memory: Optional[str] = LearnMemoryOpt,
    json_out: bool = JsonOpt,
    options: JobOptions = OPTIONS,  # the job options above, together (``job_options``)
):
    """Predict step time, throughput, MFU and peak memory of one parallel strategy."""
    from asap.budget import budget_line
    from asap.cost.estimate import estimate_spelled as run_estimate  # the CLI's text is parsed here
    from asap.spec.stack_rules import runnable_strategy
    from asap.spec.calibration_file import figures_provenance

    job, aw, data = options.load_lengths()
    job, learned = with_learned(job, memory)
    budget, price = budget_of(tokens, price_per_device_hour)
    est = run_estimate(job, runnable_strategy(job, strategy, any_stack))
    figures = figures_provenance(job.cluster)
    # aw is set only when options.lengths names a file (with_lengths)
    extra = {"lengths": _lengths_report(job, est, aw, data, cast(str, options.lengths))} if aw is not None else {}
    out = with_budget(est.to_dict(), job.devices, budget, price)
    if json_out:
        print_json({**readable_keys(out, est, job), "figures": figures, **extra, **learned})
        return
    print_estimate(job, est, strategy, options)
    print_learned(learned)
    if budget is not None:
        out_console.print(budget_line(out), highlight=False, soft_wrap=True)
    if extra:
        out_console.print(lengths_line(extra["lengths"]), highlight=False)
    out_console.print(figures_line(figures), highlight=False)
    if explain:
        mem = Table(title="peak memory per device (GiB; the terms are allocated, the peak adds the allocator's "
                          "reserve)")
        mem.add_column("term")
        mem.add_column("GiB", justify="right")
        from asap.cost.device_memory import MEMORY_DETAIL_WORDS

        for k, v in est.memory_gb.items():
            mem.add_row(k, f"{v:.2f}")
            for part, gb in est.memory_detail_gb.items():  # its parts, where they hold anything
                if part.startswith(f"{k}_") and gb > 0:
                    mem.add_row(f"  of which {MEMORY_DETAIL_WORDS[part]}", f"{gb:.2f}")
        out_console.print(mem)
        for line in est.evidence:
            out_console.print(f"  · {line}")


def _lengths_report(job, est, aw, data, path: str) -> dict:
    """``asap.balance.lengths_report``, imported only when a ``--lengths`` file was given."""
    from asap.balance import lengths_report

    return lengths_report(job, est, aw, data, path)


def print_estimate(job, est, strategy_text: str, options: JobOptions) -> None:
    """The human form of one estimate: what was priced, the headline, the parts, the verdict and what next
    (``options``: the job's options, so the printed command prices the same job)."""
    from asap.spec.strategy import parse_strategy
    from asap.spec.words import count_text

    from asap.cost.device_memory import usable_hbm_gb

    m, c, t = job.model, job.cluster, job.train
    capacity = usable_hbm_gb(c.accelerator, t)
    given = parse_strategy(strategy_text) if strategy_text else {}
    note = "" if given else "  (no --strategy: the defaults, pure data parallelism; asap plan finds the fastest)"
    out_console.print(f"[bold]{m.name}[/] ({count_text(m.num_params())} parameters) on {c.num_devices} x "
                      f"{c.accelerator.name} · {compact_of(est, job)}{note}", soft_wrap=True,
                      highlight=False)
    for line in headline(est, c.num_devices, capacity, t.precision, mfu_peak_name(c)):
        out_console.print(line, soft_wrap=True)
    out_console.print(estimate_table(est))
    if est.fits:
        from asap.spec.words import human_word

        out_console.print(f"bottleneck: [bold]{human_word(est.bottleneck_class)}[/] ({human_word(est.bottleneck, est.bottleneck_class)}"
                          f"-bound: {est.evidence[0]})",
                          soft_wrap=True)
        return
    pins = {k: v for k, v in given.items() if k in ("tp", "pp", "cp", "ep")}
    for line in does_not_fit_lines(est, capacity, fitting_next(job, pins, options)):
        out_console.print(line, soft_wrap=True, highlight=False)


def fitting_next(job, pins: dict, options: JobOptions) -> str:
    """A ``plan`` command that runs as printed and finds a fitting strategy (``asap.search.advice.fitting_next``
    decides which), with that strategy and its step time."""
    from dataclasses import replace
    from shlex import quote

    from asap.search.advice import fitting_next as find
    from asap.spec.hardware import load_cluster
    from asap.spec.strategy import format_compact_keys

    c = job.cluster
    found = find(job, pins, options.memory_margin, cluster_on=lambda n: load_cluster(options.cluster, devices=n))
    if found.best is None:
        return (f"asap plan {options.args()} --include-oom   (nothing fits on up to {found.devices} devices: the "
                "configurations by how far over memory)")
    n, fixed = found.devices, found.fixed
    args = (options if n == c.num_devices else replace(options, nodes=None, devices=n)).args()
    fix = f" --fix {quote(format_compact_keys(fixed))}" if fixed else ""
    dropped = f"nothing keeping {format_compact_keys(pins)} fits; " if pins and not fixed else ""
    more = f"nothing fits on {c.num_devices} devices; " if n != c.num_devices else ""
    return (f"asap plan {args}{fix}   ({more}{dropped}#1 there: {compact_of(found.best, found.job)} at "
            f"{seconds(found.best.step_time_s)})")


@app.command()
def validate(
    cases: Optional[str] = typer.Option(None, "--cases", help="A calibration-case file (default: both shipped "
                                        "files, calibration_runs.json and published_runs_2024_2026.json)."),
    framework: Optional[str] = choice(None, "--framework", values=FRAMEWORKS, aliases=FRAMEWORK_ALIASES,
                                      what="framework",
                                      help="The stack for cases that do not name theirs (train.framework)."),
    markdown: bool = typer.Option(False, "--markdown", help="Print the table as Markdown (docs/accuracy.md)."),
    memory: Optional[str] = typer.Option(None, "--memory", help="A Sharding Memory (SQLite) file with measured runs "
                                         "(asap learn): each case priced with the terms its stack's runs on its "
                                         "accelerator family correct, its own run left out."),
    json_out: bool = JsonOpt,
):
    """Compare predicted with published step times of real training runs; print each error and the MAPE."""
    from rich.progress import Progress

    from asap.validate import load_all_packaged, load_cases, validate_files

    files = load_all_packaged() if cases is None else {str(cases): load_cases(cases)}
    if framework is not None:
        from asap.spec.framework import get_framework

        get_framework(framework, "", "framework")  # one clear line for an unknown name
        files = {name: [dict(c, train={"framework": framework, **c["train"]}) if isinstance(c.get("train"), dict)
                        else c for c in case_list] for name, case_list in files.items()}
    with Progress(console=err_console, transient=True, disable=json_out or not err_console.is_terminal) as progress:
        task = progress.add_task("validating", total=sum(len(c) for c in files.values()))
        result = validate_files(files, progress=lambda n: progress.update(task, completed=n),
                                correct=None if memory is None else _case_learner(memory))
    if json_out:
        print_json(result)
        return
    if markdown:
        print(validation_markdown(result))
        return
    out_console.print(validation_table(result))
    for line in summary_lines(result):
        out_console.print(line)
    for c in result["cases"] if memory is not None else []:
        moved = ", ".join(f"{t} x{f:.3f}" for t, f in (c.get("corrections") or {}).items()) or "nothing moved"
        runs = ", ".join(str(i) for i in c.get("learned_from") or []) or "none"
        out_console.print(f"{c['id']}: learned from measured runs {runs}: {moved}", highlight=False, soft_wrap=True)


def _case_learner(memory: str):
    """``validate --memory``: a case's job corrected by the measured runs in ``memory`` other than its own (a
    run whose ``source_ref`` is the case's id), and the fields that say so."""
    from asap.learn import fit_for, learned_fields, runs_for
    from asap.memory import Memory

    with Memory.open(memory) as mem:
        rows = mem.measured_runs()

    def correct(job, case_id: str):
        learned = fit_for(job, runs_for([r for r in rows if r.source_ref != case_id], job))
        return learned.apply_job(job), learned_fields(learned)

    return correct


def summary_lines(result) -> list[str]:
    """One line per case file (where there are several) and one over all cases."""
    files = result.get("files", {})
    lines = [f"{name}: MAPE {f['mape']:.1%} over {f['n']} cases; worst {f['worst_case']} ({f['max_abs_error']:.1%})"
             for name, f in files.items()] if len(files) > 1 else []
    return lines + [f"MAPE {result['mape']:.1%} over {result['n']} cases; worst {result['worst_case']} "
                    f"({result['max_abs_error']:.1%})"]


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
    lines += [f"{line}." for line in summary_lines(result)]
    return "\n".join(lines)


def validation_table(result) -> Table:
    table = Table(title="published vs predicted step time", caption_justify="left",
                  caption="each run's stated knobs completed by the fastest strategy that fits the device memory "
                          "(no headroom: the runs trained)")
    just: JustifyMethod  # the second item of each pair below
    for col, just in (("case", "left"), ("published s", "right"), ("predicted s", "right"), ("error", "right"),
                      ("strategy (best completion)", "left")):
        table.add_column(col, justify=just)
    for r in result["cases"]:
        table.add_row(r["id"], f"{r['published_step_time_s']:.3f}", f"{r['predicted_step_time_s']:.3f}",
                      f"{r['error']:+.1%}", _shape(r["strategy"]))
    return table


@app.command()
def presets(json_out: bool = JsonOpt):
    """List model presets (with parameter counts), cluster presets (nodes x devices) and the accelerator catalog
    with its sources."""
    from asap.spec.hardware import CATALOG, CLUSTER_PRESETS
    from asap.spec.loader import load_model
    from asap.spec.presets import MODEL_PRESETS

    models: list[dict[str, Any]] = []
    for name, (_, published, with_mtp, source) in MODEL_PRESETS.items():
        m = load_model(name)
        models.append({"name": name, "params": m.num_params(include_mtp=with_mtp),
                       "active_params": m.num_active_params(), "published_params": published or None,
                       "source": source})
    clusters = [{"name": k, **v} for k, v in CLUSTER_PRESETS.items()]
    accelerators: list[dict[str, Any]]
    accelerators = [{"name": a.name, "family": a.family, "peak_tflops": a.peak_tflops, "hbm_gb": a.hbm_gb,
                     "hbm_gbps": a.hbm_gbps, "intra_node_gbps": a.intra_node_gbps,
                     "inter_node_gbps": a.inter_node_gbps, "source": a.source} for a in CATALOG.values()]
    if json_out:
        print_json({"models": models, "clusters": clusters, "accelerators": accelerators})
        return
    from asap.spec.hardware import CLUSTER_ALIASES
    from asap.spec.words import count_text

    table = Table(title="model presets", title_justify="left")
    for col in ("name", "params", "active", "source"):
        table.add_column(col, justify="right" if col in ("params", "active") else "left")
    for model in models:
        table.add_row(model["name"], count_text(model["params"]), count_text(model["active_params"]),
                      model["source"] or "")
    out_console.print(table)
    aliases: dict[str, list[str]] = {}
    for old_name, new_name in CLUSTER_ALIASES.items():
        aliases.setdefault(new_name, []).append(old_name)
    table = Table(title="cluster presets (any catalog accelerator's name is one too)", title_justify="left")
    for col in ("name", "accelerator", "nodes x devices", "devices", "also accepted"):
        table.add_column(col, justify="right" if col == "devices" else "left")
    for c in (c for c in clusters if c["name"] not in CATALOG):
        table.add_row(c["name"], c["accelerator"], f"{c['nodes']} x {c['devices_per_node']}",
                      str(c["devices_per_node"] * c["nodes"]), ", ".join(aliases.get(c["name"], [])))
    out_console.print(table)
    table = Table(title="accelerator catalog (dense peaks; per device, per direction)", title_justify="left")
    for col in ("name", "bf16 TFLOP/s", "HBM GiB", "HBM GB/s", "scale-up GB/s", "scale-out GB/s", "source"):
        table.add_column(col, justify="left" if col in ("name", "source") else "right")
    for a in accelerators:
        peak = a["peak_tflops"].get("bf16") or a["peak_tflops"].get("fp32", 0.0)
        table.add_row(a["name"], f"{peak:g}", f"{a['hbm_gb']:g}", f"{a['hbm_gbps']:g}", f"{a['intra_node_gbps']:g}",
                      f"{a['inter_node_gbps']:g}", a["source"])
    out_console.print(table)
