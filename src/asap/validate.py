"""``asap validate``: predicted against published step times of real training runs.

Two case files ship with the package (``PACKAGED_FILES``), each the same file as in ``shared/reference/``, each
case naming its source: ``calibration_runs.json`` (44 runs, 2020-2025) and ``published_runs_2024_2026.json``
(45 runs on 2024-2026 hardware and stacks). ``asap validate`` without ``--cases`` prices both and reports each
file apart (``files``) and the whole; ``load_cases()`` alone is the calibration file (the planner's test and
benchmark set). Knobs a case leaves open are filled by the best completion (``asap.search.complete``), as
``plan --fix`` does.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping

from asap.cost.bands import CASE_FILES
from asap.errors import AsapError
from asap.search.complete import best_completion
from asap.spec.framework import unstated_defaults
from asap.spec.hardware import Family, cluster_from_dict
from asap.spec.job import Job
from asap.spec.model import model_from_dict
from asap.spec.strategy import parse_strategy
from asap.spec.train import TrainSpec


PACKAGED_FILES = CASE_FILES  # asap.cost.bands.CASE_FILES: the calibration set, then the 2024-2026 runs


def load_packaged(name: str = PACKAGED_FILES[0]) -> list[dict[str, Any]]:
    """One of the shipped case files (``PACKAGED_FILES``) by its file name."""
    if name not in PACKAGED_FILES:
        raise AsapError("cases", f"no packaged case file {name!r} (have {', '.join(PACKAGED_FILES)})")
    return _parse_cases(resources.files("asap").joinpath(f"data/{name}").read_text(), name)


def load_all_packaged() -> dict[str, list[dict[str, Any]]]:
    """Every shipped case file, by name: what ``asap validate`` prices without ``--cases``."""
    return {name: load_packaged(name) for name in PACKAGED_FILES}


def load_cases(path: str | Path | None = None) -> list[dict[str, Any]]:
    """The cases of a file; None: the packaged calibration file (``PACKAGED_FILES[0]``)."""
    if path is None:
        return load_packaged()
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise AsapError("cases", f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise AsapError("cases", f"{path} is not UTF-8 text (byte {e.start}: {e.reason})") from None
    return _parse_cases(text, str(path))


def _parse_cases(text: str, where: str) -> list[dict[str, Any]]:
    try:
        cases = json.loads(text)
    except json.JSONDecodeError as e:
        raise AsapError("cases", f"{where} is not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(cases, list) or not cases:
        raise AsapError("cases", f"{where} must hold a non-empty list of cases")
    return cases


@dataclass
class CaseResult:
    id: str
    published_step_time_s: float
    predicted_step_time_s: float
    error: float  # (predicted - published) / published
    strategy: dict[str, Any]
    fits: bool
    peak_memory_gb: float
    mfu: float
    bottleneck: str
    mfu_peak: str = "bf16"  # the dense peak ``mfu`` is taken against (asap.cost.estimate.mfu_peak_flops)
    precision_peak_utilization: float | None = None  # against the run precision's own peak (fp8 runs)
    # with --memory: the measured runs that corrected it and the factors (absent from the dict without)
    learned_from: list[Any] | None = None
    corrections: dict[str, float] | None = None
    learned_spread: float | None = None
    learned: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        return {k: v for k, v in d.items() if k not in _LEARNED_KEYS or v is not None}


_LEARNED_KEYS = ("learned_from", "corrections", "learned_spread", "learned")


def source_of(case: dict[str, Any]) -> str:
    """The publication a case comes from: its ``source`` up to the first " — ", and of a series of results
    (an MLPerf round, a recipe repository) the series itself, up to its first ": " or " results, " (the
    unit of leave-one-source-out accuracy: one MLPerf round's submissions share its rules and reference code)."""
    src = str(case.get("source", case.get("id", ""))).split(" — ")[0].strip()
    for mark, keep in ((" results, ", " results"), (": ", "")):
        if mark in src:
            src = src.split(mark)[0] + keep
    return src.strip()


def published_step_time(published: Any, cid: str) -> float:
    """A case's ``published.step_time_s``: a positive finite number of seconds."""
    if not isinstance(published, dict) or "step_time_s" not in published:
        raise AsapError(f"{cid}.published", "must be a mapping with step_time_s")
    v = published["step_time_s"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise AsapError(f"{cid}.published.step_time_s", f"must be a positive number of seconds, got {v!r}")
    return float(v)


# a case's job corrected before it is priced (``validate --memory``: by measured runs), and the fields that say so
Corrector = Callable[[Job, str], "tuple[Job, dict[str, Any]]"]


def validate_case(case: dict[str, Any], index: int = 0, efficiency: Mapping[str, Family] | None = None,
                  correct: Corrector | None = None) -> CaseResult:
    """One case: the best completion of its published knobs, priced. ``efficiency`` (family name -> constants)
    prices it with other constants than the catalog's (``benchmarks/calibrate.py`` fits them this way);
    ``correct`` corrects its job first (``asap validate --memory``: the measured runs' terms)."""
    where = f"cases[{index}]"
    cid = str(case.get("id", where))
    if not isinstance(case, dict):
        raise AsapError(where, f"must be a mapping, got {type(case).__name__}")
    try:
        model = model_from_dict(case["model"], where=f"{cid}.model")
        cluster = cluster_from_dict(case["cluster"])
        train = TrainSpec.from_dict(case["train"])
        fixed = parse_strategy(case.get("strategy") or {}, field=f"{cid}.strategy")
        published = published_step_time(case["published"], cid)
    except KeyError as e:
        raise AsapError(f"{cid}", f"missing field {e}") from None
    if efficiency and cluster.accelerator.family in efficiency:
        acc = replace(cluster.accelerator, efficiency=efficiency[cluster.accelerator.family])
        cluster = replace(cluster, accelerator=acc)
    job = Job.resolve(model, cluster, train)
    learned: dict[str, Any] = {}
    if correct is not None:
        job, learned = correct(job, cid)
    est = completion_that_trained(job, fixed).best
    return CaseResult(**learned, **_case_result(cid, published, est, cluster))


def _case_result(cid: str, published: float, est, cluster) -> dict[str, Any]:
    return dict(id=cid, published_step_time_s=published, predicted_step_time_s=est.step_time_s,
                error=est.step_time_s / published - 1.0, strategy=est.strategy.to_dict(), fits=est.fits,
                peak_memory_gb=est.peak_memory_gb, mfu=est.mfu, bottleneck=est.bottleneck,
                mfu_peak="bf16" if cluster.accelerator.peak_tflops.get("bf16") else "fp32",
                precision_peak_utilization=est.precision_peak_utilization)


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """MAPE, the worst |error| and its case, and the count, over case results (``CaseResult.to_dict``)."""
    errors = [abs(r["error"]) for r in results]
    return {"mape": sum(errors) / len(errors), "max_abs_error": max(errors),
            "worst_case": results[errors.index(max(errors))]["id"], "n": len(results)}


# Host offload is off unless a run says otherwise: the stacks' default (``HOST_OFFLOAD_OFF``)
HOST_OFFLOAD_OFF = {"offload_act": 0, "offload_opt": 0}


def completion_that_trained(job: Job, stated: dict[str, Any]):
    """The completion of a run's stated knobs (``best_completion``) that it trained with. The knobs it leaves
    unstated are first its stack's defaults (``asap.spec.framework.unstated_defaults``) with host offload off
    (the stacks' default). A run that trained fitted its memory, so where those overflow it, its unstated knobs
    were something else its stack offers (a recomputation, MaxText's offloading remat policies, Megatron-Core's
    --cpu-offloading of some layers, optimizer offload): then the fastest completion that fits with only the
    stated knobs pinned. Where none fits, the first's fastest (reported as not fitting)."""
    defaults = unstated_defaults(job.framework, stated, job.model.num_layers)
    first = best_completion(job, {**HOST_OFFLOAD_OFF, **defaults, **stated}, allow_oom=True)
    if first.best.fits:
        return first
    try:
        return best_completion(job, dict(stated))
    except AsapError:
        return first


def validate(cases: list[dict[str, Any]], progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    results = []
    for i, case in enumerate(cases):
        results.append(validate_case(case, i).to_dict())
        if progress:
            progress(i + 1)
    return {"cases": results, **summary(results)}


def validate_files(files: Mapping[str, list[dict[str, Any]]],
                   progress: Callable[[int], None] | None = None, correct: Corrector | None = None) -> dict[str, Any]:
    """Several case files at once (``asap validate`` without ``--cases``): every case (each with its ``file``),
    the summary over all of them, and ``files``: the summary of each file apart."""
    results, per_file, done = [], {}, 0
    for name, cases in files.items():
        mine = []
        for i, case in enumerate(cases):
            mine.append({**validate_case(case, i, correct=correct).to_dict(), "file": name})
            done += 1
            if progress:
                progress(done)
        per_file[name] = summary(mine)
        results += mine
    return {"cases": results, **summary(results), "files": per_file}
