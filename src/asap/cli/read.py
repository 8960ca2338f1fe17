"""``asap read``: a stack's own config read back into asap's job (the inverse of ``asap emit``)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from asap.cli.choices import READ_FORMATS, choice
from asap.cli.common import JsonOpt, out_console, print_json
from asap.cli.root import app


@app.command("read")
def read_command(
    config: Path = typer.Argument(..., help="A Megatron-LM launch script or arguments, Megatron-Bridge YAML, torchtitan "
                                            "TOML, MaxText YAML or command line, DeepSpeed JSON or MindFormers YAML."),
    fmt: Optional[str] = choice(None, "--format", "-f", values=READ_FORMATS, what="format",
                                help="The stack whose file it is (default: told from the file)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", help="The accelerator and, where the file does not "
                                                                        "fix it, the device count (preset or file)."),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="Override the cluster's node count."),
    devices: Optional[int] = typer.Option(None, "--devices", help="Override the cluster's device count."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="The model, for a DeepSpeed JSON (which carries "
                                                                    "none); elsewhere checked against the file's."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", "-s", help="The sequence length, for a DeepSpeed JSON."),
    json_out: bool = JsonOpt,
):
    """Read a job as its stack writes it: the model, the train spec, the strategy and (where the file states it) the
    cluster's size; a key asap cannot map is refused in one line naming it."""
    from asap.emit.read import read_job
    from asap.spec.hardware import load_cluster
    from asap.spec.loader import load_model

    c = load_cluster(cluster, nodes, devices) if cluster else None
    job = read_job(config, fmt, cluster=c, model=load_model(model) if model else None, seq_len=seq_len)
    d = job.to_dict()
    if json_out:
        print_json(d)
        return
    m, t = job.model, job.train
    out_console.print(f"{job.format} config {job.source} ({job.framework}):")
    out_console.print(f"  model     {m.name}: {m.num_layers} layers, hidden {m.hidden_size}, "
                      f"{m.num_params() / 1e9:.2f}B parameters{', MoE' if m.moe else ''}")
    compiled = [name for name, on in (("the model", t.fused_elementwise), ("the loss", t.compiled_loss)) if on]
    kernels = f", torch.compile of {' and '.join(compiled)}" if compiled else ""
    out_console.print(f"  train     global batch {t.global_batch}, seq {t.seq_len}, {t.precision}{kernels}",
                      markup=False, highlight=False)
    out_console.print(f"  strategy  {d['strategy_compact']}  ({job.devices} devices)", markup=False)
    out_console.print(f"            {d['strategy']}", markup=False)
    where = d["cluster"]["name"] if d["cluster"] else "no cluster given"
    size = f"{job.nodes} x {job.devices_per_node}" if job.nodes else f"{job.devices} devices"
    out_console.print(f"  cluster   {where} ({size})", markup=False)
