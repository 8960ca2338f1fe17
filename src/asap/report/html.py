"""The ``--report FILE.html`` page of ``asap tune``: one self-contained HTML file.

The page opens with what the loop learned, in words (its corrections of the machine, the best against the
first trial and why it won: ``asap.agents.tune_story``), then holds four plotly figures (the trial history with
the best-so-far line, predicted against measured step time, each trial's peak memory against the device's
limit, the exposed breakdown of the best strategy; every point labelled with its trial number), the best
strategy as the job to launch (its stack's config, ``asap emit``) with its time and cost to train, and two
tables (the proposals with their reasons, every trial with its throughput, MFU and memory). plotly.js is inlined once, with the first figure, so the file opens without a network.
Every piece of text from the tune result is escaped with ``html.escape`` before it reaches the page or a
figure (plotly reads ``&lt;`` and friends back as the characters). The page always carries a
``window.onerror`` handler that writes script errors into ``<pre id="asap-errors">`` and shows it, so a
broken figure is visible to a reader (and to a headless browser's dumped DOM).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Iterable

import plotly.graph_objects as go

from asap.spec.words import TrialStatus

FIGURE_IDS = ("asap-history", "asap-prediction", "asap-memory", "asap-breakdown")
STATUS_SYMBOLS: dict[str, str] = {TrialStatus.OK: "circle", TrialStatus.FAILED: "x",
                                   TrialStatus.SKIPPED: "diamond-open"}
BREAKDOWN_TERMS = ("compute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bubble", "optimizer", "host")

ERROR_CATCHER = """<pre id="asap-errors" hidden></pre>
<script>
(function () {
  function note(text) {
    var box = document.getElementById("asap-errors");
    box.textContent += text + "\\n";
    box.hidden = false;
  }
  window.addEventListener("error", function (e) {
    note("error: " + e.message + " (" + (e.filename || "") + ":" + (e.lineno || 0) + ")");
  });
  window.addEventListener("unhandledrejection", function (e) {
    note("unhandled rejection: " + (e.reason && e.reason.message ? e.reason.message : String(e.reason)));
  });
})();
</script>"""

STYLE = """<style>
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 100%; overflow-wrap: break-word; }
table { border-collapse: collapse; margin: 1em 0 2em; font-size: 0.9em; width: 100%; table-layout: auto; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top;
         overflow-wrap: break-word; word-break: normal; }
