"""The decisions the commands print, through the API (``asap.search.advice``): where a fitting strategy is
(estimate's ``next:``) and the best planned candidate a format can express (``plan --emit``)."""

import pytest

from asap.errors import AsapError
from asap.search.advice import emit_best, fitting_next
from asap.search.planner import plan, plan_headroom
from asap.spec.job import Job


def test_fitting_next_keeps_the_pins_where_something_fits_with_them():
    job = Job.from_names("llama3-8b", "h100-sxm", 8, 4096, devices=8)
    found = fitting_next(job, {"tp": 2})
    assert found.best is not None and found.best.fits
    assert found.fixed == {"tp": 2} and found.best.strategy.tp == 2 and found.devices == 8
    assert found.best.step_time_s == plan(plan_headroom(job), fixed={"tp": 2}).candidates[0].step_time_s


def test_fitting_next_doubles_the_devices_where_nothing_fits():
    job = Job.from_names("llama3-70b", "h100-sxm", 8, 4096, devices=1)
    found = fitting_next(job, {})
    assert found.best is not None and found.best.fits
    assert found.devices > 1 and found.job.devices == found.devices and found.best.strategy.devices == found.devices


def test_emit_best_skips_what_the_format_cannot_express():
    job = Job.from_names("llama3-8b", "h100-sxm", 64, 4096, devices=8, framework="deepspeed")
    result = plan(plan_headroom(job), top=3, split_candidates=0)
    out = emit_best("deepspeed", job, result.candidates)
    assert out["format"] == "deepspeed" and out["text"].lstrip().startswith("{")
    assert out["strategy_string"] in [str(e.strategy) for e in result.candidates]
    with pytest.raises(AsapError, match="no fitting candidate"):
        emit_best("deepspeed", job, [])
