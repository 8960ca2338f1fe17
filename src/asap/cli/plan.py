"""``asap plan``: the fastest fitting strategies for a model, a cluster and a batch."""

from __future__ import annotations

import gc
from dataclasses import replace
from shlex import quote
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator, Optional

import typer

from asap.cli.root import app
from asap.cli.choices import FORMATS, choice
from asap.cli.common import (JOB, OPTIONS, JobOptions, JsonOpt, LearnMemoryOpt, PriceOpt, TokensOpt, err_console,
                             job_options, out_console, print_json, print_learned, strategy_column, with_learned)
from asap.budget import budget_of, with_budget
from asap.cli.format import compact_of, mfu_peak_name, readable_keys, seconds
from asap.spec.words import human_word

if TYPE_CHECKING:
    from rich.table import Table


@app.command()
@job_options
def plan(
    model=JOB,
    cluster=JOB,
    global_batch=JOB,
    seq_len=JOB,
    fix: str = typer.Option("", "--fix", help="Pin any subset of the strategy keys: 'tp8 pp2' or key=value,..."),
    top: int = typer.Option(5, "--top", min=1, help="How many candidates to return."),
    include_oom: bool = typer.Option(False, "--include-oom", help="Rank configurations that do not fit too."),
    all_rows: bool = typer.Option(False, "--all", help="Every ranked row, not only the fastest of each (tp, pp, cp, ep) "
                                                       "shape."),
    split_candidates: int = typer.Option(32, "--split-candidates", "--ilp-candidates", min=0,
                                         help="At most this many pipelined rows get the layer-split search, in the "
                                              "order of the least step a split could give them (0: none; "
                                              "--ilp-candidates is its former name)."),
    time_limit: float = typer.Option(60.0, "--time-limit", help="The whole search's budget (s): past it the plan "
                                                                  "ranks what it priced and says it stopped early."),
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
    emit: Optional[str] = choice(None, "--emit", values=FORMATS, what="format",
                                 help="Also write the best plan as this stack's launch config (asap emit)."),
    memory: Optional[str] = LearnMemoryOpt,
    json_out: bool = JsonOpt,
    options: JobOptions = OPTIONS,  # the job options above, together (``job_options``)
):
    """Search every legal parallel configuration and rank the fitting ones, fastest first."""
    from asap.search.advice import emit_best
    from asap.search.planner import plan as run_plan
    from asap.spec.strategy import parse_strategy

    if emit is not None:
        from asap.emit import FRAMEWORK_OF, check_format

        check_format(emit)  # an unknown format: one line before the search
        # plan with the options the format's stack has
        options = replace(options, framework=options.framework or FRAMEWORK_OF[emit])
    from asap.search.planner import plan_headroom

    job, aw, _ = options.load_lengths()
    job = plan_headroom(job, options.memory_margin)  # unset: the default headroom
    job, learned = with_learned(job, memory)
    budget, price = budget_of(tokens, price_per_device_hour)
    fixed = parse_strategy(fix, field="fix")
    with search_progress() as on_chunk, without_cycle_collection():
        result = run_plan(job, fixed=fixed, top=top, include_oom=include_oom, progress=on_chunk,
                          split_candidates=split_candidates, distinct=not all_rows, time_limit_s=time_limit,
                          tight=options.memory_margin is None)  # the tight row's plan priced in the same pass
    with without_cycle_collection():
        tight = _sensitivity_and_tight(job, fixed, result, options)
    emitted = emit_best(emit, job, result.candidates, budget) if emit is not None else None
    limits = plan_limits(result, job.devices, job.train.global_batch, fixed, top, include_oom)
    args = options.args()
    if json_out:
        out = result.to_dict()
        out["candidates"] = [{**(row := readable_keys(with_budget(d, job.devices, budget, price), e, job)),
                              "command": f"asap estimate {args} -S {quote(row['strategy_compact'])}"}
                             for d, e in zip(out["candidates"], result.candidates, strict=True)]
        print_json({**out, "limits": limits, **({"emit": emitted} if emitted else {}),
                    **({"tight": tight} if tight else {}),
                    **({"lengths": {**aw.to_dict(), "file": options.lengths}} if aw is not None else {}), **learned})
        return
    if emitted:
        assert emit is not None  # emitted is only set when --emit names a format
        _print_emitted(emit, emitted, result, job)
        return
    _print_plan(job, result, limits, args, include_oom, budget, price)
    print_learned(learned)
    _print_tight(tight)


