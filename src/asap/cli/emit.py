"""``asap emit``: a strategy as a training framework's own launch arguments or config file."""

from __future__ import annotations

from typing import Optional

import typer

from asap.cli.root import app
from asap.cli.choices import FORMATS, FRAMEWORK_ALIASES, FRAMEWORKS, choice
from asap.cli.common import JOB, OPTIONS, JobOptions, JsonOpt, err_console, job_options, print_json


def emit_strategy(fmt: str, job, strategy, tokens: float | None = None, strict: bool = False) -> str:
    """Complete and check ``strategy`` as ``asap estimate`` does for ``job`` (an ``asap.spec.job.Job``; one that
    names no framework is completed with the format's), then emit it (the API ``plan --emit`` can call)."""
    return emitted_job(fmt, job, strategy, tokens, strict)["text"]


def emitted_job(fmt: str, job, strategy, tokens: float | None = None, strict: bool = False) -> dict:
    """``{format, text, config_file, files: {name: text}, launch: {...}, run: {...}}``: the config of ``strategy``
    completed as ``emit_strategy`` does, ``tokens`` long (its steps, schedule and checkpoint interval from the
    budget and the estimated step time: ``asap.emit.launch.run_length``), with its launch and companion files."""
    from dataclasses import asdict, replace

    from asap.cost.estimate import estimate, estimate_spelled
    from asap.emit import FRAMEWORK_OF, check_format, config_name, emit, launch
    from asap.emit.launch import run_length

    check_format(fmt)
    if job.train.framework is None:
        job = job.with_train(replace(job.train, framework=FRAMEWORK_OF[fmt]))
    spelled = isinstance(strategy, (str, dict, type(None)))
    est = estimate_spelled(job, strategy) if spelled else estimate(job, strategy) if tokens is not None else None
    s = est.strategy if spelled and est is not None else strategy
    run = run_length(job.train, tokens, est.step_time_s if est is not None else None)
    text = emit(fmt, job, s, run, strict)
    ln = launch(fmt, job, s, run, strict)
    return {"format": fmt, "text": text, "config_file": config_name(fmt), "files": dict(ln.files),
            "launch": ln.to_dict(), "run": {k: v for k, v in asdict(run).items() if v is not None}}


def write_job(out_dir: str, emitted: dict) -> list[str]:
    """The config and its companion files under ``out_dir`` (created), each written whole: their paths."""
    from pathlib import Path

    from asap.spec.files import write_whole

    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in {emitted["config_file"]: emitted["text"], **emitted["files"]}.items():
        write_whole(folder / name, text, "out")
        paths.append(str(folder / name))
    return paths


@app.command("emit")
@job_options
def emit_command(
    fmt: str = choice(..., "--format", "-f", values=FORMATS, what="format",
                      help="The stack whose own option names the config is written in."),
    model=JOB,
    cluster=JOB,
    global_batch=JOB,
    seq_len=JOB,
    strategy: str = typer.Option("", "--strategy", "-S", help="'tp8 pp2 rc:sel' or key=value,... (completed as asap estimate does)"),
    precision=JOB,
    framework: Optional[str] = choice(None, "--framework", values=FRAMEWORKS, aliases=FRAMEWORK_ALIASES,
                                      what="framework", help="The stack whose defaults complete the strategy "
                                                             "(default: the format's own; mindformers -> mindspore)."),
    nodes=JOB,
    devices=JOB,
    slices=JOB,
    tokens: Optional[str] = typer.Option(None, "--tokens", help="A training budget in tokens (2T, 300B, 2e12): the "
                                                                "run's steps, its learning-rate warmup and decay and "
                                                                "its checkpoint interval follow from it."),
    strict: bool = typer.Option(False, "--strict", help="Refuse a training setting the stack lacks (e.g. a MoE "
                                                        "balancing loss in torchtitan) instead of emitting the "
                                                        "nearest it has with a line saying what differs."),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="Write the config and its companion files (the "
                                                                "files its launch line runs) into this folder."),
    json_out: bool = JsonOpt,
    options: JobOptions = OPTIONS,  # the job options above, together (``job_options``)
):
    """Write a strategy in a framework's own option names: Megatron-LM arguments, a Megatron-Bridge
    ConfigContainer YAML, torchtitan TOML, MaxText YAML, MindFormers YAML or DeepSpeed JSON."""
    from dataclasses import replace

    from asap.budget import parse_tokens

    budget = None if tokens is None else parse_tokens(tokens)
    job = replace(options, framework=framework).load()  # --framework: emit's own (the format's stack by default)
    emitted = emitted_job(fmt, job, strategy, budget, strict)
    paths = write_job(out, emitted) if out else []
    if json_out:
        print_json({**emitted, **({"written": paths} if out else {})})
        return
    _print_emitted(emitted, paths)


def _print_emitted(emitted: dict, paths: list[str]) -> None:
    """The config on stdout (or, with --out, the files written and the launch line); what a JSON config cannot
    carry as comments (its launch) and a companion file's name on stderr."""
    ln = emitted["launch"]
    if paths:
        for p in paths:
            print(f"wrote {p}")
        print(f"launch ({ln['where']}, in that folder): {ln['command']}")
        return
    print(emitted["text"], end="")
    if not emitted["text"].startswith("#"):  # JSON: no comments
        err_console.print(f"launch ({ln['where']}): {ln['command']}", markup=False, highlight=False)
        for item in ln["to_set"]:
            err_console.print(f"you must still set: {item}", markup=False, highlight=False)
    for name in emitted["files"]:
        err_console.print(f"note: the launch line runs {name}: asap emit ... --out DIR writes it beside the config",
                          markup=False, highlight=False)
