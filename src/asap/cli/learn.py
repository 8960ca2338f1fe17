"""``asap learn``: measured runs into the Sharding Memory (``asap.learn``)."""

from __future__ import annotations

from typing import Optional

import typer

from asap.cli.common import JsonOpt, err_console, out_console, print_json
from asap.cli.root import app
from asap.errors import AsapError


@app.command()
def learn(
    memory: str = typer.Option(..., "--memory", help="The Sharding Memory (SQLite) file the runs go into (created "
                                                     "if missing; an older file is upgraded in place)."),
    cases: Optional[str] = typer.Option(None, "--cases", help="A validation-case file (the format of "
                                                              "shared/reference/*.json): every case is a measured run."),
    job: Optional[str] = typer.Option(None, "--job", help="A stack's config (Megatron-LM arguments, Megatron-Bridge "
                                                          "YAML, torchtitan TOML, MaxText YAML, DeepSpeed JSON, "
                                                          "MindFormers YAML): the job and strategy of --log."),
    log: Optional[str] = typer.Option(None, "--log", help="The training log of --job (its step-time lines; the "
                                                          "warm-up dropped, the median kept)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", help="The cluster --job ran on (a preset or a "
                                                                        "cluster file), where the config does not "
                                                                        "state it."),
    json_out: bool = JsonOpt,
):
    """Store measured step times (published cases, or a stack's config and log) so that estimate, plan, compare,
    propose and validate --memory DB correct the cost model with them."""
    from asap.learn import Ingested, learn_cases, learn_job_log
    from asap.memory import Memory

    if (cases is None) == (job is None):
        raise AsapError("learn", "give either --cases FILE or --job CONFIG --log LOG")
    if job is not None and log is None:
        raise AsapError("log", "--job needs the run's training log (--log LOG)")
    with Memory.open(memory) as mem:
        if cases is not None:
            out = learn_cases(mem, cases)
        else:
            assert log is not None
            out = Ingested(added=[learn_job_log(mem, job or "", log, cluster)])
        total = len(mem.measured_runs())
    for r in out.refused:
        err_console.print(f"refused {r['source_ref']}: {r['reason']}", highlight=False)
    if json_out:
        print_json({**out.to_dict(), "memory": str(memory), "measured_runs": total})
        return
    for r in out.added:
        extra = ""
        if r.get("steps"):
            extra = f" (median of {r['steps']} steps after warm-up, spread {r['step_time_spread_s']:.3g} s" + \
                    (f", peak {r['peak_memory_gb']:.1f} GiB" if r.get("peak_memory_gb") else "") + ")"
        out_console.print(f"measured run {r['id']}: {r['source_ref']} at {r['measured_step_time_s']:.4g} s{extra}",
                          highlight=False, soft_wrap=True)
    out_console.print(f"{len(out.added)} added, {len(out.refused)} refused (already there); {memory} holds "
                      f"{total} measured runs", highlight=False, soft_wrap=True)