@contextmanager
def without_cycle_collection() -> Iterator[None]:
    """The cycle collector off while the plan is priced: the search makes no reference cycles worth collecting
    (numpy arrays and the dataclasses that hold them, freed by their reference counts), but its short-lived
    objects set off about 190 collections (DeepSeek-V3 on 2048 H800: 174 of the youngest generation, 16 of
    the middle one, one full), 0.1-0.2 s of the command; the plan is the same."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def search_progress() -> Iterator[Callable[[int, int], None] | None]:
    """The search's progress bar on a terminal (rich's, imported only there): a callback per chunk priced,
    shown only for searches that take more than a chunk; None where stderr is not a terminal."""
    if not err_console.is_terminal:
        yield None
        return
    from rich.progress import Progress

    with Progress(console=err_console, transient=True) as progress:
        task = progress.add_task("pricing configurations", total=None, visible=False)

        def on_chunk(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total, visible=total > 131072)

        yield on_chunk


def _sensitivity_and_tight(job, fixed: dict, result, options: JobOptions) -> dict | None:
    """Set the plan's ``sensitivity`` (``asap.search.sensitivity``) and return its tight row (``tight_row``;
    only under the default headroom)."""
    from asap.search.advice import tight_row
    from asap.search.sensitivity import sensitivity

    result.sensitivity = sensitivity(job, result.candidates)
    return tight_row(job, fixed, result, options.args()) if options.memory_margin is None else None


def _print_tight(tight: dict | None) -> None:
    """The tight row (``tight_row``) under the table, where there is one."""
    if tight:
        out_console.print(f"tight: {tight['strategy_compact']} {seconds(tight['step_time_s'])} at "
                          f"{tight['peak_memory_gb']:.1f} GiB ({tight['device_share']:.0%} of the device): "
                          f"{tight['why']}", soft_wrap=True, highlight=False)


def candidates_table(result, devices: int, moe: bool, framework=None, include_oom: bool = False,
                     tokens: Optional[float] = None, price: Optional[float] = None, mfu_peak: str = "bf16") -> Table:
    """One row per candidate: its strategy (the keys that differ from estimate's defaults; the JSON output has
    every key in ``strategy_string``) and the figures estimate gives for it."""
    from rich.table import Table

    from asap.spec.strategy import format_compact

    shape = "the fastest of each tp, pp, cp, ep shape (--all: every row)" if result.distinct else "every row"
    table = Table(title=f"fastest configurations: {shape}", title_justify="left", caption_justify="left",
                  caption="asap estimate ... -S '<strategy>' gives each row (the job's options as here). likely range: "
                          "the 80% prediction interval. ≈: its interval overlaps the best's by more than half of "
                          "the narrower (tie_with_best), a tie the model cannot break: measure to decide. GiB: peak "
                          "reserved per "
                          f"device, at most {result.memory_limit_gb:.1f} GiB: the device's "
                          f"{result.device_memory_gb:.1f} less {result.headroom_gb:.1f} GiB of headroom "
                          "(--memory-margin; by default 8% for allocator fragmentation and NCCL buffers, 0: the "
                          f"edge); free: what the peak leaves of the device. MFU: of the {mfu_peak} peak.")
    names = [format_compact(e.strategy, devices, moe, framework) for e in result.candidates]
    cols = ["#", "strategy", "step", "likely range", "tokens/s", "MFU", "GiB", "free", "bottleneck"]
    cols += ["fits"] if include_oom else []
    for col in cols:
        if col == "strategy":
            strategy_column(table, names)
            continue
        table.add_column(col, justify="left" if col in ("bottleneck", "fits") else "right")
    for i, (e, tie, name) in enumerate(zip(result.candidates, result.ties(), names, strict=True), 1):
        low, high = e.step_time_range_s
        row = [f"{i}{' ≈' if tie and i > 1 else ''}", name,
               seconds(e.step_time_s), f"{seconds(low)}-{seconds(high)}", f"{e.tokens_per_s:,.0f}", f"{e.mfu:.1%}",
               f"{e.peak_memory_gb:.1f}", f"{result.device_memory_gb - e.peak_memory_gb:.1f}", human_word(e.bottleneck, e.bottleneck_class)]
        row += (["yes" if e.fits else "[red]no[/]"] if include_oom else [])
        table.add_row(*row)
    return table


def budget_table(result, devices: int, tokens: float, price: Optional[float] = None) -> Table:
    """``--tokens``: each candidate's time to train and device-hours (and cost), a table of its own so the
    candidates' table keeps its width."""
    from rich.table import Table

    from asap.budget import training_budget

    table = Table(title="training budget (--tokens)", title_justify="left")
    for col in ["#", "days", "device-hours"] + (["cost"] if price is not None else []):
        table.add_column(col, justify="right")
    for i, e in enumerate(result.candidates, 1):
        b = training_budget(e.tokens_per_s, devices, tokens, price)
        table.add_row(str(i), f"{b['time_to_train_days']:,.1f}", f"{b['device_hours']:,.0f}",
                      *([f"${b['cost']:,.0f}"] if price is not None else []))
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
    from rich.table import Table

    from asap.spec.strategy import format_compact

    shown = thin_front(result.pareto)
    names = [format_compact(e.strategy, devices, moe, framework) for e in shown]
    table = Table(title="Pareto front: step time against peak memory", title_justify="left", caption_justify="left",
                  caption=f"each row is faster than those below it and needs more memory; {len(shown)} of "
                          f"{len(result.pareto)} shown, at least {FRONT_MEMORY_STEP:.0%} less memory each "
                          f"(--json: all)")
    strategy_column(table, names)
    for col in ("step", "GiB reserved"):
        table.add_column(col, justify="right")
    for e, name in zip(shown, names, strict=True):
        table.add_row(name, seconds(e.step_time_s), f"{e.peak_memory_gb:.1f}")
    return table


