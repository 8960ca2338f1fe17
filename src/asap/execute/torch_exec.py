"""The ``torch`` executor: a real run of the reference trainer (``asap.runners.torch``) through the launcher that
``asap run`` uses."""

from __future__ import annotations

import contextlib
from pathlib import Path

from asap.errors import AsapError
from asap.execute.base import Executor
from asap.spec.outcome import Failure, Measurement, Result
from asap.measure import step_stats
from asap.spec.job import Job
from asap.spec.model import ModelSpec
from asap.spec.strategy import Strategy
from asap.spec.train import TrainSpec
from asap.spec.words import FailureKind


class TorchExecutor(Executor):
    name = "torch"

    def __init__(self, model: ModelSpec, train: TrainSpec, steps: int = 5, *, precision: str | None = None,
                 device: str = "auto", profile_dir: str | None = None, timeout_s: float | None = 1800.0,
                 seed: int = 0, data: str | None = None, lr: float = 1e-3):
        from asap.runners.torch.launch import RUN_PRECISIONS

        from asap.measure import run_steps

        # at least a warm-up, MIN_TIMED_STEPS timed and (profiling) the profiled last step (asap.measure)
        self.model, self.train, self.steps = model, train, run_steps(steps, 1, int(bool(profile_dir)))
        # the cost model's precisions fp16/fp8 have no counterpart in the reference trainer: bf16 stands in
        self.precision = precision or (train.precision if train.precision in RUN_PRECISIONS else "bf16")
        self.device, self.profile_dir, self.timeout_s = device, profile_dir, timeout_s
        self.seed, self.data, self.lr = seed, data, lr
        self.trials = 0
        self.calibration: Path | None = None  # this machine's calibration (``asap calibrate``), when there is one

    def cluster(self, devices: int):
        """The cluster a trial of ``devices`` processes runs on, as the cost model should price it: this machine's
        calibration when ``asap calibrate`` made one here (CPU runs), else the catalog's local-cpu."""
        from asap.calibrate import find_machine_calibration
        from asap.spec.hardware import load_cluster

        if self.device in ("auto", "cpu"):
            self.calibration = find_machine_calibration("cpu")
        return load_cluster(str(self.calibration) if self.calibration else "local-cpu", devices=devices)

    def predict(self, strategy: Strategy):
        """The cost model's estimate of ``strategy`` on this machine (``cluster``)."""
        from asap.cost.estimate import estimate

        train = TrainSpec(self.train.global_batch, self.train.seq_len, self.precision)
        return estimate(Job.resolve(self.model, self.cluster(strategy.devices), train), strategy)

    def with_prediction(self, details: dict, device: str, s: Strategy, train: TrainSpec) -> dict:
        """A CPU trial's details with what the cost model says of it on this machine's figures."""
        if device == "cpu":
            from asap.cost.estimate import estimate

            cluster = self.cluster(s.devices)
            details["cluster"] = str(self.calibration) if self.calibration else "local-cpu (catalog)"
            with contextlib.suppress(AsapError):  # a strategy the cost model refuses still ran: no prediction
                details["predicted_step_time_s"] = estimate(Job.resolve(self.model, cluster, train), s).step_time_s
        return details

    def refuses(self, strategy: Strategy) -> str | None:
        """The reference trainer's own limits (``asap.runners.torch.launch.check_supported``) on this machine's
        device."""
        from asap.runners.torch.launch import check_supported, detect_device

        train = TrainSpec(self.train.global_batch, self.train.seq_len, self.precision)
        try:
            check_supported(self.model, strategy, train, detect_device(self.device, strategy.devices))
        except AsapError as e:
            return str(e)
        return None

    def parse(self, spelled: str | dict) -> Strategy:
        """Completed and checked as ``asap run`` does (the device count from the strategy itself)."""
        from asap.runners.torch.launch import resolve_run_strategy

        return resolve_run_strategy(spelled, self.model, TrainSpec(self.train.global_batch, self.train.seq_len,
                                                                   self.precision))

    def _run(self, s: Strategy) -> Result:
        from asap.runners.torch.launch import RunFailed

        train = TrainSpec(self.train.global_batch, self.train.seq_len, self.precision)
        self.trials += 0 if self.repeat_index else 1  # a repeat is the same trial
        prof = (str(Path(self.profile_dir) / f"trial{self.trials}" / self.repeat_folder()).rstrip("/")
                if self.profile_dir else None)
        try:
            r = self._train(s, train, prof)
        except RunFailed as e:
            return Failure(s, e.reason, kind=FailureKind(e.kind), log_tail=e.log_tail[-4000:])
        details = self.with_prediction(self._details(r), r.device, s, train)
        details["as_run"] = {**s.to_dict(), "precision": self.precision, "steps": self.steps, "device": r.device}
        stats = step_stats(r.step_times_s, 1, [-1] if r.traces else [])
        return Measurement(s, stats.step_time_s, tokens_per_s=r.tokens_per_s, peak_memory_gb=r.peak_memory_gb,
                           losses=r.losses, traces=r.traces, wall_time_s=r.wall_time_s, details=details,
                           stats=stats, precision=self.precision)

    def run_precision(self) -> str | None:
        return self.precision

    def _train(self, s: Strategy, train: TrainSpec, profile_dir: str | None):
        """One real run of ``s`` on this executor's backend (the reference trainer under torchrun)."""
        from asap.runners.torch.launch import run

        return run(self.model, s, train.global_batch, train.seq_len, self.steps, precision=self.precision,
                   profile_dir=profile_dir, seed=self.seed, data=self.data, lr=self.lr, device=self.device,
                   timeout_s=self.timeout_s)

    def _details(self, r) -> dict:
        return r.to_dict()
