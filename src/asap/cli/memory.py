"""``asap memory``: what the Sharding Memory holds: the experiments and the trials the tuning loop ran, and the
measured runs ``asap learn`` stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import JustifyMethod
from rich.table import Table

from asap.cli.root import app
from asap.cli.common import _clean, err_console, out_console, print_json, strategy_column
from asap.errors import AsapError
from asap.spec.words import TrialStatus

if TYPE_CHECKING:
    from asap.memory import Experiment, Trial


@app.command("memory")
def memory_command(
    memory: Optional[str] = typer.Option(None, "--memory",
                                         help="The memory file (SQLite; default memory.sqlite in the user's data "
                                              "folder, or under $ASAP_DATA_DIR). Created empty if missing."),
    experiment: Optional[int] = typer.Option(None, "--experiment", "-e",
                                             help="Only this experiment (its id) and its trials."),
    export: Optional[str] = typer.Option(None, "--export",
                                         help="Write everything (experiments, trials and the agents' audit trail) "
                                              "to this JSON file."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document on stdout: {trials, experiments}."),
):
    """List the experiments and trials kept in the Sharding Memory; export them with the audit trail."""
    from asap.memory import Memory

    if export is not None and not export.strip():
        raise AsapError("export", "needs a file name")
    with Memory.open(memory) as mem:
        if experiment is not None:
            experiments = [mem.get_experiment(experiment)]  # AsapError("experiment", ...) when it is not there
        else:
            experiments = mem.experiments()
        trials = mem.trials(experiment)
        runs = mem.measured_runs() if experiment is None else []
        full = mem.export(experiment) if export is not None else None
        for tid in mem.recovered:
            err_console.print(f"note: trial {tid} was left running by a process that ended; marked killed",
                              highlight=False)
    if full is not None:
        assert export is not None  # full is only exported when there is a file to write it to
        out = Path(export)
        try:
            if out.parent and not out.parent.exists():
                out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(_clean(full), indent=2) + "\n")
        except OSError as e:
            raise AsapError("export", f"cannot write {export} ({e.strerror or e})") from None
    if json_out:
        print_json({"trials": [t.to_dict() for t in trials], "experiments": [e.to_dict() for e in experiments],
                    "measured_runs": [r.to_dict() for r in runs]})
        return
    if runs:
        out_console.print(runs_table(runs))
    if not experiments:
        out_console.print(f"{mem.path}: no experiments yet (asap tune --memory {mem.path} records them)",
                          highlight=False)
    else:
        out_console.print(experiments_table(experiments, trials))
        if trials:
            out_console.print(trials_table(trials, {e.id: e.workload for e in experiments}))
    if full is not None:
        out_console.print(f"wrote {export}: {len(full['experiments'])} experiments, {len(full['trials'])} trials, "
                          f"{len(full['audit'])} audit rows", highlight=False, soft_wrap=True)


def runs_table(runs) -> Table:
    """The measured runs: id, stack, machine, devices, precision, model, the step and its spread, where from."""
    table = Table(title="measured runs (asap learn)", title_justify="left")
    for col in ("id", "stack", "accelerator", "devices", "precision", "model", "step", "spread", "source", "added"):
        table.add_column(col, justify="right" if col in ("id", "devices", "step", "spread") else "left",
                         overflow="fold")
    for r in runs:
        model = r.job.get("model", {})
        name = model.get("name", "?") if isinstance(model, dict) else str(model)
        spread = f"{r.step_time_spread_s:.3g} s" if r.step_time_spread_s is not None else ""
        table.add_row(str(r.id), r.stack, r.accelerator, str(r.devices), r.precision, name,
                      f"{r.measured_step_time_s:.4g} s", spread, r.source, r.added_at[:10])
    return table


def _s(v) -> str:
    return "-" if v is None else f"{v:.4g}"


def experiments_table(experiments: list[Experiment], trials: list[Trial]) -> Table:
    table = Table(title="experiments")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("id", "right"), ("model", "left"), ("accelerator", "left"), ("devices", "right"), ("batch", "right"),
        ("seq", "right"), ("precision", "left"), ("framework", "left"), ("trials", "right"),
        ("best measured (s)", "right"))
    for col, just in columns:
        table.add_column(col, justify=just)
    for e in experiments:
        w = e.workload
        mine = [t for t in trials if t.experiment_id == e.id]
        ok = [t.measured_step_time_s for t in mine if t.status == TrialStatus.OK and t.measured_step_time_s]
        table.add_row(str(e.id), str(w.get("model") or "-"), str(w.get("accelerator") or "-"),
                      str(w.get("devices") or "-"), str(w.get("global_batch") or "-"), str(w.get("seq_len") or "-"),
                      str(w.get("precision") or "-"), str(w.get("framework") or "-"), str(len(mine)),
                      _s(min(ok)) if ok else "-")
    return table


def trial_compact(trial: Trial, workloads: dict) -> str:
    """A trial's strategy in the compact notation: the keys that differ from the defaults on its experiment's
    devices and framework when it is complete, else the keys it was given."""
    from asap.errors import AsapError
    from asap.spec.framework import get_framework
    from asap.spec.hardware import get_accelerator
    from asap.spec.strategy import Strategy, format_compact, format_compact_keys, parse_strategy

    keys = parse_strategy(trial.strategy_string or "")
    w = workloads.get(trial.experiment_id) or {}
    try:
        s = Strategy(**keys)
        fw = get_framework(w.get("framework"), get_accelerator(str(w.get("accelerator"))).family)
        return format_compact(s, int(w["devices"]), s.ep > 1, fw)
    except (TypeError, KeyError, ValueError, AsapError):
        return format_compact_keys(keys)


def trials_table(trials: list[Trial], workloads: dict | None = None) -> Table:
    """One row per trial, its strategy in the compact notation (``trial_compact``)."""

    names = [trial_compact(t, workloads or {}) for t in trials]
    table = Table(title="trials")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("id", "right"), ("exp", "right"), ("strategy", "left"), ("status", "left"), ("predicted (s)", "right"),
        ("measured (s)", "right"), ("executor", "left"), ("reason", "left"))
    for col, just in columns:
        if col == "strategy":
            strategy_column(table, names)
        else:
            table.add_column(col, justify=just)
    colours = {TrialStatus.OK: "green", TrialStatus.FAILED: "red", TrialStatus.KILLED: "red",
               TrialStatus.SKIPPED: "yellow", TrialStatus.RUNNING: "cyan"}
    for t, name in zip(trials, names, strict=True):
        reason = t.reason or ""
        if len(reason) > 60:
            reason = reason[:57] + "..."
        status = t.status
        table.add_row(str(t.id), str(t.experiment_id), name,
                      f"[{colours.get(status, 'white')}]{status}[/]", _s(t.predicted_step_time_s),
                      _s(t.measured_step_time_s), t.executor or "-", reason)
    return table
