"""``asap diagnose TRACE...``: read profiler traces (one per rank) and name the bottleneck."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional, cast

import typer
from rich.table import Table
from typer.core import TyperCommand

from asap.cli.root import app
from asap.cli.choices import PRECISIONS, choice
from asap.cli.common import out_console, print_json
from asap.errors import AsapError
from asap.spec.words import BottleneckClass


# ``--`` would end option parsing and vanish from the arguments; it is kept, as this token, to split the
# before traces from the after traces of --compare
SPLIT = "<asap:before|after>"


class _SplitCommand(TyperCommand):
    """diagnose's command: its first ``--`` stays in the positional list (as SPLIT) instead of being eaten."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if "--" in args:
            i = args.index("--")
            args = [*args[:i], SPLIT, *args[i + 1:]]
        return super().parse_args(ctx, args)


@app.command(cls=_SplitCommand)
def diagnose(
    traces: List[Path] = typer.Argument(..., help="Trace files (.json / .json.gz, Kineto or JAX), or folders of "
                                                   "them; one per rank of one job. With --compare: BEFORE... -- "
                                                   "AFTER..."),
    accelerator: Optional[str] = typer.Option(None, "--accelerator", help="Catalog accelerator for the roofline "
                                              "(default: from the trace's device properties, else local-cpu)."),
    top: int = typer.Option(10, "--top", help="How many operators to list."),
    straggler_threshold: float = typer.Option(0.10, "--straggler-threshold",
                                              help="A rank is a straggler when its step time (or own work time) "
                                                   "exceeds the median over ranks by this fraction of the median "
                                                   "step."),
    jitter_threshold: float = typer.Option(0.10, "--jitter-threshold",
                                           help="Step-time coefficient of variation above which jitter is flagged."),
    fusion: bool = typer.Option(False, "--fusion", help="Add the chains of memory-bound operators one fused "
                                                        "kernel would replace, with the bytes and time it saves."),
    compare: bool = typer.Option(False, "--compare", help="Compare two sets of traces of one job: BEFORE... -- "
                                                          "AFTER... (term by term, and the operators that moved)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="The job the traces come from (with -c, -b, "
                                                                       "-s): the next: line is then a propose "
                                                                       "command that runs as printed."),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", help="The job's cluster."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", "-b", help="The job's global batch."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", "-s", help="The job's sequence length."),
    strategy: str = typer.Option("", "--strategy", "-S", help="The job's strategy ('tp2 pp2' or key=value,...)."),
    devices: Optional[int] = typer.Option(None, "--devices", help="The job's device count."),
    precision: str = choice("bf16", "--precision", values=PRECISIONS, what="precision", help="The job's precision."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Step time, busy/compute/communication/idle, top operators on a roofline, stragglers and the bottleneck."""
    from asap.profile.diagnose import diagnose as run_diagnosis

    if top < 1:
        raise AsapError("top", f"must be at least 1, got {top}")
    before, after = _split(traces, compare)
    if compare:
        if fusion:
            raise AsapError("fusion", "not with --compare (diagnose each side with --fusion instead)")
        _compare(before, after, accelerator, top, as_json)
        return
    for name, value in (("straggler-threshold", straggler_threshold), ("jitter-threshold", jitter_threshold)):
        if not value > 0:
            raise AsapError(name, f"must be positive, got {value}")
    # list is invariant: diagnose takes str or Path items, these are all Paths
    result = run_diagnosis(cast("list[str | Path]", before), accelerator=accelerator, top=top,
                           straggler_threshold=straggler_threshold, jitter_threshold=jitter_threshold, fusion=fusion)
    for note in result.notes:  # one line each, unwrapped: logs go to stderr
        sys.stderr.write(f"note: {note}\n")
    job = _job(model, cluster, global_batch, seq_len, strategy, devices, precision)
    if as_json:
        print_json({**result.to_dict(), "next_steps": next_steps(result, job)})
        return
    _print_tables(result, top, job)


def _job(model, cluster, global_batch, seq_len, strategy: str, devices, precision: str) -> dict | None:
    """The job the traces come from, checked (None when -m, -c, -b and -s are not all given)."""
    given = {"model": model, "cluster": cluster, "global-batch": global_batch, "seq-len": seq_len}
    if all(v is None for v in given.values()):
        return None
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise AsapError(missing[0], "missing: the job needs -m, -c, -b and -s together")
    from asap.cli.common import JobOptions
    from asap.spec.strategy import parse_strategy

    options = JobOptions(model, cluster, global_batch, seq_len, precision, devices=devices)
    job = options.load()
    parse_strategy(strategy)
    return {"args": options.args(), "strategy": strategy, "moe": job.model.moe is not None}


def _split(traces: list[Path], compare: bool) -> tuple[list[Path], list[Path]]:
    """(before, after) traces: split at ``--`` with --compare; all of them and none without."""
    marks = [i for i, t in enumerate(traces) if str(t) == SPLIT]
    if not compare:
        if marks:
            raise AsapError("--", "separates BEFORE from AFTER traces only with --compare")
        return list(traces), []
    if len(marks) != 1:
        raise AsapError("compare", "give BEFORE traces, then --, then AFTER traces")
    before, after = list(traces[:marks[0]]), list(traces[marks[0] + 1:])
    for side, paths in (("before", before), ("after", after)):
        if not paths:
            raise AsapError("compare", f"no {side} traces (asap diagnose --compare BEFORE... -- AFTER...)")
    return before, after


def _compare(before: list[Path], after: list[Path], accelerator: str | None, top: int, as_json: bool) -> None:
    from asap.profile.trace_diff import TERMS, compare_traces

    result = compare_traces(before, after, accelerator=accelerator, top=top)
    for note in result["notes"]:
        sys.stderr.write(f"note: {note}\n")
    if as_json:
        print_json(result)
        return
    terms = Table(title="before -> after (per step)")
    for col in ("term", "before", "after", "after - before"):
        terms.add_column(col)
    for k in TERMS:
        terms.add_row(k, _fmt(result["before"][k]), _fmt(result["after"][k]), f"{result['deltas_s'][k]:+.4g}")
    terms.add_row("bottleneck", result["before"]["bottleneck"], result["after"]["bottleneck"], "")
    out_console.print(terms)
    ops = Table(title="operators that moved most (per step, per rank)")
    for col in ("operator", "before (s)", "after (s)", "change (s)", "calls", "status"):
        ops.add_column(col)
    for r in result["ops_moved"]:
        ops.add_row(r["name"][:60], _fmt(r["before_s"]), _fmt(r["after_s"]), f"{r['delta_s']:+.4g}",
                    f"{r['calls_before']:.3g} -> {r['calls_after']:.3g}", r["status"])
    out_console.print(ops)
    out_console.print(result["verdict"], markup=False, highlight=False)


def _fmt(x, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def _print_tables(d, top: int, job: dict | None = None) -> None:
    """The diagnosis for a reader: where the step goes (busy kernels, overlap, idle), the operators on the
    roofline, the verdict with its evidence, and what to run next."""
    from asap.cli.format import seconds

    p = d.precision or "bf16"
    ridge = (f"{d.roofline.accelerator} (ridge {d.roofline.ridge(p):.3g} FLOP/B at {p}, the trace's "
             f"{'dominant ' if d.precision else 'assumed '}precision)")
    summary = Table(title=f"diagnosis: {d.bottleneck}-bound", show_header=False, title_justify="left")
    for label, value in (("step time", seconds(d.step_time_s)), ("compute kernels busy", seconds(d.compute_s)),
                         ("communication kernels busy", seconds(d.communication_s)),
                         ("  of which overlapped with compute", seconds(d.overlap_s)),
                         ("  of which exposed", seconds(d.exposed_communication_s)),
                         ("device idle", seconds(d.idle_s)), ("busy fraction", f"{d.busy_fraction:.0%}"),
                         ("step windows x ranks", str(d.n_steps)), ("roofline", ridge)):
        summary.add_row(label, value)
    out_console.print(summary)
    ops = Table(title="top operators (per step)", title_justify="left",
                caption="bound: the roof the op's intensity puts it under; host (overhead): under 10% of both "
                        "peak FLOP/s and bandwidth, its time is launch latency and fixed overhead",
                caption_justify="left")
    ops.add_column("operator", min_width=28, overflow="fold")
    for col in ("time", "share", "GFLOP", "MB", "FLOP/B", "bound", "% peak", "% bandwidth"):
        ops.add_column(col, justify="left" if col == "bound" else "right")
    for r in d.top_ops:
        ops.add_row(r.name[:60], seconds(r.time_s), f"{r.share:.0%}", _fmt(r.flops / 1e9 if r.flops else None, 3),
                    _fmt(r.bytes / 1e6 if r.bytes else None, 3), _fmt(r.intensity, 3),
                    "host (overhead)" if r.overhead_bound else r.bound,
                    f"{r.flop_utilization:.0%}" if r.flop_utilization else "-",
                    f"{r.bandwidth_utilization:.0%}" if r.bandwidth_utilization else "-")
    out_console.print(ops)
    if len(d.ranks) > 1:
        ranks = Table(title="ranks")
        for col in ("rank", "step (s)", "compute (s)", "exposed comm (s)", "idle (s)", "own work (s)", "step CV"):
            ranks.add_column(col)
        for r in d.ranks:
            ranks.add_row(r.label, _fmt(r.step_time_s), _fmt(r.compute_s), _fmt(r.exposed_communication_s),
                          _fmt(r.idle_s), _fmt(r.work_s), _fmt(r.step_time_cv, 2))
        out_console.print(ranks)
        if d.slowest_rank:
            out_console.print(f"slowest rank: {d.slowest_rank['label']}", markup=False)
        if d.stragglers:
            out_console.print("stragglers: " + ", ".join(s["label"] for s in d.stragglers), markup=False)
    if d.fusion is not None:
        _print_fusion(d.fusion, top)
    for line in d.evidence:
        out_console.print(f"- {line}", markup=False, highlight=False)
    for line in d.jitter["where"]:
        out_console.print(f"jitter: {line}", markup=False, highlight=False)
    _print_next(d, job)


def next_steps(d, job: dict | None = None) -> dict:
    """What to run next for the verdict: ``asap propose`` on these traces, and the two knowledge entries that
    best answer the bottleneck on this accelerator's family."""
    from shlex import quote

    from asap.agents.retrieval import next_moves
    from asap.profile.devices import lookup
    from asap.profile.diagnose import ALLTOALL_RE

    try:
        family = lookup(d.roofline.accelerator).family
    except AsapError:
        family = None
    # a dense model (the job says so, or the traces show no all-to-all) gets no MoE advice
    moe = job["moe"] if job else (any(ALLTOALL_RE.search(o.name) for o in d.top_ops)
                                  or d.bottleneck_class == BottleneckClass.EP_COMM)
    kind = "moe" if moe else "dense"
    current = _current_keys(job)
    moves = (next_moves(d.bottleneck_class, family, model_kind=kind, current=current)
             or next_moves(d.bottleneck, family, model_kind=kind, current=current))
    if job is None:
        return {"command": None, "needs": "-m MODEL -c CLUSTER -b GLOBAL_BATCH -s SEQ_LEN [-S STRATEGY]",
                "knowledge": moves}
    traces = " ".join(quote(str(t)) for t in d.traces)
    strategy_flag = f" -S {quote(job['strategy'])}" if job["strategy"] else ""
    return {"command": f"asap propose {traces} {job['args']}{strategy_flag}", "knowledge": moves}


def _current_keys(job: dict | None) -> dict | None:
    """The strategy the traces ran (``-S``) as keys, for the moves that apply to it; None when not given."""
    from asap.spec.strategy import parse_strategy

    if not job or not job.get("strategy"):
        return None
    try:
        return dict(parse_strategy(job["strategy"]))
    except AsapError:
        return None


def _move_text(key: str, op: str) -> str:
    """``mbs x2``, ``tp /2``, ``recompute=selective``: a knowledge move as a user reads it."""
    op = str(op)
    return f"{key}{op}" if op.startswith("=") else f"{key} {op}" if op[:1] in "x/+-" else f"{key}={op}"


def _print_next(d, job: dict | None = None) -> None:
    nxt = next_steps(d, job)
    for k in nxt["knowledge"]:
        moves = "; ".join(", ".join(_move_text(key, op) for key, op in m.items()) for m in k["moves"]) or "see the entry"
        out_console.print(f"try ({k['id']}): {k['title']} -- moves: {moves}", markup=False, highlight=False,
                          soft_wrap=True)
    if nxt["command"] is None:
        out_console.print(f"next: give this diagnose the job's {nxt['needs']} and it prints the asap propose "
                          "command that checks three moves with the cost model", markup=False, highlight=False,
                          soft_wrap=True)
        return
    out_console.print(f"next: {nxt['command']}  (three moves checked by the cost model, on these traces' step "
                      f"time {d.step_time_s:.4g} s)", markup=False, highlight=False, soft_wrap=True)


def _print_fusion(rows, top: int) -> None:
    table = Table(title=f"fusible chains (per step; {len(rows)} kinds, the {min(top, len(rows))} largest savings)")
    table.add_column("operators in order", min_width=30, overflow="fold")
    for col in ("calls", "time (s)", "saved MB", "saved (s)"):
        table.add_column(col)
    for r in rows[:top]:
        names = " > ".join(n.split("::", 1)[-1] for n in r.ops)
        table.add_row(names[:160], _fmt(r.calls, 3), _fmt(r.time_s), _fmt(r.saved_bytes / 1e6, 3), _fmt(r.saved_s))
    out_console.print(table)
