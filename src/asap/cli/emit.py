"""``asap emit``: a strategy as a training framework's own launch arguments or config file."""

from __future__ import annotations

from typing import Optional

import typer

from asap.cli.root import app
from asap.cli.common import print_json
from asap.cli.estimate import (BatchOpt, ClusterOpt, DevicesOpt, JsonOpt, ModelOpt, NodesOpt, PrecisionOpt, SeqOpt,
                               load_job)


def emit_strategy(fmt: str, m, c, t, strategy) -> str:
    """Complete and check ``strategy`` as ``asap estimate`` does, then emit it (the API ``plan --emit`` can call)."""
    from dataclasses import replace

    from asap.cost.estimate import estimate_spelled
    from asap.emit import FRAMEWORK_OF, check_format, emit

    check_format(fmt)
    if t.framework is None:
        t = replace(t, framework=FRAMEWORK_OF[fmt])
    s = estimate_spelled(m, c, t, strategy).strategy if isinstance(strategy, (str, dict, type(None))) else strategy
    return emit(fmt, m, c, t, s)


@app.command("emit")
def emit_command(
    fmt: str = typer.Option(..., "--format", "-f", help="megatron | torchtitan | maxtext | mindformers | deepspeed"),
    model: str = ModelOpt,
    cluster: str = ClusterOpt,
    global_batch: int = BatchOpt,
    seq_len: int = SeqOpt,
    strategy: str = typer.Option("", "--strategy", "-S", help="'tp8 pp2 rc:sel' or key=value,... (completed as asap estimate does)"),
    precision: str = PrecisionOpt,
    framework: Optional[str] = typer.Option(None, "--framework",
                                            help="The stack whose defaults complete the strategy (default: the "
                                                 "format's own; mindformers -> mindspore)."),
    nodes: Optional[int] = NodesOpt,
    devices: Optional[int] = DevicesOpt,
    json_out: bool = JsonOpt,
):
    """Write a strategy in a framework's own option names: Megatron-LM arguments, torchtitan TOML, MaxText YAML,
    MindFormers YAML or DeepSpeed JSON."""
    from asap.emit import check_format

    check_format(fmt)
    m, c, t = load_job(model, cluster, nodes, devices, global_batch, seq_len, precision, framework)
    text = emit_strategy(fmt, m, c, t, strategy)
    if json_out:
        print_json({"format": fmt, "text": text})
        return
    print(text, end="")
