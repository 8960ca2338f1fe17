"""``asap emit``: a strategy as a training framework's own launch arguments or config file."""

from __future__ import annotations

from typing import Optional

import typer

from asap.cli.root import app
from asap.cli.choices import FORMATS, FRAMEWORK_ALIASES, FRAMEWORKS, choice
from asap.cli.common import JOB, OPTIONS, JobOptions, JsonOpt, job_options, print_json


def emit_strategy(fmt: str, job, strategy) -> str:
    """Complete and check ``strategy`` as ``asap estimate`` does for ``job`` (an ``asap.spec.job.Job``; one that
    names no framework is completed with the format's), then emit it (the API ``plan --emit`` can call)."""
    from dataclasses import replace

    from asap.cost.estimate import estimate_spelled
    from asap.emit import FRAMEWORK_OF, check_format, emit

    check_format(fmt)
    if job.train.framework is None:
        job = job.with_train(replace(job.train, framework=FRAMEWORK_OF[fmt]))
    s = estimate_spelled(job, strategy).strategy if isinstance(strategy, (str, dict, type(None))) else strategy
    return emit(fmt, job, s)


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
    json_out: bool = JsonOpt,
    options: JobOptions = OPTIONS,  # the job options above, together (``job_options``)
):
    """Write a strategy in a framework's own option names: Megatron-LM arguments, a Megatron-Bridge
    ConfigContainer YAML, torchtitan TOML, MaxText YAML, MindFormers YAML or DeepSpeed JSON."""
    from asap.emit import check_format

    from dataclasses import replace

    check_format(fmt)
    job = replace(options, framework=framework).load()  # --framework: emit's own (the format's stack by default)
    text = emit_strategy(fmt, job, strategy)
    if json_out:
        print_json({"format": fmt, "text": text})
        return
    print(text, end="")
