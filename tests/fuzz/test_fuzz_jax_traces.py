"""Fuzzing the JAX trace reader with mutated real JAX profiles recorded here (jax.profiler's perfetto export of
a sharded step on 4 virtual CPU devices): fields set to wrong types, huge numbers, NaN, negative durations,
unicode, or deleted; the file truncated; the events reordered. The rule, as for Kineto traces
(tests/fuzz/test_fuzz_traces.py): a one-line AsapError, or a diagnosis whose figures are finite and in range; a
reordered trace diagnoses the same as the original."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from test_fuzz_specs import FUZZ
from test_fuzz_traces import NASTY, diagnose_doc, mutate

pytest.importorskip("jax")
pytestmark = [pytest.mark.fuzz, pytest.mark.jax]

JOB = r'''
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()), ("d",))
x = jax.device_put(jnp.ones((4 * 64, 256), jnp.float32), NamedSharding(mesh, P("d", None)))
w = jax.device_put(jnp.ones((256, 256), jnp.float32) / 256, NamedSharding(mesh, P()))
step = jax.jit(lambda x, w: jnp.sum(x @ w, axis=0))  # a matmul per device, then an all-reduce
step(x, w).block_until_ready()
jax.profiler.start_trace(sys.argv[1], create_perfetto_trace=True)
for i in range(3):
    with jax.profiler.StepTraceAnnotation("train", step_num=i):
        step(x, w).block_until_ready()
jax.profiler.stop_trace()
'''


def _record() -> dict:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="asap-jax-fuzz-") as tmp:
        script = Path(tmp) / "job.py"
        script.write_text(JOB)
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        subprocess.run([sys.executable, str(script), str(Path(tmp) / "profile")], check=True, timeout=300,
                       capture_output=True, env=env)
        trace = next((Path(tmp) / "profile").rglob("perfetto_trace.json.gz"))
        return json.loads(gzip.decompress(trace.read_bytes()))


DOC = _record()


def test_the_recorded_trace_diagnoses():
    d, err = diagnose_doc(DOC)
    assert err is None and d.n_steps >= 3


@FUZZ
@given(st.integers(0, 2 ** 32), st.integers(1, 50),
       st.sampled_from(NASTY + ["<del>"]) | st.text(max_size=8) | st.floats())
def test_jax_fields_fuzz(seed, n_edits, value):
    diagnose_doc(mutate(DOC, seed, n_edits, value))


@FUZZ
@given(st.floats(0.0, 1.0))
def test_jax_truncated_fuzz(fraction):
    raw = json.dumps(DOC).encode()
    cut = raw[:int(len(raw) * fraction)]
    d, err = diagnose_doc(None, cut if cut else b" ")
    if fraction < 0.999:
        assert err is not None


@FUZZ
@given(st.integers(0, 2 ** 32))
def test_jax_reordered_fuzz(seed):
    events = list(DOC["traceEvents"])
    random.Random(seed).shuffle(events)
    base, _ = diagnose_doc(DOC)
    d, err = diagnose_doc({**DOC, "traceEvents": events})
    assert err is None
    assert d.step_time_s == pytest.approx(base.step_time_s, rel=1e-9)
    assert d.compute_s == pytest.approx(base.compute_s, rel=1e-6)
    assert d.communication_s == pytest.approx(base.communication_s, rel=1e-6)
