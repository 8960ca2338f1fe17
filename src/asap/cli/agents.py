"""``asap propose`` (one pass: diagnose, retrieve, propose three checked moves) and ``asap tune`` (the closed
loop: propose, run, remember, recalibrate)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from shlex import quote
from typing import Optional

import typer
from rich.live import Live
from rich.table import Table

from asap.cli.root import app
from asap.cli.choices import EXECUTORS, LAUNCHERS, choice
from asap.cli.common import (JOB, OPTIONS, JobOptions, JsonOpt, PriceOpt, err_console, job_options, out_console,
                             print_json, print_learned, with_learned,
                             strategy_column, widest_token)
from asap.cli.format import seconds
from asap.errors import AsapError

MemoryOpt = typer.Option(None, "--memory", help="The Sharding Memory (SQLite) file (default: under the user's "
                                                 "data folder).")
TuneMemoryOpt = typer.Option(None, "--memory", help="A Sharding Memory (SQLite) file to share trials across runs "
                                                     "(default: this run's own, fresh: REPORT-memory.sqlite beside "
                                                     "--report, else a temporary folder).")
LlmOpt = typer.Option(False, "--llm", help="Let an OpenAI-compatible model add candidates and a narrative "
                                           "(checked like every other candidate; it never runs anything).")
LlmUrlOpt = typer.Option(None, "--llm-base-url", help="Its base URL (default: ASAP_LLM_BASE_URL, OPENAI_BASE_URL).")
LlmModelOpt = typer.Option(None, "--llm-model", help="Its model name (default: ASAP_LLM_MODEL).")
LlmKeyOpt = typer.Option(None, "--llm-key", help="Its API key (default: ASAP_LLM_API_KEY, OPENAI_API_KEY).")


def _llm(enabled: bool, base_url, model, key):
    if not enabled:
        return None
    import os

    from asap.agents.llm import LLMAdvisor, LLMConfig

    config = LLMConfig.from_env(base_url, model, key)
    if config is None:
        raise AsapError("llm-base-url", "missing: --llm needs --llm-base-url or ASAP_LLM_BASE_URL")
    wait = os.environ.get("ASAP_LLM_TIMEOUT_S", "").strip()
    if wait:  # a local model on a CPU answers in minutes, not seconds
        try:
            config.timeout_s = float(wait)
        except ValueError:
            raise AsapError("ASAP_LLM_TIMEOUT_S", f"must be a number of seconds, got {wait!r}") from None
    cap = os.environ.get("ASAP_LLM_MAX_TOKENS", "").strip()
    if cap:  # the answer's length bounds a slow local model's time (one token a few tenths of a second on a CPU)
        if not cap.isdigit() or int(cap) < 1:
            raise AsapError("ASAP_LLM_MAX_TOKENS", f"must be a whole number of tokens >= 1, got {cap!r}")
        config.max_tokens = int(cap)
    return LLMAdvisor(config)


@app.command()
@job_options
def propose(
    traces: Optional[list[str]] = typer.Argument(None, help="Profiler traces of the current run (optional)."),
    model=JOB,
    cluster=JOB,
    global_batch=JOB,
    seq_len=JOB,
    strategy: str = typer.Option("", "--strategy", "-S", help="The current strategy ('tp8 pp2 rc:sel' or key=value,...)."),
    precision=JOB,
    framework=JOB,
    moe_imbalance=JOB,
    lengths=JOB,
    nodes=JOB,
    devices=JOB,
    slices=JOB,
    memory: Optional[str] = MemoryOpt,
    memory_margin=JOB,
    llm: bool = LlmOpt,
    llm_base_url: Optional[str] = LlmUrlOpt,
    llm_model: Optional[str] = LlmModelOpt,
    llm_key: Optional[str] = LlmKeyOpt,
    json_out: bool = JsonOpt,
    options: JobOptions = OPTIONS,  # the job options above, together (``job_options``)
):
    """Diagnose the current strategy (its traces, or the cost model) and propose exactly three checked moves."""
    from asap.agents.analyzer import Analyzer
    from asap.agents.proposer import Proposer, parse_current
    from asap.cost.estimate import estimate

    job, learned = with_learned(options.load(), memory)
    current = parse_current(strategy, job)
    diagnosis = Analyzer(job.cluster).analyze(estimate(job, current), traces=list(traces or []))
    mem = _open_memory(memory) if memory else None
    args = options.args()
    # the proposals (the re-plan included) are chosen under the headroom ``plan`` keeps; the diagnosis above
    # judges the current strategy against the device
    proposer = Proposer(options.load_choosing(), mem, llm=_llm(llm, llm_base_url, llm_model, llm_key),
                        job_args=args)
    result = proposer.propose(current, diagnosis)
    names = [compact_strategy(p.strategy, job) for p in result.proposals]
    commands = [f"asap estimate {args} -S {quote(n)}" for n in names]
    out = {"diagnosis": diagnosis.to_dict(), "current": {"strategy": current.to_dict(),
                                                         "strategy_string": str(current),
                                                         "strategy_compact": compact_strategy(current, job)},
           "within_error": result.within_error, "note": result.note,
           "proposals": [{**p.to_dict(), "strategy_compact": n, "command": cmd}
                         for p, n, cmd in zip(result.proposals, names, commands, strict=True)]}
    if llm:  # what the model added: its kept candidates (priced like the rest), or why the proposals fell back
        out["llm"] = {"fallback": proposer.llm_fallback, "narrative": proposer.narrative,
                      "considered": [c for c in result.considered if c.get("source") == "llm"]}
    out.update(learned)
    if json_out:
        print_json(out)
        return
    out_console.print(f"{diagnosis.bottleneck_class} ({diagnosis.bottleneck}-bound, {diagnosis.source}): "
                      + "; ".join(c.figure for c in diagnosis.classes[:4]), highlight=False, markup=False,
                      soft_wrap=True)
    _print_proposals(result, names, compact_strategy(current, job))
    for i, (p, cmd) in enumerate(zip(result.proposals, commands, strict=True), 1):
        _print_proposal(i, p, cmd)
    out_console.print(result.note, highlight=False, markup=False, soft_wrap=True)
    print_learned(learned)


def compact_strategy(s, job) -> str:
    """``s`` in the compact notation for this job (``asap.spec.strategy.format_compact``)."""
    from asap.spec.strategy import format_compact

    return format_compact(s, job.devices, job.model.moe is not None, job.framework)


def _print_proposals(result, names: list[str], current: str) -> None:
    """The three at a glance: kind, strategy (compact, wrapping between tokens), predicted speedup and step."""
    table = Table(title=f"three proposals for {current}", title_justify="left")
    table.add_column("#")
    table.add_column("kind")
    strategy_column(table, names)
    for col in ("speedup", "range", "predicted"):
        table.add_column(col, justify="right")
    table.add_column("attacks", ratio=1)
    for i, (p, name) in enumerate(zip(result.proposals, names, strict=True), 1):
        lo, hi = p.expected_speedup_range
        table.add_row(str(i), f"{p.kind} ({p.source})", name, f"{p.expected_speedup:.2f}x", f"{lo:.2f}-{hi:.2f}x",
                      seconds(p.predicted_step_time_s), p.attacks)
    out_console.print(table)


def _print_proposal(i: int, p, command: str) -> None:
    """One proposal: its predicted step and range, the figure it attacks, what it follows (entries with their
    lines and sources), the exposed terms it moves (as compare gives them), trade-offs, similar trials, and the
    command that reproduces it (lines that never wrap, so what a user sees is what the docs show)."""
    lo, hi = p.expected_speedup_range
    lines = [f"{i}. {p.kind} ({p.source}), {p.expected_speedup:.2f}x ({lo:.2f}-{hi:.2f}x): "
             f"{p.predicted_step_time_s:.4g} s ({p.predicted_step_time_range_s[0]:.4g}-"
             f"{p.predicted_step_time_range_s[1]:.4g} s), moves {', '.join(p.knobs)}",
             f"   attacks: {p.attacks}", f"   why: {p.rationale.split('): ', 1)[-1]}"]
    for e in p.entries:
        lines.append(f"   follows knowledge:{e['id']} ({e['title']}): " + " ".join(e["lines"]))
        lines.append(f"   source: {'; '.join(e['sources'][:2])}")
    moved = {k: v for k, v in p.term_changes_s.items() if abs(v) >= 1e-3 * p.predicted_step_time_s}
    lines.append("   terms: " + ", ".join(f"{k} {v:+.3g} s" for k, v in moved.items()))
    lines += [f"   trade-off: {t}" for t in p.tradeoffs]
    lines += [f"   similar trial {t['id']}: {t['strategy_string']} measured {t['measured_step_time_s']:.4g} s"
              for t in p.similar_trials]
    lines.append(f"reproduce #{i}: {command}")
    out_console.print("\n".join(lines), highlight=False, markup=False, soft_wrap=True)


def _tune_memory_path(memory: str | None, report: str | None) -> str:
    """Where tune's trials are remembered: ``--memory DB`` (shared across runs, never emptied); else a database of
    this run's own, beside the report (``REPORT-memory.sqlite``) or in a fresh temporary folder, emptied first so
    that the same command gives the same loop on every run (docs/agents.md, "Memory's scope")."""
    import tempfile

    if memory:
        return memory
    path = (Path(str(Path(report).with_suffix("")) + "-memory.sqlite") if report
            else Path(tempfile.mkdtemp(prefix="asap-tune-")) / "memory.sqlite")
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        p.unlink(missing_ok=True)
    return str(path)


def _write_cluster_announced(path: str, coord) -> str:
    _write_corrected_cluster(path, coord)
    _announce("cluster", path, f"the corrected machine (asap estimate -c {path} ...)")
    return path


def _announce(kind: str, path: str, what: str) -> None:
    """One line on stderr for every file tune writes."""
    err_console.print(f"asap tune writes {kind}: {path} ({what})", highlight=False, markup=False, soft_wrap=True)


def _open_memory(path: str | None):
    from asap.memory import Memory

    return Memory.open(path)


def _executor(kind: str, job, sim_machine: str | None, steps: int, profile: str | None = None, **real):
    from asap.execute.factory import make_executor, tune_executor
    from asap.spec.hardware import load_cluster

    if kind == "sim":
        machine = replace(job, cluster=load_cluster(sim_machine, devices=job.devices)) if sim_machine else job
        return make_executor("sim", job=machine)
    if sim_machine:
        raise AsapError("sim-machine", "only the sim executor takes --sim-machine")
    if kind in ("torch", "jax"):
        return make_executor(kind, model=job.model, train=job.train, steps=steps, profile_dir=profile)
    return tune_executor(kind, job, steps=steps, workdir=profile, **real)


def _real_options(executor, launch, launcher, var, step_time_regex, step_time_scale, trial_timeout, python) -> dict:
    """What a stack or command executor takes from the command line (nothing for sim, torch, jax)."""
    from asap.execute.launch import parse_variables

    if executor in ("sim", "torch", "jax"):
        return {}
    return dict(launch=launch, launcher=launcher, variables=parse_variables(var), step_time_regex=step_time_regex,
                step_time_scale=step_time_scale, timeout_s=trial_timeout, python=python)


def _trial_table(job, executor: str):
    """The live table of trials (strategies in the compact notation, wrapping between tokens) and the callback
    that fills it."""
    table = Table(title=f"tune {job.model.name} on {job.devices} x {job.cluster.accelerator.name} ({executor})",
                  title_justify="left")
    for col in ("#", "strategy", "status", "measured", "predicted", "vs first", "correction", "reason"):
        if col == "strategy":
            strategy_column(table, ["tp8 pp8 rc:full split:9/8x14/7"])  # wraps between tokens as trials come
            continue
        table.add_column(col, justify="right" if col in ("measured", "predicted", "vs first") else "left")

    def on_trial(rec, coord):
        first = next((r.measured_step_time_s for r in coord.trials if r.measured_step_time_s), None)
        vs = (f"{first / rec.measured_step_time_s:.2f}x" if first and rec.measured_step_time_s else "-")
        name = compact_strategy(rec.strategy, job)
        column = table.columns[1]  # a token longer than the placeholder's widens the column, never folds
        column.min_width = max(column.min_width or 0, widest_token([name]))
        table.add_row(str(len(coord.trials)), name,
                      rec.status, seconds(rec.measured_step_time_s) if rec.measured_step_time_s else "-",
                      seconds(rec.predicted_step_time_s) if rec.predicted_step_time_s else "-", vs,
                      coord.correction.short(),
                      (rec.reason or ("" if rec.adopted or not rec.verdict else rec.verdict))[:60])

    return table, on_trial


def _write_corrected_cluster(path: str, coord) -> None:
    """The loop's corrected machine as a cluster file, written whole or not at all."""
    import yaml

    from asap.agents.correction import corrected_cluster_document
    from asap.spec.files import write_whole

    c = coord.correction
    head = (f"# asap tune: the catalog's {coord.job.cluster.accelerator.name} corrected by {c.trials} measured trials "
            f"(compute x{c.compute:.3g}, scale-up x{c.scale_up:.3g}, scale-out x{c.scale_out:.3g} slower).\n")
    text = head + yaml.safe_dump(corrected_cluster_document(coord.job.cluster, c), sort_keys=False, width=120)
    write_whole(Path(path), text, "write-cluster")


