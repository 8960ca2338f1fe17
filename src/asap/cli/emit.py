"""``asap emit``: a strategy as a training framework's own launch arguments or config file."""

from __future__ import annotations

from typing import Optional

import typer

from asap.cli.root import app
from asap.cli.common import JOB, OPTIONS, JobOptions, JsonOpt, job_options, print_json


@app.command("emit")
@job_options
def emit_command(
    fmt: str = typer.Option(..., "--format", "-f", help="megatron | torchtitan | maxtext | mindformers | deepspeed"),
    model=JOB,
    cluster=JOB,
    global_batch=JOB,
    seq_len=JOB,
    strategy: str = typer.Option("", "--strategy", "-S", help="'tp8 pp2 rc:sel' or key=value,... (completed as asap estimate does)"),
    precision=JOB,
    framework: Optional[str] = typer.Option(None, "--framework",
                                            help="The stack whose defaults complete the strategy (default: the "
                                                 "format's own; mindformers -> mindspore)."),
    nodes=JOB,
    devices=JOB,
    json_out: bool = JsonOpt,
    options: JobOptions = OPTIONS,  # the job options above, together (``job_options``)
):
    """Write a strategy in a framework's own option names: Megatron-LM arguments, torchtitan TOML, MaxText YAML,
    MindFormers YAML or DeepSpeed JSON."""
    from dataclasses import replace

    from asap.emit import check_format
    from asap.search.advice import emit_strategy

    check_format(fmt)
    job = replace(options, framework=framework).load()  # --framework: emit's own (the format's stack by default)
    text = emit_strategy(fmt, job, strategy)
    if json_out:
        print_json({"format": fmt, "text": text})
        return
    print(text, end="")