.strategy { display: inline-block; min-width: 11em; overflow-wrap: anywhere; }
code { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.9em; }
td code { display: inline-block; min-width: 18em; }
.plotly-graph-div { max-width: 100%; }
th { background: #f2f2f2; }
td ul { margin: 0; padding-left: 1.2em; }
.learned { font-size: 1.05em; background: #f6f8fa; border-left: 4px solid #2a6; padding: 0.6em 1em; }
pre.emitted { background: #f6f8fa; padding: 0.8em; white-space: pre-wrap; overflow-wrap: anywhere; font-size: 0.85em;
              max-height: 30em; overflow-y: auto; }
.failed { color: #b00020; } .skipped { color: #777; }
#asap-errors { color: #b00020; border: 1px solid #b00020; padding: 0.5em; }
</style>"""


def esc(value: Any) -> str:
    """Text for the page: None as an empty string, everything else escaped."""
    return "" if value is None else html.escape(str(value))


def fmt_s(value: float | None) -> str:
    return "" if value is None else f"{value:.4g} s"


def strategy_of(item: dict | None) -> str | None:
    """A trial's or proposal's strategy as a person reads it: the compact notation where the caller gave it."""
    item = item or {}
    return item.get("strategy_compact") or item.get("strategy_string")


def strategy_cell(item: dict | None) -> str:
    """A strategy for a table cell: escaped, breaking anywhere so that even a full ``key=value`` string with
    a long layer split wraps inside its column."""
    text = strategy_of(item)
    return f'<span class="strategy">{esc(text)}</span>' if text else ""


def short_reason(trial: dict, limit: int = 40) -> str:
    """The start of a failed trial's reason, for its label on the axis (the hover has all of it)."""
    text = str(trial.get("reason") or trial.get("status") or "no measurement")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def trial_label(trial: dict, index: int) -> str:
    tid = trial.get("trial_id")
    return f"#{index + 1}" if tid is None else f"#{index + 1} (trial {tid})"


def point_label(trial: dict, index: int, limit: int = 22) -> str:
    """A point's label on a figure: its trial number and the start of its strategy (the hover has all)."""
    name = strategy_of(trial) or ""
    name = name if len(name) <= limit else name[:limit - 3] + "..."
    return esc(f"#{index + 1} {name}".strip())


def trial_hover(trial: dict, index: int) -> str:
    """Hover text of one trial: its number, strategy, status, reason and times (escaped)."""
    lines = [esc(trial_label(trial, index)), esc(strategy_of(trial)), f"status: {esc(trial.get('status'))}"]
    if trial.get("reason"):
        lines.append(f"reason: {esc(trial['reason'])}")
    for key, name in (("measured_step_time_s", "measured"), ("predicted_step_time_s", "predicted"),
                      ("catalog_step_time_s", "catalog")):
        if trial.get(key) is not None:
            lines.append(f"{name}: {fmt_s(trial[key])}")
    return "<br>".join(lines)


def is_measured(trial: dict) -> bool:
    return trial.get("status") == TrialStatus.OK and trial.get("measured_step_time_s") is not None


def best_so_far(trials: list[dict]) -> list[float | None]:
    """The running minimum of measured step times (None until the first measured trial)."""
    out, best = [], None
    for t in trials:
        if is_measured(t):
            m = t["measured_step_time_s"]
            best = m if best is None else min(best, m)
        out.append(best)
    return out


def history_traces(trials: list[dict]) -> list[go.Scatter]:
    """Measured trials at their step times; a trial with no measurement (failed, skipped) is not a number: it
    is drawn apart, as a marker on the trial axis (a hidden second y axis from 0 to 1) labelled with its
    reason, so it never stretches the step-time axis."""
    ok = [(i, t) for i, t in enumerate(trials) if is_measured(t)]
    others = [(i, t) for i, t in enumerate(trials) if not is_measured(t)]
    traces = [go.Scatter(x=[i + 1 for i, _ in ok], y=[t["measured_step_time_s"] for _, t in ok],
                         mode="markers+text", name="measured", text=[point_label(t, i) for i, t in ok],
                         textposition="top center", cliponaxis=False,
                         hovertext=[trial_hover(t, i) for i, t in ok], hoverinfo="text",
                         marker={"size": 10, "symbol": "circle"})]
    for status in sorted({esc(t.get("status") or "unknown") for _, t in others}):
        group = [(i, t) for i, t in others if esc(t.get("status") or "unknown") == status]
        traces.append(go.Scatter(x=[i + 1 for i, _ in group], y=[0.0] * len(group), yaxis="y2",
                                 mode="markers+text", cliponaxis=False, name=f"{status} (no measurement: on the axis)",
                                 text=[esc(short_reason(t)) for _, t in group], textposition="top center",
                                 hovertext=[trial_hover(t, i) for i, t in group], hoverinfo="text",
                                 marker={"size": 12, "symbol": STATUS_SYMBOLS.get(status, "square-open"),
                                         "color": "#b00020" if status == TrialStatus.FAILED else "#777"}))
    traces.append(go.Scatter(x=list(range(1, len(trials) + 1)), y=best_so_far(trials), mode="lines",
                             name="best so far", line={"shape": "hv", "dash": "dash"}, hoverinfo="y"))
    return traces


def history_figure(trials: list[dict]) -> go.Figure:
    fig = go.Figure(history_traces(trials))
    fig.update_layout(title="Trial history: measured step time", xaxis_title="trial",
                      yaxis_title="step time (s)", xaxis={"dtick": 1},
                      yaxis2={"overlaying": "y", "range": [0, 1], "visible": False, "fixedrange": True},
                      legend={"orientation": "h", "y": -0.2})
    return fig


def prediction_trace(trials: list[dict], key: str, name: str, symbol: str) -> go.Scatter:
    pts = [(i, t) for i, t in enumerate(trials) if is_measured(t) and t.get(key) is not None]
    return go.Scatter(x=[t["measured_step_time_s"] for _, t in pts], y=[t[key] for _, t in pts],
                      mode="markers+text", name=name, text=[esc(f"#{i + 1}") for i, _ in pts],
                      textposition="middle right", cliponaxis=False,
                      hovertext=[trial_hover(t, i) for i, t in pts], hoverinfo="text",
                      marker={"size": 10, "symbol": symbol})


def identity_trace(trials: list[dict]) -> go.Scatter:
    values = [t[k] for t in trials if is_measured(t)
              for k in ("measured_step_time_s", "predicted_step_time_s", "catalog_step_time_s") if t.get(k) is not None]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = 0.05 * (hi - lo or hi or 1.0)
    return go.Scatter(x=[lo - pad, hi + pad], y=[lo - pad, hi + pad], mode="lines", name="y = x",
                      line={"color": "#888", "dash": "dot"}, hoverinfo="skip")


def prediction_figure(trials: list[dict]) -> go.Figure:
    fig = go.Figure([identity_trace(trials),
                     prediction_trace(trials, "predicted_step_time_s", "loop's corrected prediction", "circle"),
                     prediction_trace(trials, "catalog_step_time_s", "catalog prediction", "triangle-up")])
    fig.update_layout(title="Predicted vs measured step time", xaxis_title="measured step time (s)",
                      yaxis_title="predicted step time (s)")
    return fig


def memory_figure(trials: list[dict]) -> go.Figure:
    """Each trial's peak memory (GiB, reserved: measured where the executor reported it, else the corrected
    machine's estimate) against the device's usable memory."""
    pts = [(i, t) for i, t in enumerate(trials) if t.get("peak_memory_gb") is not None]
    fig = go.Figure()
    fig.add_bar(x=[f"#{i + 1}" for i, _ in pts], y=[t["peak_memory_gb"] for _, t in pts], name="peak memory",
                text=[f"{t['peak_memory_gb']:.1f}" for _, t in pts], textposition="outside", cliponaxis=False,
                hovertext=[trial_hover(t, i) for i, t in pts], hoverinfo="text")
    limits = {t.get("memory_limit_gb") for _, t in pts} - {None}
    if len(limits) == 1:
        fig.add_hline(y=limits.pop(), line_dash="dash", line_color="#b00020", annotation_text="device memory",
                      annotation_position="top left")
    fig.update_layout(title="Peak memory per trial", xaxis_title="trial", yaxis_title="GiB per device")
    return fig


def breakdown_terms(estimate: dict) -> list[str]:
    exposed = estimate.get("exposed_s") or {}
    known = [k for k in BREAKDOWN_TERMS if k in exposed]
    return known + sorted(k for k in exposed if k not in BREAKDOWN_TERMS)


def breakdown_figure(best_estimate: dict | None, best: dict | None) -> go.Figure:
    name = "Step-time breakdown of the best strategy"  # the strategy itself is in the page above, where it wraps
    fig = go.Figure()
    if best_estimate and best_estimate.get("exposed_s"):
        terms = breakdown_terms(best_estimate)
        exposed, total = best_estimate["exposed_s"], best_estimate.get("breakdown_s") or {}
        fig.add_bar(x=terms, y=[exposed[k] for k in terms], name="exposed (on the critical path)")
        if total:
            fig.add_bar(x=terms, y=[total.get(k, 0.0) for k in terms], name="total (incl. overlapped)", opacity=0.4)
    else:
        fig.add_annotation(text="no estimate of the best strategy was given", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5)
    fig.update_layout(title=name, yaxis_title="seconds per step", barmode="group")
    return fig


def figure_html(fig: go.Figure, div_id: str, first: bool) -> str:
    """One figure as a div; the first carries plotly.js inline, the others reuse it."""
    return fig.to_html(include_plotlyjs=bool(first), full_html=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def bullet_list(items: Iterable[Any] | None) -> str:
    items = list(items or [])
    return "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>" if items else ""


def speedup_text(proposal: dict) -> str:
    s, rng = proposal.get("expected_speedup"), proposal.get("expected_speedup_range")
    text = "" if s is None else f"{s:.2f}x"
    if rng and len(rng) == 2 and None not in rng:
        text += f" ({rng[0]:.2f}x to {rng[1]:.2f}x)"
    return text


def table(headers: list[str], rows: list[list[str]], row_classes: list[str] | None = None) -> str:
    """An HTML table; headers are escaped here, cells must come escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    classes = row_classes or [""] * len(rows)
    body = "".join(f'<tr class="{esc(c)}">' + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row, c in zip(rows, classes, strict=True))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def proposals_table(proposals: list[dict] | None) -> str:
    if not proposals:
        return "<p>No proposals were given.</p>"
    rows = [[strategy_cell(p), esc(speedup_text(p)), esc(fmt_s(p.get("predicted_step_time_s"))),
             esc(p.get("fits")), esc(p.get("rationale")), bullet_list(p.get("tradeoffs")),
             bullet_list(p.get("evidence")), esc(p.get("source")), code(p.get("command"))] for p in proposals]
    return table(["strategy", "expected speedup", "predicted step", "fits", "rationale", "trade-offs",
                  "evidence", "source", "reproduce"], rows)


def code(text: Any) -> str:
    """A command to copy, escaped, wrapping anywhere (empty without one)."""
    return f"<code>{esc(text)}</code>" if text else ""


def fmt_rate(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def fmt_mfu(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}"


def fmt_memory(trial: dict) -> str:
    """``71.2 of 79.6 GiB`` (``measured`` where the executor reported it)."""
    peak, limit = trial.get("peak_memory_gb"), trial.get("memory_limit_gb")
    if peak is None:
        return ""
    text = f"{peak:.1f} of {limit:.1f} GiB" if limit else f"{peak:.1f} GiB"
    return text + (" (measured)" if trial.get("memory_measured") else "")


def trials_table(trials: list[dict]) -> str:
    if not trials:
        return "<p>No trials were run.</p>"
    rows = [[esc(trial_label(t, i)), strategy_cell(t), esc(t.get("status")), esc(t.get("reason")),
             esc(fmt_s(t.get("measured_step_time_s"))), esc(fmt_rate(t.get("tokens_per_s"))),
             esc(fmt_mfu(t.get("mfu"))), esc(fmt_memory(t)), esc(fmt_s(t.get("predicted_step_time_s"))),
             esc(fmt_s(t.get("catalog_step_time_s")))] for i, t in enumerate(trials)]
    return table(["trial", "strategy", "status", "reason", "measured", "tokens/s", "MFU", "peak memory",
                  "corrected prediction", "catalog prediction"], rows, [str(t.get("status") or "") for t in trials])


def learned_html(story: dict | None) -> str:
    """The report's opening: what the loop learned, in words."""
    sentences = (story or {}).get("learned") or []
    if not sentences:
        return ""
    return ('<section id="asap-learned" class="learned"><h2>What the loop learned</h2>'
            + "".join(f"<p>{esc(s)}</p>" for s in sentences) + "</section>")


def launch_html(story: dict | None) -> str:
    """The best strategy as the job to launch (its stack's config) and its time and cost to train."""
    from asap.budget import budget_line

    story = story or {}
    out = []
    if budget := story.get("budget"):
        out.append(f"<p><b>To train:</b> {esc(budget_line(budget))} at the best trial's measured throughput "
                   f"(steady state: no warm-up, checkpoints or restarts).</p>")
    emitted = story.get("emitted") or {}
    if emitted.get("text"):
        out.append(f"<p><b>The job ({esc(emitted['format'])}, as <code>asap emit</code> writes it):</b></p>"
                   f'<pre class="emitted" id="asap-emitted">{esc(emitted["text"])}</pre>')
    elif emitted.get("refused"):
        out.append(f"<p><b>The job ({esc(emitted['format'])}):</b> not emitted: {esc(emitted['refused'])}</p>")
    return "\n".join(out)


def correction_text(corr: dict) -> str:
    """The loop's fitted factors with their uncertainty: "compute x1.13 (+-3%), scale_up x1.02 (+-50%), ..."."""
    spread = corr.get("uncertainty") or {}
    parts = []
    for k, v in corr.items():
        if k == "uncertainty":
            continue
        if isinstance(v, float):
            u = spread.get(k)
            parts.append(f"{esc(k)} x{v:.3g}" + (f" (&plusmn;{(u - 1) * 100:.0f}%)" if u else ""))
        else:
            parts.append(f"{esc(k)} {esc(v)}")
    return ", ".join(parts)


def summary_html(tune_result: dict) -> str:
    best, corr = tune_result.get("best"), tune_result.get("correction") or {}
    trials = tune_result.get("trials") or []
    best_text = (f"{strategy_cell(best)} at {esc(fmt_s(best.get('measured_step_time_s')))} (measured)"
                 if best else "none (no trial was measured)")
    corr_text = correction_text(corr)
    return (f"<p><b>Best:</b> {best_text}<br><b>Trials:</b> {len(trials)} "
            f"({sum(is_measured(t) for t in trials)} measured)<br><b>Correction:</b> {corr_text or 'none'}</p>")


def reproduce_line(best_estimate: dict | None) -> str:
    """The command that gives the best strategy's breakdown, where the caller gave it."""
    cmd = (best_estimate or {}).get("command")
    return f"<p><b>Reproduce:</b> {code(cmd)}</p>" if cmd else ""


def page_html(title: str, body: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{esc(title)}</title>\n{STYLE}\n</head>\n<body>\n{ERROR_CATCHER}\n"
            f"<h1>{esc(title)}</h1>\n" + "\n".join(body) + "\n</body>\n</html>\n")


def report_html(tune_result: dict, best_estimate: dict | None = None, proposals: list[dict] | None = None,
                title: str = "asap tune", story: dict | None = None) -> str:
    """The whole page as a string; ``story`` is ``asap.agents.tune_story.TuneStory.to_dict()`` (its per-trial
    figures already merged into the trials)."""
    trials = list(tune_result.get("trials") or [])
    figures = [history_figure(trials), prediction_figure(trials), memory_figure(trials),
               breakdown_figure(best_estimate, tune_result.get("best"))]
    plots = [figure_html(f, div_id, i == 0) for i, (f, div_id) in enumerate(zip(figures, FIGURE_IDS, strict=True))]
    return page_html(title, [learned_html(story), summary_html(tune_result),
                             "<h2>Trial history</h2>", plots[0],
                             "<h2>Predicted vs measured</h2>", plots[1],
                             "<h2>Memory</h2>", plots[2],
                             "<h2>The best strategy</h2>",
                             f"<p><b>Strategy:</b> {strategy_cell(best_estimate or tune_result.get('best'))}</p>",
                             plots[3],
                             reproduce_line(best_estimate), launch_html(story),
                             "<h2>Proposals</h2>", proposals_table(proposals),
                             "<h2>All trials</h2>", trials_table(trials)])


def write_report(path: str | Path, tune_result: dict, best_estimate: dict | None = None,
                 proposals: list[dict] | None = None, title: str = "asap tune", story: dict | None = None) -> Path:
    """Write the report of a tune result to ``path`` (one self-contained HTML file) and return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report_html(tune_result, best_estimate, proposals, title, story), encoding="utf-8")
    return out