def _write_report(path: str, coord, result: dict, mem, cluster_file: str | None = None,
                  model_arg: str | None = None, budget: tuple[float | None, float | None] = (None, None),
                  ) -> dict[str, str]:
    """The run's page: trials, predicted against measured, the best's breakdown, the next three proposals, each
    prediction with the ``asap estimate -c CLUSTER_FILE`` command that gives it (the corrected machine, written
    beside the page when --write-cluster names no file)."""
    from asap.agents.coordinator import after_best
    from asap.report.html import write_report

    job = coord.job
    m, t = job.model, job.train
    own = cluster_file is None
    cluster_file = cluster_file or str(Path(path).with_suffix("")) + "-cluster.yaml"
    Path(cluster_file).parent.mkdir(parents=True, exist_ok=True)
    _write_corrected_cluster(cluster_file, coord)
    if own:  # --write-cluster announces its own file
        _announce("cluster", cluster_file, f"the corrected machine the report's commands price on "
                                           f"(asap estimate -c {cluster_file} ...)")
    args = JobOptions(model_arg or m.name, cluster_file, t.global_batch, t.seq_len, t.precision, t.framework,
                      devices=job.devices).args()
    best_estimate, proposals = None, []
    trials = [{**tr, "strategy_compact": compact_strategy(rec.strategy, job)}
              for tr, rec in zip(result["trials"], coord.trials, strict=True)]
    if (after := after_best(coord, mem)) is not None:
        name = compact_strategy(coord.best[0], job)
        best_estimate = {**after.estimate.to_dict(), "strategy_compact": name,
                         "command": f"asap estimate {args} -S {quote(name)}"}
        for p in after.proposals:
            pname = compact_strategy(p.strategy, job)
            proposals.append({**p.to_dict(), "strategy_compact": pname,
                              "command": f"asap estimate {args} -S {quote(pname)}"})
    best_row = ({**result["best"], "strategy_compact": compact_strategy(coord.best[0], job)}
                if coord.best else None)
    story = _tune_story(coord, trials, budget)
    trials = [{**tr, **figures} for tr, figures in zip(trials, story.trials, strict=True)]
    write_report(path, {**result, "trials": trials, "best": best_row}, best_estimate=best_estimate, proposals=proposals,
                 title=f"asap tune: {m.name} on {job.devices} x {job.cluster.accelerator.name}", story=story.to_dict())
    _announce("report", path, "the run's page")
    return {"report": path, "cluster": cluster_file}


