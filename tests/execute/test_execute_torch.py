"""The torch executor: the reference trainer through the launcher of `asap run` (real CPU processes)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from asap.errors import AsapError  # noqa: E402
from asap.spec.outcome import Failure, Measurement  # noqa: E402
from asap.execute.factory import make_executor  # noqa: E402
from asap.spec.loader import load_model  # noqa: E402
from asap.spec.train import TrainSpec  # noqa: E402


def _torch(**kw):
    return make_executor("torch", model=load_model("tiny-dense"), train=TrainSpec(4, 32, "fp32"), steps=2,
                         device="cpu", **kw)


def test_torch_executor_measures_a_real_run(tmp_path):
    ex = _torch(profile_dir=str(tmp_path))
    res = ex.run(ex.parse("dp=2,zero=0"))
    assert isinstance(res, Measurement) and res.status == "ok", res
    # 2 asked: a warm-up, 3 timed and the profiled last step (asap.measure.run_steps)
    assert not res.predicted and res.step_time_s > 0 and len(res.losses) == 5
    assert set(res.stats.dropped_profiled) == {4} and len(res.stats.timed_steps_s) == 3 * res.stats.repeats
    assert res.strategy.dp == 2 and res.strategy.zero == 0
    assert len(res.traces) == 2 and all("trial1" in t for t in res.traces)
    assert res.to_dict()["measured_step_time_s"] == res.step_time_s


def test_torch_executor_turns_bad_strategies_and_hangs_into_failed_trials():
    with pytest.raises(AsapError, match="tp=3 does not divide"):  # refused where the text is parsed
        _torch().parse("tp=3")
    ex = _torch()
    res = ex.run(ex.parse("cp=2"))  # refused before launching: no ring attention on CPU
    assert isinstance(res, Failure) and res.kind == "invalid" and "CUDA only" in res.reason
    ex = _torch(timeout_s=1.0)
    res = ex.run(ex.parse("dp=2"))  # killed long before two steps can finish
    assert res.status == "failed" and res.kind == "timeout" and "no result after 1 s" in res.reason
