"""The ``maxtext`` executor: MaxText's own trainer on the emitted YAML (``asap.emit.maxtext``), one
single-controller process owning every device (on a CPU, ``{devices}`` virtual ones).

Each trial writes ``maxtext.yml`` (the emitted overrides under ``base_config: base.yml``, MaxText's own
defaults) and runs, with MaxText's interpreter (it needs Python >= 3.12: ``--python``, ``ASAP_MAXTEXT_PYTHON``,
or this interpreter when it can import maxtext)::

    python -m maxtext.trainers.pre_train.train maxtext.yml run_name=trialN base_output_directory=TRIAL/out
        dataset_type=synthetic steps=N enable_checkpointing=false profiler=xplane ...

On a machine without accelerators (the local CPU run only) it adds ``hardware=cpu
skip_jax_distributed_system=true dtype=float32`` and ``XLA_FLAGS=--xla_force_host_platform_device_count=D``.
The step time is MaxText's ``completed step: N, seconds: S`` line; the xplane profile is the trial's trace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from asap.errors import AsapError
from asap.measure import run_steps
from asap.execute.stack import StackExecutor
from asap.spec.job import Job
from asap.spec.strategy import Strategy

PYTHON_ENV = "ASAP_MAXTEXT_PYTHON"


def maxtext_python(python: str | None = None) -> str:
    """The interpreter that imports maxtext, checked once (one line when there is none)."""
    import sys

    for candidate in (python, os.environ.get(PYTHON_ENV), sys.executable):
        if not candidate:
            continue
        path = shutil.which(candidate) or candidate
        if not Path(path).is_file():
            if candidate in (python, os.environ.get(PYTHON_ENV)):
                raise AsapError("python", f"no such interpreter: {candidate}")
            continue
        ok = subprocess.run([path, "-c", "import importlib.util as u; raise SystemExit(u.find_spec('maxtext') is None)"],
                            capture_output=True, timeout=120).returncode == 0
        if ok:
            return path
        if candidate in (python, os.environ.get(PYTHON_ENV)):
            raise AsapError("python", f"{candidate} cannot import maxtext (pip install maxtext==0.2.5 --no-deps, "
                                      "then its decoupled requirements: docs/tune.md)")
    raise AsapError("python", f"no interpreter with maxtext: pass --python or set {PYTHON_ENV} (MaxText needs "
                              "Python >= 3.12; docs/tune.md)")


def has_accelerator() -> bool:
    """A GPU (or TPU) this machine's JAX would use instead of the host's CPU; decided without importing JAX."""
    return Path("/dev/nvidia0").exists() or Path("/dev/accel0").exists() or bool(os.environ.get("TPU_NAME"))


class MaxTextExecutor(StackExecutor):
    name = "maxtext"

    def __init__(self, job: Job, *, steps: int = 3, seed: int = 0, profile: bool = True,
                 cpu: bool | None = None, timeout_s: float | None = 900.0, workdir: str | None = None,
                 python: str | None = None):
        self.steps, self.seed, self.profile = run_steps(steps, 1, int(profile)), seed, profile
        self.cpu = (not has_accelerator()) if cpu is None else cpu
        py = maxtext_python(python)
        env = {"DECOUPLE_GCLOUD": "TRUE", "PYTHONUNBUFFERED": "1"}
        if self.cpu:
            env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={job.devices}")
        super().__init__([py, "-m", "maxtext.trainers.pre_train.train", "{config}", "{launcher_args}"], "maxtext",
                         job, timeout_s=timeout_s, workdir=workdir, env=env)

    def extra_fields(self) -> tuple[str, ...]:
        return super().extra_fields() + ("launcher_args",)

    def prepare(self, s: Strategy, trial_dir: Path, values: dict[str, Any]) -> dict[str, Any]:
        out = super().prepare(s, trial_dir, values)
        args = [f"run_name=trial{values['trial']}", f"base_output_directory={trial_dir / 'out'}",
                "dataset_type=synthetic", f"steps={self.steps}", "enable_checkpointing=false",
                f"init_weights_seed={self.seed}", "attention=dot_product"]
        if self.cpu:
            args += ["hardware=cpu", "skip_jax_distributed_system=true", "dtype=float32", "weight_dtype=float32"]
        if self.profile:
            args += ["profiler=xplane", f"skip_first_n_steps_for_profiler={self.steps - 1}", "profiler_steps=1"]
        out["_launcher_args_argv"] = args
        return out
