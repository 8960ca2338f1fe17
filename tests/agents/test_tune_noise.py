"""On a real torchtitan loop (FSDP2 on two CPU processes, tiny-dense), the same strategy measured twice: each
measurement drops its warm-up, never times the profiled step, states its noise (at least the 2% floor) and the
precision run (fp32); the loop's rule (``asap.agents.coordinator.adopt``) adopts the second only beyond the noise
both state, and never a change within it."""

from asap import Job, TrainSpec, load_cluster, load_model
from asap.agents.coordinator import TrialRecord, adopt
from asap.execute.factory import tune_executor
from asap.measure import gain_beyond_noise
from asap.spec.strategy import resolve_strategy
from asap.spec.words import TrialStatus


def test_the_same_torchtitan_strategy_twice_is_within_the_stated_noise(tmp_path):
    model, train = load_model("tiny-dense"), TrainSpec(8, 64, "bf16", framework="torchtitan")
    job = Job.resolve(model, load_cluster("local-cpu", devices=2), train)
    ex = tune_executor("torchtitan", job, steps=2, workdir=str(tmp_path))
    s = resolve_strategy("dp=2,zero=3", model, train, 2)
    a, b = ex.run(s), ex.run(s)
    assert a.ok and b.ok, (a.to_dict().get("reason"), b.to_dict().get("reason"))
    for m in (a, b):
        d = m.to_dict()
        assert d["precision"] == "fp32"  # float32 parameters on CPU processes, not the job's bf16
        st = m.stats
        n = len(st.all_steps_s) // st.repeats
        assert n == 5 and st.dropped_warmup == st.repeats  # 2 asked: warm-up + 3 timed + the profiled last
        assert all(i % n == n - 1 for i in st.dropped_profiled) and len(st.timed_steps_s) == 3 * st.repeats
        assert d["measured_spread"] is not None and d["noise"] >= 0.02 and m.traces
    v = gain_beyond_noise(b.step_time_s, b.stats.noise, a.step_time_s, a.stats.noise)
    print(f"twice: {a.step_time_s:.4f} s (noise {a.stats.noise:.1%}, spread {a.stats.measured_spread:.1%}, "
          f"repeats {a.stats.repeats}) and {b.step_time_s:.4f} s (noise {b.stats.noise:.1%}, spread "
          f"{b.stats.measured_spread:.1%}, repeats {b.stats.repeats}): {v.words()}")
    # decided by construction, not by the machine's load: the rule adopts the second run of one strategy exactly
    # when its gain beats the floor both runs state (a loaded machine can part two runs by more than either run's
    # own steps spread: seen 10% apart at 2.6% and 1.5% spread under pytest-xdist, so the pair is printed above);
    # and a figure inside that floor is never adopted
    first = TrialRecord(s, TrialStatus.OK, "", a.step_time_s, None, None, noise=a.stats.noise)
    adopt(first, None)
    again = TrialRecord(s, TrialStatus.OK, "", b.step_time_s, None, None, noise=b.stats.noise)
    assert adopt(again, (s, a.step_time_s, a.stats.noise)) == v
    assert again.adopted == v.beyond_noise and ("within noise" in again.verdict) != v.beyond_noise
    inside = TrialRecord(s, TrialStatus.OK, "", a.step_time_s * (1 - v.floor / 4), None, None, noise=b.stats.noise)
    adopt(inside, (s, a.step_time_s, a.stats.noise))
    assert not inside.adopted and "within noise" in inside.verdict
