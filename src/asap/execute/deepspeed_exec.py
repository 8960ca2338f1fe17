"""The ``deepspeed`` executor: DeepSpeed's engine on the emitted JSON (``asap.emit.deepspeed``), under torchrun.

Each trial writes ``deepspeed.json`` and the model (asap's native JSON) into its folder and runs
``asap.execute.launchers.deepspeed_main``: asap's reference transformer, initialised and fed exactly as
``asap run`` does (same seed, same synthetic tokens), wrapped by ``deepspeed.initialize``. The step time is
DeepSpeed's own ``time (ms) | fwd | bwd | step`` line. ``--asap-cpu`` (``DS_ACCELERATOR=cpu``, gloo, float32)
only where the machine has no GPU. This local launcher trains ZeRO data parallelism (stages 0-3); tensor and
pipeline parallelism need the model written for them (AutoTP, a PipelineModule): run those through
``--executor command --framework deepspeed`` with your own script.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from asap.measure import run_steps
from asap.execute.stack import StackExecutor
from asap.execute.torchtitan_exec import has_gpu
from asap.spec.job import Job
from asap.spec.strategy import Strategy


class DeepSpeedExecutor(StackExecutor):
    name = "deepspeed"

    def __init__(self, job: Job, *, steps: int = 3, seed: int = 0, profile: bool = True,
                 cpu: bool | None = None, timeout_s: float | None = 900.0, workdir: str | None = None,
                 python: str | None = None):
        self.steps, self.seed, self.profile = run_steps(steps, 1, int(profile)), seed, profile
        self.cpu = (not has_gpu()) if cpu is None else cpu
        head = [python or sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                "{devices}", "-m", "asap.execute.launchers.deepspeed_main", "{launcher_args}"]
        env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        if self.cpu:
            env.update(DS_ACCELERATOR="cpu", DS_BUILD_OPS="0")
        super().__init__(head, "deepspeed", job, timeout_s=timeout_s, workdir=workdir, env=env)

    def extra_fields(self) -> tuple[str, ...]:
        return super().extra_fields() + ("launcher_args",)

    def refuses(self, strategy: Strategy) -> str | None:
        if strategy.tp > 1 or strategy.pp > 1:
            return (f"strategy.tp: the local deepspeed launcher trains ZeRO data parallelism only (tp={strategy.tp}, "
                    f"pp={strategy.pp}); use --executor command --framework deepspeed with a PipelineModule script")
        return super().refuses(strategy)

    def prepare(self, s: Strategy, trial_dir: Path, values: dict[str, Any]) -> dict[str, Any]:
        out = super().prepare(s, trial_dir, values)
        model_json = trial_dir / "model.json"
        model_json.write_text(json.dumps(self.model.to_dict(), indent=1))
        args = ["--asap-config", out["config"], "--asap-model", str(model_json), "--asap-steps", str(self.steps),
                "--asap-seq-len", str(self.train.seq_len), "--asap-seed", str(self.seed)]
        if self.profile:
            args += ["--asap-profile", str(trial_dir / "profile")]
        if self.cpu:
            args.append("--asap-cpu")
        out["_launcher_args_argv"] = args
        return out