def _tune_story(coord, trials: list[dict], budget: tuple[float | None, float | None]):
    """What the report says in words, each trial's throughput, MFU and memory, the best as the job to launch."""
    from asap.agents.tune_story import tune_story

    names = [str(tr["strategy_compact"]) for tr in trials]
    return tune_story(coord.job, coord.corrected(), [rec.strategy for rec in coord.trials], trials, names,
                      coord.correction.to_dict(), coord.best[0] if coord.best else None, *budget)


def _numerics_check(ex, m, t):
    """``--verify-numerics``: the torch executor's runs compared with ``asap.numerics.align``."""
    from asap.numerics.align import NumericsCheck

    if ex.name != "torch":
        raise AsapError("verify-numerics", f"needs --executor torch (real runs to compare), got {ex.name}")
    return NumericsCheck(m, t.global_batch, t.seq_len, ex.precision, device=ex.device, timeout_s=ex.timeout_s)


ExecutorOpt = choice("sim", "--executor", values=EXECUTORS, what="executor",
                     help="sim (the cost model of --sim-machine), torch or jax (asap's reference trainers), "
                          "torchtitan, deepspeed or maxtext (the stack on its emitted config), or command "
                          "(--launch TEMPLATE).")
LaunchOpt = typer.Option(None, "--launch", help="With --executor command: the stack's command line, with "
                                                "placeholders ({tp}, {config}, {emitted_args}, {trial_dir}, ...: "
                                                "docs/tune.md).")
