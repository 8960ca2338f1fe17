"""The measurement rules every executor shares (``asap.measure``): warm-up and profiled steps never timed, the
median with its robust spread and noise, repeats pooled, a gain adopted only beyond the noise."""

import pytest

from asap.agents.coordinator import TrialRecord, adopt
from asap.measure import MIN_NOISE_REL, gain_beyond_noise, pooled, run_steps, step_stats
from asap.spec.words import TrialStatus


def test_warmup_and_the_profiled_step_are_never_timed():
    # the case: 2 steps, the first warm-up, the second profiled -> a run has to be longer
    assert run_steps(2, 1, 1) == 5 and run_steps(2, 1, 0) == 4 and run_steps(8, 1, 1) == 8
    s = step_stats([0.9, 0.30, 0.31, 0.29, 0.50], warmup=1, profiled=[-1])
    assert s.timed_steps_s == (0.30, 0.31, 0.29) and s.dropped_profiled == (4,) and s.dropped_warmup == 1
    assert s.step_time_s == 0.30
    with pytest.raises(ValueError):
        step_stats([0.5, 0.3], warmup=1, profiled=[-1])


def test_spread_is_the_robust_sigma_and_noise_the_medians_error():
    s = step_stats([1.0, 1.0, 1.1, 0.9, 1.0, 1.2], warmup=1)
    # median 1.0, |dev| = 0, .1, .1, 0, .2 -> MAD .1 -> sigma .14826, se = 1.2533 * .14826 / sqrt(5)
    assert s.measured_spread == pytest.approx(0.14826)
    assert s.noise == pytest.approx(1.2533 * 0.14826 / 5 ** 0.5)
    assert s.wide  # above 10%: the executor runs it again
    tight = step_stats([2.0, 1.0, 1.0, 1.0], warmup=1)
    assert tight.measured_spread == 0 and tight.noise == MIN_NOISE_REL


def test_repeats_pool_their_timed_steps():
    a, b = step_stats([9, 1.0, 1.3, 1.0]), step_stats([9, 1.2, 1.2, 1.1])
    p = pooled([a, b])
    assert p.repeats == 2 and len(p.timed_steps_s) == 6 and p.step_time_s == pytest.approx(1.15)


def _record(step_s, noise):
    return TrialRecord(None, TrialStatus.OK, "", step_s, None, None, noise=noise)


def test_a_gain_within_the_noise_is_not_adopted():
    first = _record(0.501, 0.10)
    assert adopt(first, None) is None and first.adopted
    best = (None, 0.501, 0.10)
    within = _record(0.45, 0.10)  # 10% faster, but the floor is 2 * hypot(.1, .1) = 28%
    v = adopt(within, best)
    assert not v.beyond_noise and not within.adopted and "within noise" in within.verdict
    beyond = _record(0.30, 0.02)  # 40% faster, floor 2 * hypot(.02, .1) = 20%
    assert adopt(beyond, best).beyond_noise and beyond.adopted
    # a prediction (sim) is exact: any gain counts
    assert gain_beyond_noise(0.999, 0.0, 1.0, 0.0).beyond_noise
