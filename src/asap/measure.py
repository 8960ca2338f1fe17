"""How a trial's step time is measured, the same way for every executor: the warm-up steps dropped, the
profiled step never timed, the median of the timed steps with its spread, repeats where the spread is wide,
and the noise floor a gain must beat before the loop adopts it.

* **Timed steps.** A run of ``n`` steps drops its first ``warmup`` (compilation, allocator warm-up, the first
  collectives' connection set-up) and every step the profiler recorded (a profiled step carries the
  profiler's own overhead: torch.profiler's per-operator events, XLA's trace collection); the rest are timed.
  Executors run at least ``warmup + MIN_TIMED_STEPS + profiled`` steps, so that a spread can be measured.
* **The step time** is the median of the timed steps (robust to one slow step: a page fault, another
  process on the core).
* **The spread** is the robust standard deviation ``1.4826 * MAD`` (the median absolute deviation, scaled to
  the normal's sigma: Rousseeuw & Croux, JASA 88, 1993), relative to the median (``measured_spread``).
* **The noise** of the median is its standard error, ``1.2533 * sigma / sqrt(n)`` (the median of n normal
  samples: Kenney & Keeping, Mathematics of Statistics, 1962, ss. 13.13), relative; never below
  ``MIN_NOISE_REL``: a run cannot see the variation between launches (process placement, the machine's
  load), so a single run is trusted no closer than that.
* **A gain is real** when the two medians differ by more than ``Z_NOISE`` times their combined noise
  (``noise_floor``: ``Z_NOISE * sqrt(noise_a^2 + noise_b^2)``, relative); else it is "within noise" and the loop
  keeps the trial it had (``gain_beyond_noise``).
* **Repeats.** When a run's relative spread is above ``WIDE_SPREAD`` the executor runs the trial again (up to
  ``max_repeats`` more times) and pools the timed steps of all runs (so the variation between launches is in the
  spread too); ``repeats`` records how many runs were pooled.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

MIN_TIMED_STEPS = 3   # timed steps a run has at least (a MAD of fewer says nothing)
MAD_TO_SIGMA = 1.4826  # sigma of a normal distribution over its median absolute deviation
MEDIAN_SE = 1.2533     # the median's standard error over sigma/sqrt(n) (sqrt(pi/2)), normal samples
MIN_NOISE_REL = 0.02   # a run's median is trusted no closer than 2%: launch-to-launch variation it cannot see
Z_NOISE = 2.0          # a difference beyond 2 combined standard errors (about 95% two-sided) is a gain
WIDE_SPREAD = 0.10     # a run whose relative spread is above 10% is repeated
DEFAULT_MAX_REPEATS = 1


@dataclass(frozen=True)
class StepStats:
    """A measured step time: the median of the timed steps, their relative spread and the median's noise."""

    step_time_s: float
    timed_steps_s: tuple[float, ...]
    all_steps_s: tuple[float, ...]
    dropped_warmup: int
    dropped_profiled: tuple[int, ...]  # 0-based indices of the profiled steps left out
    measured_spread: float             # 1.4826 * MAD / median (0 with one timed step)
    noise: float                       # the median's relative standard error, >= MIN_NOISE_REL
    repeats: int = 1

    @property
    def wide(self) -> bool:
        return self.measured_spread > WIDE_SPREAD

    def to_dict(self) -> dict[str, Any]:
        return {"step_time_s": self.step_time_s, "timed_steps_s": list(self.timed_steps_s),
                "all_steps_s": list(self.all_steps_s), "dropped_warmup": self.dropped_warmup,
                "dropped_profiled": list(self.dropped_profiled), "measured_spread": self.measured_spread,
                "noise": self.noise, "repeats": self.repeats, "timed_steps": len(self.timed_steps_s)}


def run_steps(steps: int, warmup: int, profiled: int) -> int:
    """The steps a run needs for ``steps`` asked: at least the warm-up, MIN_TIMED_STEPS timed and the profiled."""
    return max(int(steps), warmup + MIN_TIMED_STEPS + profiled)


def spread_of(timed: list[float]) -> tuple[float, float, float]:
    """(median s, relative spread, relative noise of the median) of the timed steps."""
    median = statistics.median(timed)
    if len(timed) < 2 or median <= 0:
        return median, 0.0, MIN_NOISE_REL
    mad = statistics.median(abs(t - median) for t in timed)
    spread = MAD_TO_SIGMA * mad / median
    return median, spread, max(MIN_NOISE_REL, MEDIAN_SE * spread / math.sqrt(len(timed)))


def step_stats(times: Iterable[float], warmup: int = 1, profiled: Iterable[int] = ()) -> StepStats:
    """The measurement of one run: ``times`` every step's seconds in order; ``profiled`` the 0-based indices of
    the steps the profiler recorded. Raises ValueError when no step is left to time."""
    all_steps = [float(t) for t in times]
    skip = {i % len(all_steps) for i in profiled} if all_steps else set()
    timed = [t for i, t in enumerate(all_steps) if i >= warmup and i not in skip]
    if not timed:
        raise ValueError(f"no timed step: {len(all_steps)} steps, {warmup} warm-up, {len(skip)} profiled")
    median, spread, noise = spread_of(timed)
    return StepStats(median, tuple(timed), tuple(all_steps), min(warmup, len(all_steps)),
                     tuple(sorted(skip)), spread, noise)


def pooled(runs: list[StepStats]) -> StepStats:
    """Several runs of one trial as one measurement: their timed steps together."""
    if len(runs) == 1:
        return runs[0]
    timed = [t for r in runs for t in r.timed_steps_s]
    median, spread, noise = spread_of(timed)
    return StepStats(median, tuple(timed), tuple(t for r in runs for t in r.all_steps_s),
                     sum(r.dropped_warmup for r in runs), tuple(i for r in runs for i in r.dropped_profiled),
                     spread, noise, repeats=sum(r.repeats for r in runs))


def noise_floor(noise_a: float | None, noise_b: float | None) -> float:
    """The relative difference two measured medians must exceed to differ (``Z_NOISE`` combined errors); a
    prediction (noise None or 0) counts as exact."""
    return Z_NOISE * math.hypot(noise_a or 0.0, noise_b or 0.0)


@dataclass(frozen=True)
class Verdict:
    gain: float          # 1 - new / reference: > 0 faster
    floor: float         # noise_floor of the two
    beyond_noise: bool

    def words(self) -> str:
        if self.beyond_noise:
            return f"{self.gain:+.1%} (beyond the noise floor {self.floor:.1%})"
        return f"{self.gain:+.1%}: within noise (floor {self.floor:.1%})"


def gain_beyond_noise(new_s: float, new_noise: float | None, ref_s: float, ref_noise: float | None) -> Verdict:
    """Whether a step time ``new_s`` is faster than ``ref_s`` beyond both measurements' noise."""
    gain = 1.0 - new_s / ref_s
    floor = noise_floor(new_noise, ref_noise)
    return Verdict(gain, floor, gain > floor)


@dataclass
class Measured:
    """What the executors put in a Measurement's details (the trial JSON's keys, the same for every one)."""

    stats: StepStats
    precision: str
    knobs: dict[str, Any] = field(default_factory=dict)

    def details(self) -> dict[str, Any]:
        return {"step_stats": self.stats.to_dict(), "measured_spread": self.stats.measured_spread,
                "noise": self.stats.noise, "repeats": self.stats.repeats, "precision": self.precision,
                "as_run": self.knobs}
