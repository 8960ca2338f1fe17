"""``asap schedule``: simulate one pipeline schedule and draw its timeline (text, SVG, JSON).

The figures come from :func:`asap.cost.schedule_sim.simulate_schedule`; this module only draws them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional
from xml.sax.saxutils import escape

import typer
from rich.text import Text

from asap.cli.root import app
from asap.cli.choices import SCHEDULES, choice
from asap.cli.common import err_console, out_console, print_json
from asap.errors import AsapError

KIND_STYLE = {"F": "cyan", "B": "green", "W": "yellow"}
# SVG fills per kind, one shade per chunk (cycled): forward blues, backward greens, weight-gradient ambers
KIND_FILLS = {"F": ("#4c78a8", "#7ea6d3", "#2f5b8a", "#a9c6e8"),
              "B": ("#54a24b", "#88c77f", "#3a7d33", "#b4dcae"),
              "W": ("#e0a526", "#f2c766", "#b88410", "#f7dc9b")}
IDLE_CHAR = "."


# --------------------------------------------------------------------------------------------------------------
# Text timeline
# --------------------------------------------------------------------------------------------------------------

def text_quantum_s(sim, width: int) -> float:
    """Seconds per character: three characters for the shortest op (room for ``F12``) unless that passes width."""
    shortest_s = min(op.end_s - op.start_s for op in sim.timeline)
    return max(shortest_s / 3.0, sim.step_time_s / max(width, 10))


def timeline_cells(sim, quantum_s: float) -> list[list[tuple[str, str]]]:
    """One row per device, one (character, style) cell per time quantum: ``F``/``B``/``W`` and the micro-batch
    where it fits (``F12--``), ``.`` where the device idles. Later ops overwrite a shared rounding cell."""
    columns = max(1, math.ceil(sim.step_time_s / quantum_s - 1e-9))
    rows = [[(IDLE_CHAR, "dim")] * columns for _ in range(sim.pp)]
    for op in sim.timeline:
        first = min(int(round(op.start_s / quantum_s)), columns - 1)
        last = max(first + 1, min(int(round(op.end_s / quantum_s)), columns))
        label = f"{op.kind}{op.micro_batch}"
        n = last - first
        chars = label + "-" * (n - len(label)) if len(label) <= n else op.kind * n
        style = KIND_STYLE[op.kind] + (" bold" if op.chunk % 2 else "")
        for j, ch in enumerate(chars):
            rows[op.device][first + j] = (ch, style)
    return rows


def timeline_text(sim, width: int) -> Text:
    """The whole text drawing: a row per device and a line of scale."""
    quantum_s = text_quantum_s(sim, width)
    out = Text()
    for device, row in enumerate(timeline_cells(sim, quantum_s)):
        out.append(f"rank {device:>3} ", style="bold")
        for ch, style in row:
            out.append(ch, style=style)
        out.append("\n")
    out.append(f"one character = {quantum_s:.4g} s; F forward, B backward"
               f"{' (input grad), W weight grad' if sim.schedule == 'zb' else ''}, . idle"
               f"{'; bold = odd chunk' if sim.vpp > 1 else ''}\n", style="dim")
    return out


def summary_line(sim, closed_form_s: float) -> str:
    return (f"{sim.schedule}  pp={sim.pp} vpp={sim.vpp} m={sim.micro_batches}  step {sim.step_time_s:.6g} s "
            f"(closed form {closed_form_s:.6g} s)  bubble {sim.bubble_fraction:.2%} of ideal, "
            f"{sim.idle_fraction_of_step:.2%} of the step  peak in flight {list(sim.peak_in_flight)}")


# --------------------------------------------------------------------------------------------------------------
# SVG timeline
# --------------------------------------------------------------------------------------------------------------

def nice_tick_s(span_s: float, target_ticks: int = 10) -> float:
    """A tick step of 1, 2 or 5 times a power of ten giving about ``target_ticks`` ticks over the span."""
    raw = span_s / target_ticks
    power = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        if raw <= mult * power:
            return mult * power
    return 10 * power


def timeline_svg(sim, title: str) -> str:
    """A standalone SVG: a row of rectangles per device (coloured by kind, shaded by chunk, labelled by
    micro-batch where they are wide enough), a time axis in seconds and a legend."""
    left, top, row_h, gap, bottom, right = 70, 48, 22, 4, 56, 20
    shortest_s = min(op.end_s - op.start_s for op in sim.timeline)
    plot_w = min(4000.0, max(800.0, 18.0 * sim.step_time_s / shortest_s))
    scale = plot_w / sim.step_time_s
    height = top + sim.pp * (row_h + gap) + bottom
    width = left + plot_w + right
    with_tooltips = len(sim.timeline) <= 5000
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height}" '
             f'viewBox="0 0 {width:.0f} {height}" font-family="monospace" font-size="11">',
             f'<rect x="0" y="0" width="{width:.0f}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>']
    for d in range(sim.pp):
        y = top + d * (row_h + gap)
        parts.append(f'<rect x="{left}" y="{y}" width="{plot_w:.2f}" height="{row_h}" fill="#f2f2f2"/>')
        parts.append(f'<text x="{left - 8}" y="{y + row_h * 0.7:.1f}" text-anchor="end">rank {d}</text>')
    for op in sim.timeline:
        x = left + op.start_s * scale
        w = (op.end_s - op.start_s) * scale
        y = top + op.device * (row_h + gap)
        fills = KIND_FILLS[op.kind]
        tip = (f"<title>{op.kind}{op.micro_batch} chunk {op.chunk} on rank {op.device}: "
               f"{op.start_s:.6g}-{op.end_s:.6g} s</title>") if with_tooltips else ""
        parts.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h}" fill="{fills[op.chunk % 4]}" '
                     f'stroke="white" stroke-width="0.5">{tip}</rect>')
        label = str(op.micro_batch)
        if w >= 7 * len(label) + 2:
            parts.append(f'<text x="{x + w / 2:.2f}" y="{y + row_h * 0.7:.1f}" text-anchor="middle" '
                         f'fill="white">{label}</text>')
    parts += svg_axis(sim.step_time_s, scale, left, top + sim.pp * (row_h + gap) + 4)
    parts += svg_legend(sim.schedule == "zb", left, height - 12)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def svg_axis(step_s: float, scale: float, left: float, y: float) -> list[str]:
    """The time axis: a line, ticks at a round step and their labels in seconds."""
    tick_s = nice_tick_s(step_s)
    parts = [f'<line x1="{left}" y1="{y}" x2="{left + step_s * scale:.2f}" y2="{y}" stroke="black"/>']
    for k in range(int(step_s / tick_s + 1e-9) + 1):
        x = left + k * tick_s * scale
        parts.append(f'<line x1="{x:.2f}" y1="{y}" x2="{x:.2f}" y2="{y + 5}" stroke="black"/>')
        parts.append(f'<text x="{x:.2f}" y="{y + 17}" text-anchor="middle">{k * tick_s:.4g}</text>')
    parts.append(f'<text x="{left + step_s * scale:.2f}" y="{y + 30}" text-anchor="end">time (s)</text>')
    return parts


def svg_legend(split_backward: bool, left: float, y: float) -> list[str]:
    kinds = [("F", "forward"), ("B", "backward (input grad)" if split_backward else "backward")]
    if split_backward:
        kinds.append(("W", "weight grad"))
    parts, x = [], left
    for kind, name in kinds:
        parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{KIND_FILLS[kind][0]}"/>')
        parts.append(f'<text x="{x + 16}" y="{y}">{kind} {escape(name)}</text>')
        x += 40 + 7 * len(name)
    return parts


# --------------------------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------------------------

def _cli_field(field: str) -> str:
    """The simulator's field name as the option the user typed (``micro_batches`` → ``micro-batches``)."""
    return field.replace("_", "-")


