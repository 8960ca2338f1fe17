"""On a real torchtitan loop (FSDP2 on two CPU processes, tiny-dense): the same strategy measured twice is
within the noise the measurement states, and so a change within that noise is not adopted by the loop's rule
(``asap.agents.coordinator.adopt``); the profiled step is never timed and the precision is the one run (fp32)."""

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
    assert not v.beyond_noise and abs(v.gain) <= v.floor, (a.stats.to_dict(), b.stats.to_dict())
    first = TrialRecord(s, TrialStatus.OK, "", a.step_time_s, None, None, noise=a.stats.noise)
    adopt(first, None)
    again = TrialRecord(s, TrialStatus.OK, "", b.step_time_s, None, None, noise=b.stats.noise)
    adopt(again, (s, a.step_time_s, a.stats.noise))
    assert not again.adopted and "within noise" in again.verdict