LauncherOpt = choice("local", "--launcher", values=LAUNCHERS, what="launcher",
                     help="With --launch: the prefix put before the template.")
VarOpt = typer.Option(None, "--var", help="KEY=VALUE for a {KEY} placeholder (repeatable).")
StepRegexOpt = typer.Option(None, "--step-time-regex", help="With --launch and no --framework: a regex around the "
                                                            "step time; --step-time-scale converts it to seconds.")
StepScaleOpt = typer.Option(1.0, "--step-time-scale", help="Seconds per unit of --step-time-regex.")
TrialTimeoutOpt = typer.Option(None, "--trial-timeout", help="Seconds a real trial may take before it is killed as "
                                                             "a hang.")
PythonOpt = typer.Option(None, "--python", help="The stack's interpreter (MaxText needs its own Python >= 3.12 "
                                                "environment).")


ReportTokensOpt = typer.Option(None, "--tokens", help="The training budget the report prices the best strategy for "
                                                      "(15T, 300B; default 1T).")


@app.command()
@job_options
def tune(
    model=JOB,
    cluster=JOB,
    global_batch=JOB,
    seq_len=JOB,
    executor: str = ExecutorOpt,
    launch: Optional[str] = LaunchOpt,
    launcher: str = LauncherOpt,
    var: Optional[list[str]] = VarOpt,
    step_time_regex: Optional[str] = StepRegexOpt,
    step_time_scale: float = StepScaleOpt,
    trial_timeout: Optional[float] = TrialTimeoutOpt,
    python: Optional[str] = PythonOpt,
    budget: int = typer.Option(6, "--budget", min=1, help="Trials to run at most."),
    strategy: str = typer.Option("", "--strategy", "-S", help="The strategy to start from ('tp8 pp2' or key=value,...)."),
    sim_machine: Optional[str] = typer.Option(None, "--sim-machine",
                                              help="A cluster file the sim executor 'measures' on."),
    steps: int = typer.Option(5, "--steps", min=2, help="Steps per real trial (torch, jax or a stack)."),
    verify_numerics: bool = typer.Option(False, "--verify-numerics",
                                         help="With --executor torch: a new strategy must align numerically with "
                                              "the first trial's (asap align, 2 steps) before it can be best."),
    precision=JOB,
    framework=JOB,
    nodes=JOB,
    devices=JOB,
    slices=JOB,
    memory: Optional[str] = TuneMemoryOpt,
    report: Optional[str] = typer.Option(None, "--report", help="Write a self-contained HTML page of the run."),
    write_cluster: Optional[str] = typer.Option(None, "--write-cluster",
                                                help="Write the corrected machine as a cluster file (YAML): "
                                                     "`asap estimate -c FILE` then prices any strategy as the "
                                                     "loop's final correction does."),
    profile: Optional[str] = typer.Option(None, "--profile", help="With real runs: profile each trial into "
                                                                  "DIR/trialN (a stack's trials: its config, log and "
                                                                  "traces); each trial's gain or loss is then "
                                                                  "explained from the trace diff."),
    tokens: Optional[str] = ReportTokensOpt,
    price_per_device_hour: Optional[float] = PriceOpt,
    llm: bool = LlmOpt,
    llm_base_url: Optional[str] = LlmUrlOpt,
    llm_model: Optional[str] = LlmModelOpt,
    llm_key: Optional[str] = LlmKeyOpt,
    json_out: bool = JsonOpt,
    options: JobOptions = OPTIONS,  # the job options above, together (``job_options``)
):
    """Propose, run, remember and recalibrate until the budget is spent or two trials bring < 2%."""
    from asap.budget import budget_of
    from asap.agents.coordinator import Coordinator
    from asap.execute.factory import tune_framework

    # chosen under the headroom ``plan`` keeps (``JobOptions.load_choosing``): its start and proposals
    job = replace(options, framework=tune_framework(executor, options.framework)).load_choosing()
    budget_args = budget_of(tokens, price_per_device_hour)
    if profile and executor == "sim":
        raise AsapError("profile", f"needs real runs (--executor torch, jax, a stack or command), got {executor}")
    real = _real_options(executor, launch, launcher, var, step_time_regex, step_time_scale, trial_timeout, python)
    ex = _executor(executor, job, sim_machine, steps, profile, **real)
    verify = _numerics_check(ex, job.model, job.train) if verify_numerics else None
    table, on_trial = _trial_table(job, executor)
    advisor = _llm(llm, llm_base_url, llm_model, llm_key)
    live = Live(table, console=err_console, transient=True, refresh_per_second=4)
    files = {"memory": _tune_memory_path(memory, report)}
    with _open_memory(files["memory"]) as mem, (live if err_console.is_terminal and not json_out else nullcontext()):
        coord = Coordinator(job, ex, mem, budget, start=strategy or None, on_trial=on_trial, llm=advisor,
                            verify=verify)
        result = coord.run()
        if report:
            files.update(_write_report(report, coord, result, mem, write_cluster, options.model, budget_args))
    if write_cluster:
        files["cluster"] = _write_cluster_announced(write_cluster, coord)
    _announce("memory", files["memory"], "the shared Sharding Memory (--memory)" if memory else
              "this run's own Sharding Memory, made fresh (--memory DB to share trials across runs)")
    if json_out:
        print_json({**result, "files": files})
        return
    _print_tune(table, coord, report)


def _print_tune(table, coord, report: str | None) -> None:
    out_console.print(table)
    out_console.print("vs first: the first measured trial's step time over this one's; correction: how much slower "
                      "than the catalog the loop finds this machine's compute / scale-up fabric / scale-out fabric", highlight=False)
    if coord.best:
        out_console.print(f"best: {compact_strategy(coord.best[0], coord.job)} at "
                          f"{seconds(coord.best[1])} per step (measured)", highlight=False,
                          soft_wrap=True)
    if report:
        out_console.print(f"report: {report}", highlight=False)
