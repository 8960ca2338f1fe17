"""``asap calibrate``: measure this machine and write a cluster file that carries the measurements."""

from __future__ import annotations

import sys
from typing import Optional

import typer
from rich.console import JustifyMethod
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from asap.cli.root import app
from asap.cli.choices import DEVICE_REQUESTS, choice
from asap.cli.common import err_console, out_console, print_json
from asap.errors import AsapError


@app.command("calibrate")
def calibrate_command(
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c",
                                          help="The cluster this machine is (a preset such as local-cpu, or a cluster "
                                               "file): its accelerator's family and nominal peaks."),
    devices: Optional[int] = typer.Option(None, "--devices",
                                          help="Devices (processes) to measure with, and the device count of the file "
                                               "(default: the cluster's, at most 2 x the CPUs or the GPUs visible)."),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="The cluster file to write (.yaml, .yml or .json)."),
    quick: bool = typer.Option(False, "--quick", help="Fewer shapes, sizes and repeats: seconds, noisier."),
    check: Optional[str] = typer.Option(None, "--check",
                                        help="Check that FILE is a calibration made on this machine instead of "
                                             "measuring (exit 2 with one line if it is corrupt or foreign)."),
    device: str = choice("auto", "--device", values=DEVICE_REQUESTS, what="device",
                               help="auto: CUDA when the cluster is a GPU one."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Kill the workers after this many seconds."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
):
    """Time GEMMs, memory bandwidth, host overhead and collectives on this machine; write a cluster file."""
    import time

    if check is not None:
        from asap.calibrate.check import check_calibration_file
        from asap.spec.hardware import load_cluster

        if cluster is not None or out is not None:
            raise AsapError("check", "--check FILE reads a calibration; give it without --cluster and --out")
        t0 = time.perf_counter()
        c = load_cluster(check)
        verdict = check_calibration_file(c, this_machine=True)
        assert c.measured is not None  # check_calibration_file refuses a cluster without a measured block
        if json_out:
            print_json({"cluster_file": check, "measured": dict(c.measured), "time_s": time.perf_counter() - t0,
                        "check": verdict})
            return
        m = verdict["machine"]
        out_console.print(f"{check}: a calibration of this machine ({m.get('hostname')}) made {verdict['date']} with "
                          f"torch {verdict['versions'].get('torch')}")
        for w in verdict["warnings"]:
            err_console.print(f"warning: {w}")
        return
    if cluster is None:
        raise AsapError("cluster", "missing: --cluster C (the cluster this machine is, e.g. local-cpu)")
    if out is None:
        raise AsapError("out", "missing: --out FILE (the cluster file to write, .yaml or .json)")
    if devices is not None and devices < 1:
        raise AsapError("devices", f"must be positive, got {devices}")
    if timeout is not None and timeout <= 0:
        raise AsapError("timeout", f"must be positive, got {timeout}")
    from asap.calibrate import CalibrationFailed, calibrate, check_inputs

    check_inputs(cluster, devices, out, device)  # bad input: one line before any worker starts

    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    try:
        with Progress(*columns, console=err_console, transient=True, disable=not err_console.is_terminal) as progress:
            task = progress.add_task("starting workers", total=None)

            def on_progress(label: str, done: int, total: int) -> None:
                progress.update(task, description=label, completed=done, total=total)

            result = calibrate(cluster, devices=devices, out=out, quick=quick, progress=on_progress, device=device,
                               timeout_s=timeout, remember=True)
    except CalibrationFailed as e:
        print(f"error: calibration failed ({e.kind}): {e.reason}", file=sys.stderr)
        raise typer.Exit(1) from None
    for w in result["measured"].get("warnings", []):
        err_console.print(f"warning: {w}", highlight=False, soft_wrap=True)
    if json_out:
        print_json(result)
        return
    out_console.print(summary_table(result))
    out_console.print(f"wrote {result['cluster_file']} in {result['time_s']:.1f} s; use it as --cluster "
                      f"{result['cluster_file']} (kept as this machine's calibration for the torch executor too)",
                      soft_wrap=True)


def summary_table(result) -> Table:
    m = result["measured"]
    f = m["fitted"]
    table = Table(title=f"calibration of {m['machine'].get('hostname')} ({m['device']}, {m['processes']} processes, "
                        f"{m['precision']})")
    columns: tuple[tuple[str, JustifyMethod], ...] = (("figure", "left"), ("value", "right"), ("low", "right"),
                                                      ("high", "right"))
    for col, just in columns:
        table.add_column(col, justify=just)
    rows = (("GEMM asymptote TFLOP/s per device", "gemm_tflops", 1.0), ("gemm_half_dim", "gemm_half_dim", 1.0),
            ("memory GB/s per device", "hbm_gbps", 1.0), ("bare operator (us)", "kernel_overhead_s", 1e6),
            ("host time per operator of a layer (us)", "host_op_s", 1e6),
            ("DTensor extra per operator (us)", "dtensor_op_s", 1e6),
            ("wait per blocking call between compute (us)", "sync_s", 1e6),
            ("collective bus bandwidth GB/s", "busbw_gbps", 1.0),
            ("collective launch latency (us)", "collective_latency_s", 1e6),
            ("hop latency per ring step (us)", "hop_latency_s", 1e6))
    for label, key, scale in rows:
        if key in f:
            v = f[key]
            if v.get("measured") is False:
                label += " [family's; one group size]"
            table.add_row(label, f"{v['value'] * scale:.4g}", f"{v['low'] * scale:.4g}", f"{v['high'] * scale:.4g}")
    return table
