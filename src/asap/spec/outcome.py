"""What one trial of the closed loop comes to, and the interface of what runs it.

``Measurement`` (a step time, measured or predicted) and ``Failure`` (no step time: a ``FailureKind`` and a
one-line reason) are a trial's ``Result``; ``TrialExecutor`` is what the tune loop (``asap.agents.coordinator``)
needs of an executor. ``asap.execute.base.Executor`` satisfies it, with the defaults every executor inherits
(no ``machine`` beyond the job's cluster, no precision of its own, refusing nothing); here, below the agents and
the executors, so that both can name them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from asap.measure import StepStats
from asap.spec.strategy import Strategy
from asap.spec.words import FailureKind, TrialStatus


@dataclass
class Measurement:
    """A trial that produced a step time (measured, or predicted when ``predicted``)."""

    strategy: Strategy
    step_time_s: float
    tokens_per_s: float | None = None
    peak_memory_gb: float | None = None
    losses: list[float] = field(default_factory=list)
    traces: list[str] = field(default_factory=list)
    executor: str = ""
    predicted: bool = False
    wall_time_s: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # the measurement (``asap.measure``): timed steps, spread, noise, repeats; None for a prediction
    stats: StepStats | None = None
    precision: str | None = None  # the precision the run trained in (fp32 on CPU processes), not the job's

    status = TrialStatus.OK
    ok: ClassVar[Literal[True]] = True
    reason = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "reason": None, "strategy": self.strategy.to_dict(), "executor": self.executor,
                "step_time_s": self.step_time_s, "measured_step_time_s": None if self.predicted else self.step_time_s,
                "predicted": self.predicted, "tokens_per_s": self.tokens_per_s, "peak_memory_gb": self.peak_memory_gb,
                "losses": self.losses, "traces": self.traces, "wall_time_s": self.wall_time_s, "details": self.details,
                "measured_spread": self.stats.measured_spread if self.stats else None,
                "noise": self.stats.noise if self.stats else (0.0 if self.predicted else None),
                "repeats": self.stats.repeats if self.stats else 1, "precision": self.precision,
                "step_stats": self.stats.to_dict() if self.stats else None}


@dataclass
class Failure:
    """A trial that produced no step time; ``kind`` says why (a ``FailureKind``), ``reason`` in one line."""

    strategy: Strategy
    reason: str
    kind: FailureKind = FailureKind.CRASH
    executor: str = ""
    log_tail: str = ""
    wall_time_s: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    status = TrialStatus.FAILED
    ok: ClassVar[Literal[False]] = False
    step_time_s = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "reason": self.reason, "kind": str(self.kind), "strategy": self.strategy.to_dict(),
                "executor": self.executor, "step_time_s": None, "measured_step_time_s": None,
                "wall_time_s": self.wall_time_s, "log_tail": self.log_tail, "details": self.details}


Result = Measurement | Failure


class TrialExecutor(Protocol):
    """What the Coordinator needs of an executor (``asap.execute.base.Executor`` gives every one of them)."""

    @property
    def name(self) -> str:
        """The executor's kind (``sim``, ``torch``, ``command``...), as Memory records it with each trial."""
        ...

    @property
    def machine(self) -> str | None:
        """What the trials run on, as Memory keeps workloads apart (None: nothing beyond the job's cluster)."""
        ...

    def run(self, strategy: Strategy) -> Result:
        """One trial of ``strategy``; never raises (whatever goes wrong is a ``Failure``)."""
        ...

    def refuses(self, strategy: Strategy) -> str | None:
        """Why this executor cannot run ``strategy`` (one line), before any trial is spent on it; None if it can."""
        ...

    def run_precision(self) -> str | None:
        """The precision this executor's runs train in (None: the job's)."""
        ...