@app.command()
def schedule(
    pp: int = typer.Option(..., "--pp", help="Pipeline stages (devices)."),
    micro_batches: int = typer.Option(..., "--micro-batches", help="Micro-batches per step."),
    vpp: int = typer.Option(1, "--vpp", help="Virtual stages (model chunks) per device."),
    schedule_name: Optional[str] = choice(
        None, "--schedule", values=SCHEDULES, what="schedule",
        help="The pipeline schedule (default: interleaved if vpp > 1, else 1f1b)."),
    forward_s: float = typer.Option(1.0, "--forward-s", help="Forward time of one micro-batch on one stage "
                                                             "(all its chunks; each chunk takes 1/vpp)."),
    backward_s: float = typer.Option(2.0, "--backward-s", help="Backward time of one micro-batch on one stage."),
    b_share: float = typer.Option(0.5, "--b-share", help="zb: the input-gradient share of the backward."),
    p2p_s: float = typer.Option(0.0, "--p2p-s", help="Latency of one transfer between stages."),
    svg: Optional[Path] = typer.Option(None, "--svg", help="Write an SVG timeline to this file."),
    width: int = typer.Option(120, "--width", help="Most characters of a text timeline row."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document on stdout."),
):
    """Simulate a pipeline schedule and draw its timeline: step time, bubble, in-flight micro-batches."""
    from asap.cost.schedule_sim import (closed_form_step_time_s, default_schedule, per_virtual_stage,
                                        simulate_schedule, validate_shape)

    name = (schedule_name or default_schedule(vpp)).lower()
    try:
        # checked before the per-chunk split, so that an error quotes what the user typed
        validate_shape(name, pp, vpp, micro_batches)
        per_virtual_stage(forward_s, 1, "forward_s")
        per_virtual_stage(backward_s, 1, "backward_s")
        sim = simulate_schedule(pp, vpp, micro_batches, name, forward_s=forward_s / vpp,
                                backward_s=backward_s / vpp, b_share=b_share, p2p_s=p2p_s)
    except AsapError as e:
        raise AsapError(_cli_field(e.field), e.problem) from None
    closed_s = closed_form_step_time_s(name, pp, vpp, micro_batches, forward_s / vpp, backward_s / vpp, b_share)
    if svg is not None:
        write_svg(svg, sim)
    if as_json:
        print_json(schedule_json(sim, closed_s, svg))
        return
    out_console.print(timeline_text(sim, width), soft_wrap=True, end="")
    out_console.print(summary_line(sim, closed_s), soft_wrap=True, highlight=False)
    if svg is not None:
        err_console.print(f"wrote {svg}")


def write_svg(path: Path, sim) -> None:
    title = (f"{sim.schedule} pp={sim.pp} vpp={sim.vpp} m={sim.micro_batches}: step {sim.step_time_s:.6g} s, "
             f"bubble {sim.bubble_fraction:.2%} of ideal")
    try:
        path.write_text(timeline_svg(sim, title), encoding="utf-8")
    except OSError as e:
        raise AsapError("svg", f"cannot write {path}: {e.strerror or e}") from None


def schedule_json(sim, closed_form_s: float, svg: Optional[Path]) -> dict:
    d = {"schedule": sim.schedule, "pp": sim.pp, "vpp": sim.vpp, "micro_batches": sim.micro_batches,
         "step_time_s": sim.step_time_s, "closed_form_step_time_s": closed_form_s,
         "bubble_fraction": sim.bubble_fraction, "busy_s": list(sim.busy_s), "bubble_s": list(sim.bubble_s),
         "peak_in_flight": list(sim.peak_in_flight),
         "timeline": [op.to_dict() for op in sim.timeline]}
    if svg is not None:
        d["svg"] = str(svg)
    return d
