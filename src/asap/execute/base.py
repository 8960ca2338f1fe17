"""The executor interface of the closed loop: ``run(strategy) -> Measurement | Failure``.

The result types (``Measurement``, ``Failure``, ``Result``) and the interface the tune loop types its executor by
(``TrialExecutor``, a Protocol that ``Executor`` satisfies) live below the agents, in ``asap.spec.outcome``.

An executor turns one parallel strategy into one trial: ``sim`` prices it with the cost model, ``torch`` runs
the reference trainer under torchrun, ``command`` runs any launcher from a template (Megatron-LM, torchtitan,
a Slurm job...). ``run`` takes a ``Strategy``; text is read by the executor's ``parse`` (the edge, which
raises AsapError for a strategy it cannot complete or the model cannot take). Whatever happens in the run --
a refusal of the backend, a crash, an out-of-memory, a hang, output with no step time in it -- ``run`` returns
a ``Failure`` with a one-line reason; it never raises, so a tuner that calls it never crashes.
"""

from __future__ import annotations

import time
import traceback
from abc import ABC, abstractmethod

from asap.errors import AsapError
from asap.measure import DEFAULT_MAX_REPEATS, StepStats, pooled
from asap.spec.outcome import Failure, Measurement, Result
from asap.spec.strategy import Strategy
from asap.spec.words import FailureKind

# why a trial failed (``asap.spec.words.FailureKind``)
FAILURE_KINDS = tuple(k.value for k in FailureKind)


def one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def replace_stats(first: Measurement, stats: StepStats) -> Measurement:
    """``first`` (its traces, losses, log) with the pooled measurement of its repeats."""
    from dataclasses import replace

    tokens = first.tokens_per_s * first.step_time_s / stats.step_time_s if first.tokens_per_s else None
    return replace(first, step_time_s=stats.step_time_s, stats=stats, tokens_per_s=tokens,
                   details={**first.details, "repeat_step_times_s": list(stats.timed_steps_s)})


class Executor(ABC):
    """Subclasses implement ``_run``; ``run`` turns every exception into a Failure."""

    name = "executor"
    max_repeats = DEFAULT_MAX_REPEATS  # more runs of a trial whose spread is wide (``asap.measure``)
    repeat_index = 0  # 0 for a trial's first run, k for its k-th repeat (``trialN/repeatK+1``)

    def repeat_folder(self) -> str:
        """The sub-folder of a repeat inside its trial's folder ("" for the first run)."""
        return f"repeat{self.repeat_index + 1}" if self.repeat_index else ""

    @property
    def machine(self) -> str | None:
        """What the trials run on, as Memory keeps workloads apart (None: nothing beyond the job's cluster)."""
        return None

    def run_precision(self) -> str | None:
        """The precision this executor's runs train in (None: the job's)."""
        return None

    def parse(self, spelled: str | dict) -> Strategy:
        """A strategy as written (``key=value`` text or a mapping) completed and checked for this executor's job:
        the edge where a caller's text becomes the ``Strategy`` that ``run`` takes. Raises AsapError."""
        raise AsapError("strategy", f"the {self.name} executor reads no strategy text")

    def run(self, strategy: Strategy) -> Result:
        """One trial: a run, and up to ``max_repeats`` more while the pooled spread is wide; their timed steps
        pooled into one measurement (``asap.measure.pooled``)."""
        t0 = time.perf_counter()
        res = self._once(strategy)
        runs = [res]
        while (res.ok and runs[-1].ok and res.stats is not None and res.stats.wide
               and len(runs) <= self.max_repeats):
            self.repeat_index = len(runs)  # the same trial again: its number, a folder of its own below it
            try:
                runs.append(self._once(strategy))
            finally:
                self.repeat_index = 0
            good = [r.stats for r in runs if r.ok and r.stats is not None]
            first = runs[0]
            assert first.ok  # the repeats follow a first run that measured
            res = replace_stats(first, pooled(good))
        res.wall_time_s = time.perf_counter() - t0 if len(runs) > 1 else res.wall_time_s
        if res.wall_time_s is None:
            res.wall_time_s = time.perf_counter() - t0
        return res

    def _once(self, strategy: Strategy) -> Result:
        t0 = time.perf_counter()
        try:
            res = self._run(strategy)
        except AsapError as e:
            res = Failure(strategy, one_line(str(e)), kind=FailureKind.INVALID)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - an executor's bug is a failed trial, not a crashed tuner
            res = Failure(strategy, one_line(f"internal error: {type(e).__name__}: {e}"),
                          kind=FailureKind.INTERNAL, log_tail=traceback.format_exc()[-4000:])
        res.executor = self.name
        if res.wall_time_s is None:
            res.wall_time_s = time.perf_counter() - t0
        if res.ok and getattr(res, "precision", None) is None:
            res.precision = self.run_precision()
        return res

    @abstractmethod
    def _run(self, strategy: Strategy) -> Result:
        ...

    def refuses(self, strategy: Strategy) -> str | None:
        """Why this executor cannot run ``strategy`` (one line), before any trial is spent on it; None if it can."""
        return None
