"""The sim executor: the cost model's prediction as a trial (tested only where asap.cost.estimate exists)."""

from __future__ import annotations

import pytest

pytest.importorskip("asap.cost.estimate")

from asap.errors import AsapError  # noqa: E402
from asap.spec.outcome import Failure, Measurement  # noqa: E402
from asap.execute.factory import make_executor  # noqa: E402
from asap.spec.hardware import load_cluster  # noqa: E402
from asap.spec.job import Job  # noqa: E402
from asap.spec.loader import load_model  # noqa: E402
from asap.spec.train import TrainSpec  # noqa: E402


def _sim(model: str):
    return make_executor("sim", job=Job.resolve(load_model(model), load_cluster("dgx-h100-1"), TrainSpec(64, 4096)))


def test_sim_predicts_a_step_time():
    ex = _sim("llama3-8b")
    res = ex.run(ex.parse("tp=2"))
    assert isinstance(res, Measurement) and res.status == "ok" and res.predicted
    assert res.step_time_s > 0 and res.peak_memory_gb > 0 and res.executor == "sim"
    assert res.strategy.dp == 4  # filled from the cluster's 8 devices
    d = res.to_dict()
    assert d["measured_step_time_s"] is None and d["details"]["fits"] is True


def test_sim_fails_what_does_not_fit_or_is_illegal():
    ex = _sim("llama3-70b")
    res = ex.run(ex.parse("dp=8,zero=0"))
    assert isinstance(res, Failure) and res.kind == "oom" and "does not fit" in res.reason
    with pytest.raises(AsapError, match=r"^strategy\.dp"):  # the text is parsed at the edge, before any trial
        _sim("llama3-8b").parse("tp=3")
