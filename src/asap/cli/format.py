"""What the commands print, shared: durations, an estimate's compact strategy and headline, its table of
parts, the lines for a lengths file and for the figures' provenance. Formatting only: every figure comes from
the layers below."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table


def compact_of(est, job) -> str:
    """An estimate's strategy in the compact notation (``asap.spec.strategy.format_compact``)."""
    from asap.spec.strategy import format_compact

    return format_compact(est.strategy, job.devices, job.model.moe is not None, job.framework)


def mfu_peak_name(c) -> str:
    """The precision whose dense peak MFU is taken against (``asap.cost.estimate.mfu_peak_flops``)."""
    return "bf16" if c.accelerator.peak_tflops.get("bf16") else "fp32"


def readable_keys(d: dict, est, job) -> dict:
    """An estimate's JSON object with the keys a reader needs beside the full ``strategy_string``: the
    compact strategy and the peak its ``mfu`` is taken against."""
    return {**d, "strategy_compact": compact_of(est, job), "mfu_peak": mfu_peak_name(job.cluster)}


def estimate_table(est) -> Table:
    """The step's parts: busy time of each, what is left exposed on the critical path, its share."""
    from rich.table import Table

    table = Table()
    table.add_column("part")
    table.add_column("busy", justify="right")
    table.add_column("exposed", justify="right")
    table.add_column("share of step", justify="right")
    for k, v in est.breakdown_s.items():
        exp = est.exposed_s.get(k, 0.0)
        table.add_row(k, seconds(v), seconds(exp), f"{exp / est.step_time_s:.1%}")
    return table


def seconds(x: float) -> str:
    """A duration in the unit that reads best: s, ms or µs (0 as 0); ``asap.spec.words.duration_text``."""
    from asap.spec.words import duration_text

    return duration_text(x)


def headline(est, devices: int, capacity_gb: float, precision: str = "bf16", mfu_peak: str = "bf16") -> list[str]:
    """The figures a user reads first, one phrase per line part, never wrapped mid-phrase."""
    low, high = est.step_time_range_s
    own = (f", {est.precision_peak_utilization:.1%} of the {precision} peak"
           if est.precision_peak_utilization is not None else "")
    from asap.cost.device_memory import HEADROOM_SHARE

    # judged against the device (less any --memory-margin); the headroom the choosing commands keep beside it
    fit = (f"fits (and under the {HEADROOM_SHARE:.0%} headroom a plan keeps)" if est.fits_with_headroom else f"fits the device, not under the {HEADROOM_SHARE:.0%} headroom a plan "
           "keeps (fits_with_headroom false)") if est.fits else "[bold red]DOES NOT FIT[/]"
    allocated = est.memory_gb.get("allocated")
    alloc = f" ({allocated:.1f} GiB allocated)" if allocated is not None else ""
    return [f"step {seconds(est.step_time_s)} (likely {seconds(low)} to {seconds(high)}) · "
            f"{est.tokens_per_s:,.0f} tokens/s ({est.tokens_per_s_per_device:,.0f} per device, {devices} devices) · "
            f"MFU {est.mfu:.1%} (of the {mfu_peak} peak{own}; attention FLOPs counted non-causal, "
            f"causal: {est.mfu_causal:.1%})",
            f"memory {est.peak_memory_gb:.1f} GiB reserved{alloc} of {round(capacity_gb, 1):g} GiB per device: {fit}"]


def does_not_fit_lines(est, capacity_gb: float, fix_cmd: str) -> list[str]:
    """Why a strategy does not fit (its largest memory terms) and what to run next."""
    terms = {k: v for k, v in est.memory_gb.items() if k != "allocated"}
    top = sorted(terms.items(), key=lambda kv: -kv[1])[:3]
    return [f"does not fit: needs {est.peak_memory_gb:.1f} GiB reserved per device, "
            f"{est.peak_memory_gb - capacity_gb:.1f} GiB over the {round(capacity_gb, 1):g} GiB; largest terms: "
            + ", ".join(f"{k} {v:.1f} GiB" for k, v in top),
            f"next: {fix_cmd}"]


def lengths_line(r: dict) -> str:
    b = r["balanced"]
    return (f"lengths: {r['samples']} samples over {r['steps']} steps; the slowest rank's attention work is "
            f"{r['max_over_mean']:.2f}x the mean ({r['imbalance_s']:.3f} s of the step); balanced: "
            f"{b['step_time_s']:.3f} s ({b['predicted_gain']:.1%} faster) with: {b['command']}")


def figures_line(figures: dict) -> str:
    if figures["source"] == "catalog":
        return f"figures: the catalog's ({figures['catalog'][0].split(': ', 1)[-1]}); no calibration of this cluster"
    return (f"figures: measured on {figures['machine']} {figures['date']} with {figures['processes']} processes "
            f"({', '.join(figures['measured'])}); the catalog's: {', '.join(figures['catalog']) or 'none'}")
