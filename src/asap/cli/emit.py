"""``asap emit``: a strategy as a training framework's own launch arguments or config file."""

from __future__ import annotations

from typing import Optional

import typer

from asap.cli.root import app
from asap.cli.choices import FORMATS, FRAMEWORK_ALIASES, FRAMEWORKS, choice
from asap.cli.common import JOB, OPTIONS, JobOptions, JsonOpt, err_console, job_options, print_json
from asap.search.advice import emitted_job, write_job


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
    fused_kernels=JOB,
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
