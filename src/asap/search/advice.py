"""Decisions the commands print, made here so that the API reaches them too: the plan to run next when a
strategy does not fit (``fitting_next``, ``asap estimate``'s ``next:`` line) and the best planned candidate a
framework format can express (``emit_best``, ``asap plan --emit``), with ``emit_strategy``, one strategy
completed as ``estimate`` completes it and written in a format; and the row a plan shows beside a slow #1 that
fits the device without the headroom (``tight_row``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from shlex import quote
from typing import Any, Callable

from asap.cost.estimate import Estimate, estimate_spelled
from asap.errors import AsapError
from asap.search.nofit import NoFitError
from asap.search.planner import plan, plan_headroom
from asap.spec.hardware import Cluster
from asap.spec.job import Job

NEXT_DEVICE_DOUBLINGS = 4  # with no fitting strategy on this many devices, try up to 16 times as many


@dataclass(frozen=True)
class FittingNext:
    """Where a fitting strategy is: the pinned keys kept (``{}``: none), the devices planned on, the plan's #1
    there (None: nothing fits on up to 2**NEXT_DEVICE_DOUBLINGS times the devices) and the job it planned."""

    fixed: dict[str, Any]
    devices: int
    best: Estimate | None
    job: Job


def fitting_next(job: Job, pins: dict[str, Any], margin_gb: float | None = None,
                 cluster_on: Callable[[int], Cluster] | None = None) -> FittingNext:
    """The first plan (with the headroom ``plan_headroom(margin_gb)`` keeps) in which something fits: keeping the
    pinned shape keys ``pins`` if any fit with them, else none, on the job's devices, else on the fewest doubled
    devices (``cluster_on(n)``: the cluster with n devices; default ``Cluster.with_devices``)."""
    c = job.cluster
    resize = cluster_on or c.with_devices
    tries = [(fixed, c.num_devices * 2 ** k) for k in range(NEXT_DEVICE_DOUBLINGS + 1)
             for fixed in ([pins, {}] if pins else [{}])]
    for fixed, n in tries:
        on = job if n == c.num_devices else replace(job, cluster=resize(n))
        on = plan_headroom(on, margin_gb)  # the headroom the printed plan command keeps
        try:
            best = plan(on, fixed=dict(fixed)).candidates[0]
        except NoFitError:
            continue
        return FittingNext(dict(fixed), n, best, on)
    return FittingNext({}, c.num_devices * 2 ** NEXT_DEVICE_DOUBLINGS, None, job)


def emit_strategy(fmt: str, job: Job, strategy, strict: bool = False, tokens: float | None = None) -> str:
    """Complete and check ``strategy`` as ``asap estimate`` does for ``job`` (one that names no framework is
    completed with the format's), then emit it in format ``fmt``."""
    return emitted_job(fmt, job, strategy, tokens, strict)["text"]


def emitted_job(fmt: str, job: Job, strategy, tokens: float | None = None, strict: bool = False) -> dict[str, Any]:
    """``{format, text, config_file, files: {name: text}, launch: {...}, run: {...}}``: the config of ``strategy``
    completed as ``emit_strategy`` does, ``tokens`` long (its steps, schedule and checkpoint interval from the
    budget and the estimated step time: ``asap.emit.launch.run_length``), with its launch and companion files."""
    from dataclasses import asdict

    from asap.cost.estimate import estimate
    from asap.emit import FRAMEWORK_OF, check_format, config_name, emit, launch  # only a job that emits
    from asap.emit.launch import run_length

    check_format(fmt)
    if job.train.framework is None:
        job = job.with_train(replace(job.train, framework=FRAMEWORK_OF[fmt]))
    spelled = isinstance(strategy, (str, dict, type(None)))
    est = estimate_spelled(job, strategy) if spelled else estimate(job, strategy) if tokens is not None else None
    s = est.strategy if spelled and est is not None else strategy
    run = run_length(job.train, tokens, est.step_time_s if est is not None else None)
    text = emit(fmt, job, s, run, strict)
    ln = launch(fmt, job, s, run, strict)
    return {"format": fmt, "text": text, "config_file": config_name(fmt), "files": dict(ln.files),
            "launch": ln.to_dict(), "run": {k: v for k, v in asdict(run).items() if v is not None}}


def emit_best(fmt: str, job: Job, candidates: list[Estimate], tokens: float | None = None) -> dict[str, Any]:
    """The first of the planned ``candidates`` (fastest first) the format can express, in its own options
    (``emitted_job``, ``tokens`` long): its ``text``, launch, ``strategy_string`` and the faster candidates
    ``skipped`` with the reason."""
    if not candidates:
        raise AsapError("emit", "no fitting candidate to emit")
    skipped = []
    for e in candidates:
        try:
            emitted = emitted_job(fmt, job, e.strategy, tokens)
        except AsapError as err:
            skipped.append({"strategy_string": str(e.strategy), "reason": str(err)})
            continue
        return {**emitted, "strategy_string": str(e.strategy), "skipped": skipped}
    raise AsapError("emit", f"none of the {len(candidates)} best candidates can be written as {fmt}: "
                            f"{skipped[0]['reason']}")


def write_job(out_dir: str, emitted: dict) -> list[str]:
    """The config and its companion files under ``out_dir`` (created), each written whole: their paths."""
    from pathlib import Path

    from asap.spec.files import write_whole

    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in {emitted["config_file"]: emitted["text"], **emitted["files"]}.items():
        write_whole(folder / name, text, "out")
        paths.append(str(folder / name))
    return paths


# Show the fastest row that fits the device but not the headroom beside #1 when keeping the headroom costs more
# step time than this share: the 8% headroom guards against allocator fragmentation and NCCL buffers (PyTorch's
# expandable_segments allocator removes most of the former), which costs a run an OOM at start, not 10% of
# every step for the whole run.
TIGHT_GAIN = 0.10


def tight_row(job, fixed: dict, result, args: str = "") -> dict | None:
    """The fastest strategy that fits the device without the headroom, where it is more than ``TIGHT_GAIN``
    faster than the plan's #1 (or #1 does not exist): ``{strategy_compact, step_time_s, peak_memory_gb,
    device_share, faster_by, why, command}``; None otherwise."""
    from asap.spec.strategy import format_compact

    if not result.candidates or job.train.memory_margin_gb <= 0:
        return None
    rows = result.tight_candidates  # priced beside the plan (``plan(..., tight=True)``), where it was
    if rows is None:
        try:
            rows = plan(plan_headroom(job, 0.0), fixed=dict(fixed), top=1, split_candidates=0).candidates
        except (NoFitError, AsapError):
            return None
    best, tight = result.candidates[0], rows[0] if rows else None
    if tight is None or tight.step_time_s > best.step_time_s * (1 - TIGHT_GAIN):
        return None
    gain = 1 - tight.step_time_s / best.step_time_s
    share = tight.peak_memory_gb / result.device_memory_gb
    why = (f"{gain:.0%} faster than #1, over the {result.headroom_gb:.1f} GiB headroom a plan keeps; the headroom "
           f"guards against allocator fragmentation and NCCL buffers, which cost an out-of-memory at start, not "
           f"{gain:.0%} of every step: try it (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) or plan with "
           "--memory-margin 0")
    compact = format_compact(tight.strategy, job.devices, job.model.moe is not None, job.framework)
    return {"strategy": tight.strategy.to_dict(), "strategy_compact": compact, "step_time_s": tight.step_time_s,
            "peak_memory_gb": tight.peak_memory_gb, "device_share": share, "faster_by": gain, "why": why,
            "command": f"asap estimate {args} -S {quote(compact)}".replace("  ", " ")}
