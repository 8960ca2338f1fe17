"""The ``torchtitan`` executor: torchtitan's own trainer on the emitted TOML, under torchrun.

Each trial writes ``torchtitan.toml`` (``asap.emit.torchtitan``: its ``[model]`` name and flavor) and, when that
flavor is asap's own, its arguments (``model_args.json``, ``asap.emit.torchtitan_model.model_args_json``,
registered in the trainer process by ``asap.execute.launchers.torchtitan_main``), with a tokenizer and a small JSON-lines corpus made locally (``asap.execute.assets``), and runs::

    torchrun --standalone --nproc-per-node {devices} -m asap.execute.launchers.torchtitan_main
        [--asap-cpu] --asap-model-args model_args.json --job.config_file torchtitan.toml --training.steps N
        --metrics.log_freq 1 --profiling.enable_profiling ...

``--asap-cpu`` (the CPU shims, float32 parameters) is added only where the machine has no GPU. The step time
is read from torchtitan's ``step: ... tps: ...`` lines; rank 0's Kineto traces come back as the trial's traces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asap.measure import run_steps
from asap.execute.stack import StackExecutor
from asap.spec.job import Job
from asap.spec.strategy import Strategy


def has_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


class TorchtitanExecutor(StackExecutor):
    name = "torchtitan"

    def __init__(self, job: Job, *, steps: int = 3, seed: int = 0, profile: bool = True,
                 cpu: bool | None = None, launcher: str = "torchrun", timeout_s: float | None = 900.0,
                 workdir: str | None = None, python: str | None = None):
        import sys

        self.steps, self.seed, self.profile = run_steps(steps, 1, int(profile)), seed, profile
        self.cpu = (not has_gpu()) if cpu is None else cpu
        py = python or sys.executable
        head = [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "{devices}"]
        super().__init__(head + ["-m", "asap.execute.launchers.torchtitan_main", "{launcher_args}"],
                         "torchtitan", job, timeout_s=timeout_s, workdir=workdir,
                         env={"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "NO_COLOR": "1"})

    def extra_fields(self) -> tuple[str, ...]:
        return super().extra_fields() + ("launcher_args",)

    def refuses(self, strategy: Strategy) -> str | None:
        if self.cpu and strategy.cp > 1:  # measured: aten._scaled_dot_product_flash_attention_for_cpu has no sharding rule
            return (f"strategy.cp: torchtitan's context parallelism (cp={strategy.cp}) needs the CUDA SDPA kernels "
                    "(its CPU flash attention has no DTensor sharding rule); not on CPU processes")
        return super().refuses(strategy)

    def assets(self) -> Path:
        """The corpus and tokenizer, made once per executor (shared by its trials)."""
        from asap.execute.assets import write_corpus, write_tokenizer

        folder = self.workdir / "assets"
        if not (folder / "tokenizer.json").is_file():
            corpus = write_corpus(folder / "corpus")
            write_tokenizer(folder, corpus, self.model.vocab_size)
        return folder

    def prepare(self, s: Strategy, trial_dir: Path, values: dict[str, Any]) -> dict[str, Any]:
        out = super().prepare(s, trial_dir, values)
        assets = self.assets()
        from asap.emit.torchtitan_model import model_args, model_args_json

        own = []
        if not model_args(self.model, self.train.seq_len).registered:  # the emitted [model] flavor is asap's own
            path = trial_dir / "model_args.json"
            path.write_text(model_args_json(self.model, self.train.seq_len))
            own = ["--asap-model-args", str(path)]
        args = (["--asap-cpu"] if self.cpu else []) + own + [
            "--job.config_file", out["config"], "--job.dump_folder", str(trial_dir / "outputs"),
            "--model.hf_assets_path", str(assets), "--training.dataset", "c4_test",
            "--training.dataset_path", str(assets / "corpus"), "--training.steps", str(self.steps),
            "--metrics.log_freq", "1", "--lr_scheduler.warmup_steps", "1", "--debug.seed", str(self.seed)]
        if self.cpu:  # bf16 matmuls are very slow on CPUs: float32 parameters
            args += ["--training.mixed_precision_param", "float32"]
        if self.profile:
            args += ["--profiling.enable_profiling", "--profiling.save_traces_folder", "profile_traces",
                     "--profiling.profile_freq", str(self.steps), "--profiling.profiler_warmup", "0",
                     "--profiling.profiler_active", "1"]
        out["_launcher_args_argv"] = args
        return out
