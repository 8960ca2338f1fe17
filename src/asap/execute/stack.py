"""Framework executors: each trial emits the strategy in the stack's own config (``asap.emit``), writes it into
the trial's folder, launches the stack and reads its log with the stack's own parser (``asap.execute.logs``).

``StackExecutor`` is the ``command`` executor plus that: placeholders ``{config}`` (the emitted file) and
``{emitted_args}`` (Megatron's emitted arguments, spliced into the command line as separate arguments), the
stack's step line, OOM messages and trace folder. ``torchtitan``, ``deepspeed`` and ``maxtext`` subclass it
with a complete local command (``asap tune --executor torchtitan``); any other launch is a template
(``asap tune --executor command --framework F --launch TEMPLATE``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from asap.errors import AsapError
from asap.execute.command import CommandExecutor
from asap.spec.job import Job
from asap.spec.model import ModelSpec
from asap.spec.strategy import Strategy
from asap.spec.train import TrainSpec

EMIT_FORMAT = {"megatron": "megatron", "torchtitan": "torchtitan", "maxtext": "maxtext", "deepspeed": "deepspeed",
               "mindformers": "mindformers"}
CONFIG_SUFFIX = {"megatron": ".args", "torchtitan": ".toml", "maxtext": ".yml", "deepspeed": ".json",
                 "mindformers": ".yaml"}


class StackExecutor(CommandExecutor):
    """A launch template run once per trial with the emitted config of the trial's strategy."""

    name = "command"
    model: ModelSpec  # the job's: never None here
    train: TrainSpec

    def __init__(self, template: str | list[str], framework: str, job: Job, **kwargs):
        if framework not in EMIT_FORMAT:
            raise AsapError("framework", f"must be one of {', '.join(EMIT_FORMAT)}, got {framework!r}")
        self.framework, self.job, self.cluster = framework, job, job.cluster
        kwargs.setdefault("devices", job.cluster.num_devices)
        super().__init__(template, model=job.model, train=job.train, framework=framework, **kwargs)

    @property
    def machine(self) -> str:
        import platform

        return f"{self.name} {self.framework} on {platform.node()}"

    def extra_fields(self) -> tuple[str, ...]:
        return ("config", "emitted_args")

    def profiled_steps(self, n: int) -> list[int]:
        """The local stacks' profilers record the last step (``profile``): never timed."""
        return [n - 1] if getattr(self, "profile", False) and n > 0 else []

    def run_precision(self) -> str | None:
        """On CPU processes the local stacks train in float32 parameters (bf16 matmuls are very slow there;
        ``--training.mixed_precision_param float32``, DeepSpeed's bf16 off, MaxText's dtype=float32)."""
        return "fp32" if getattr(self, "cpu", False) else super().run_precision()

    def emitted(self, s: Strategy) -> str:
        from asap.emit import emit

        return emit(EMIT_FORMAT[self.framework], self.job, s)

    def refuses(self, strategy: Strategy) -> str | None:
        """What the stack's config cannot express (the emitter's one-line refusal), before a trial is spent."""
        try:
            self.emitted(strategy)
        except AsapError as e:
            return str(e)
        return None

    def prepare(self, s: Strategy, trial_dir: Path, values: dict[str, Any]) -> dict[str, Any]:
        text = self.emitted(s)
        if self.framework == "maxtext" and "base_config:" not in text:  # MaxText's defaults under the overrides
            text = "base_config: base.yml\n" + text
        config = trial_dir / f"{self.framework}{CONFIG_SUFFIX[self.framework]}"
        config.write_text(text)
        args = [a for line in text.splitlines() if not line.lstrip().startswith("#") for a in line.split()]
        return {"config": str(config), "emitted_args": " ".join(args), "_emitted_args_argv": args}

    def _argv(self, values: dict[str, Any]) -> list[str]:
        """The template filled; an argument that is exactly ``{name}`` with a list behind it (``{emitted_args}``,
        a launcher's own arguments) becomes that many arguments."""
        out: list[str] = []
        for part in self.argv_template:
            spliced = values.get(f"_{part[1:-1]}_argv") if part.startswith("{") and part.endswith("}") else None
            if spliced is not None:
                out.extend(spliced)
            else:
                out.append(self._fill(part, values))
        return out


def python_for(executable: str | None) -> str:
    """The interpreter a stack runs under (its own virtual environment), checked."""
    import sys

    path = executable or sys.executable
    if shutil.which(path) is None and not Path(path).is_file():
        raise AsapError("python", f"no such interpreter: {path}")
    return path