def stage_split_line(i: int, e, split: dict) -> str:
    layers = "/".join(str(x) for x in split["layers_per_stage"])
    if split.get("adopted"):
        return (f"#{i}: layers placed by the layer-split search ({split['solver']}), {layers}: "
                f"{split['default_split_step_time_s']:.3f} s with the default split")
    if "adopted" in split:
        return (f"#{i}: the layer-split search's split {layers} is not faster than the default split under the "
                "estimate; kept")
    return f"#{i}: the layer-split search keeps the default split ({split['solver']})"


def plan_limits(result, devices: int, global_batch: int, fixed: dict, top: int, include_oom: bool) -> list[str]:
    """Every limit the search applied that shaped what is shown: fewer rows than --top, dp capped by the
    global batch, rows that do not fit."""
    out = []
    n = len(result.candidates)
    if n < top:
        pinned = [k for k in ("tp", "pp", "cp", "ep") if k in fixed]
        why = (f"only {n} (tp, pp, cp, ep) shape{'s' if n != 1 else ''}" if result.distinct
               else f"only {n} configuration{'s' if n != 1 else ''}")
        held = f" with {', '.join(pinned)} pinned by --fix" if pinned else ""
        fit = "exist" if include_oom else f"fit (of {result.fitting:,} fitting configurations)"
        more = "; --all lists every variation of each shape" if result.distinct else ""
        out.append(f"{n} row{'s' if n != 1 else ''}, fewer than --top {top}: {why}{held} {fit}{more}")
    dp_max = max(d for d in range(1, devices + 1) if devices % d == 0 and global_batch % d == 0)
    if dp_max < devices and "dp" not in fixed:
        out.append(f"dp is at most {dp_max}: the global batch {global_batch} must be divisible by dp x mbs, and "
                   f"{dp_max} is its largest divisor that divides the {devices} devices; the rest must go to tp, pp "
                   f"and cp (a global batch with more such divisors frees dp)")
    if include_oom:
        out.append("--include-oom: the rows that fit come first, fastest first; then those that do not, least over "
                   "the device memory first")
    return out


def _print_emitted(emit: str, emitted: dict, result, job) -> None:
    """The config on stdout; on stderr, which plan row it is and the faster ones the format cannot express."""
    for sk in emitted["skipped"]:
        err_console.print(f"note: a faster candidate {sk['strategy_string']} is not expressible: {sk['reason']}",
                          markup=False, highlight=False, soft_wrap=True)
    i, e = next((i, e) for i, e in enumerate(result.candidates, 1) if str(e.strategy) == emitted["strategy_string"])
    err_console.print(f"note: the {emit} config of plan #{i}, {compact_of(e, job)}", markup=False,
                      highlight=False, soft_wrap=True)
    print(emitted["text"])


def _print_plan(job, result, limits: list[str], args: str, include_oom: bool, budget, price) -> None:
    """The human form of a plan: the candidates, the limits, the command that gives #1 (``args``: the job's
    options), the Pareto front, the TPU mesh and the stage splits."""
    from asap.spec.words import count_text

    m, c, fw = job.model, job.cluster, job.framework

    out_console.print(f"[bold]{m.name}[/] ({count_text(m.num_params())} parameters) on {c.num_devices} x "
                      f"{c.accelerator.name}: searched {result.searched:,} configurations ({result.fitting:,} fit) "
                      f"in {result.search_time_s:.2f} s", soft_wrap=True)
    if result.stopped_early:
        out_console.print(f"[yellow]stopped early[/]: {result.stop_reason} (--time-limit raises the budget)",
                          soft_wrap=True)
    out_console.print(candidates_table(result, c.num_devices, m.moe is not None, fw, include_oom, budget, price,
                                       mfu_peak_name(c)))
    if budget is not None:
        out_console.print(budget_table(result, c.num_devices, budget, price))
    for line in limits:
        out_console.print(f"limit: {line}", highlight=False, soft_wrap=True)
    if result.candidates:
        best = compact_of(result.candidates[0], job)
        out_console.print(f"reproduce #1: asap estimate {args} -S {quote(best)}", highlight=False, soft_wrap=True)
    if result.sensitivity is not None:
        out_console.print(f"sensitivity: {result.sensitivity['summary']} (each input {result.sensitivity['factor']:g}x "
                          f"worse in turn, the top {result.sensitivity['candidates']} repriced)",
                          highlight=False, soft_wrap=True)
    if len(result.pareto) > 1:
        out_console.print(pareto_table(result, c.num_devices, m.moe is not None, fw))
    for mesh in result.meshes:
        if mesh:
            out_console.print("MaxText mesh: " + " ".join(f"{k}={v}" for k, v in mesh.items() if v != 1 or "ici" in k))
            break
    for i, (e, split) in enumerate(zip(result.candidates, result.stage_splits, strict=True), 1):
        if split and split.get("layers_per_stage"):
            out_console.print(stage_split_line(i, e, split))
