"""What a tune run says to a person: what the loop learned, why its best won, the gain over the first trial, the
figures of every trial (throughput, MFU, memory) and the best strategy as the job to launch, with its time and
cost to train. ``asap tune --report`` renders it (``asap.report.html``); every figure is one an ``asap``
command reproduces (``asap estimate -c REPORT-cluster.yaml -S STRATEGY`` for predictions).

Per trial (measured step t_meas, the corrected machine's estimate of the same strategy: step t_est, MFU m_est):

    tokens_per_s  = global_batch * seq_len / t_meas         (the whole job)
    mfu           = m_est * t_est / t_meas                  (the same model FLOPs over the measured step)
    peak_memory   = the corrected estimate's peak (GiB, reserved); measured where the executor reported it

A correction factor f of the loop (``asap.agents.correction``) reads as "x f slower than the catalog"; within
``SAME`` of 1 it reads "as the catalog says".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asap.errors import AsapError
from asap.spec.job import Job
from asap.spec.words import TrialStatus

SAME = 0.02  # a factor within 2% of 1 reads "as the catalog says"
DEFAULT_TOKENS = 1e12  # the budget the report prices when tune was given no --tokens: 1T tokens
FACTOR_WORDS = {"compute": "its compute (GEMMs, attention, HBM)", "scale_up": "its scale-up fabric",
                "scale_out": "its scale-out fabric"}
# the emit formats of each stack asap models (asap.emit.FRAMEWORK_OF, read the other way), in the order tried:
# Megatron-LM's arguments first, Megatron-Bridge's YAML where they cannot express the strategy (activation
# offload: Megatron-LM core_v0.14.0 has no flag for it, Bridge's model.cpu_offloading does)
FORMATS_OF = {"megatron": ("megatron", "megatron-bridge"), "torchtitan": ("torchtitan",), "maxtext": ("maxtext",),
              "mindspore": ("mindformers",), "deepspeed": ("deepspeed",)}


@dataclass
class TuneStory:
    learned: list[str]  # sentences, in the order a person reads them
    trials: list[dict[str, Any]]  # per trial: tokens_per_s, mfu, peak_memory_gb, memory_limit_gb, fits
    emitted: dict[str, str] = field(default_factory=dict)  # {format, text} or {format, refused}
    budget: dict[str, float] = field(default_factory=dict)  # asap.budget.training_budget of the best, measured

    def to_dict(self) -> dict[str, Any]:
        return {"learned": self.learned, "trials": self.trials, "emitted": self.emitted, "budget": self.budget}


def factor_phrase(name: str, factor: float, spread: float) -> str:
    """``its scale-out fabric 1.93x slower than the catalog (+-12%)``."""
    what = FACTOR_WORDS.get(name, name)
    if abs(factor - 1.0) <= SAME:
        return f"{what} as the catalog says"
    word, ratio = ("slower", factor) if factor > 1 else ("faster", 1.0 / factor)
    band = f" (\u00b1{(spread - 1) * 100:.0f}%)" if spread and spread > 1 else ""
    return f"{what} {ratio:.2f}x {word} than the catalog{band}"


def correction_sentence(correction: dict[str, Any]) -> str:
    """The loop's corrections in words, from ``Correction.to_dict()``."""
    spread = correction.get("uncertainty") or {}
    factors = [(k, v) for k, v in correction.items() if isinstance(v, float) and k in FACTOR_WORDS]
    if not correction.get("trials") or not factors:
        return "The loop measured no trial, so it kept the catalog's machine."
    parts = [factor_phrase(k, v, float(spread.get(k) or 0.0)) for k, v in factors]
    return (f"From {correction['trials']} measured trials the loop found this machine's "
            + "; ".join(parts) + ".")


def measured(trials: list[dict]) -> list[tuple[int, dict]]:
    return [(i, t) for i, t in enumerate(trials)
            if t.get("status") == TrialStatus.OK and t.get("measured_step_time_s") is not None]


def gain_sentences(trials: list[dict], names: list[str]) -> list[str]:
    """The best against the first measured trial, and why it won (the loop's explanation of that trial)."""
    ok = measured(trials)
    if not ok:
        return ["No trial was measured: there is no best."]
    first_i, first = ok[0]
    best_i, best = min(ok, key=lambda it: it[1]["measured_step_time_s"])
    t0, t1 = first["measured_step_time_s"], best["measured_step_time_s"]
    if best_i == first_i:
        out = [f"The first trial, {names[first_i]}, stayed the best at {t1:.4g} s per step: no move measured faster."]
    else:
        out = [f"The best, {names[best_i]} (trial {best_i + 1}), measured {t1:.4g} s per step: {t0 / t1:.2f}x "
               f"the first trial, {names[first_i]} ({t0:.4g} s)."]
    if best.get("explanation"):
        out.append(f"Why it won: {best['explanation']}")
    return out


def trial_figures(corrected: Job, strategies: list, trials: list[dict]) -> list[dict[str, Any]]:
    """Per trial: measured throughput and MFU, and the corrected machine's peak memory against its limit."""
    from asap.cost.estimate import estimate

    tokens_per_step = corrected.train.global_batch * corrected.train.seq_len
    out = []
    for strategy, t in zip(strategies, trials, strict=True):
        est = estimate(corrected, strategy)
        step = t.get("measured_step_time_s") if t.get("status") == TrialStatus.OK else None
        out.append({"tokens_per_s": tokens_per_step / step if step else None,
                    "mfu": est.mfu * est.step_time_s / step if step else None,
                    "predicted_mfu": est.mfu, "peak_memory_gb": t.get("peak_memory_gb") or est.peak_memory_gb,
                    "memory_measured": bool(t.get("peak_memory_gb")),
                    "memory_limit_gb": corrected.cluster.accelerator.usable_hbm_gb, "fits": est.fits})
    return out


def emitted_job(job: Job, strategy) -> dict[str, str]:
    """The best strategy as its stack's launch config, or the one-line reason the stack cannot express it."""
    from asap.emit import emit

    formats = FORMATS_OF.get(job.train.framework or "", FORMATS_OF["megatron"])
    refusals = []
    for fmt in formats:
        try:
            return {"format": fmt, "text": emit(fmt, job, strategy)}
        except AsapError as e:
            refusals.append(str(e))
    return {"format": " or ".join(formats), "refused": "; ".join(refusals)}


def best_budget(job: Job, trials: list[dict], tokens: float | None, price: float | None) -> dict[str, float]:
    """Time, device-hours (and cost) to train ``tokens`` (1T by default) at the best trial's measured rate."""
    from asap.budget import training_budget

    ok = measured(trials)
    if not ok:
        return {}
    step = min(t["measured_step_time_s"] for _, t in ok)
    rate = job.train.global_batch * job.train.seq_len / step
    return training_budget(rate, job.devices, tokens or DEFAULT_TOKENS, price)


def tune_story(job: Job, corrected: Job, strategies: list, trials: list[dict], names: list[str],
               correction: dict[str, Any], best_strategy=None, tokens: float | None = None,
               price: float | None = None) -> TuneStory:
    """Everything the report says past its raw trials; ``names`` are the trials' strategies as printed."""
    learned = [correction_sentence(correction), *gain_sentences(trials, names)]
    budget = best_budget(job, trials, tokens, price)
    emitted = emitted_job(job, best_strategy) if best_strategy is not None else {}
    return TuneStory(learned, trial_figures(corrected, strategies, trials), emitted, budget)
