"""The ``jax`` executor: a real run on a JAX device mesh (``asap.jaxrun``, one child process owning the
devices; on the CPU, ``strategy.devices`` virtual ones) through the launcher that ``asap run --backend jax``
uses. The same trials as the ``torch`` executor (``TorchExecutor``: its precision rule and its cost-model
figures for this machine), measured on GSPMD instead of torch.distributed."""

from __future__ import annotations

from pathlib import Path

from asap.errors import AsapError
from asap.execute.base import Failure, Measurement, Result
from asap.execute.torch_exec import TorchExecutor
from asap.spec.strategy import Strategy
from asap.spec.train import TrainSpec


class JaxExecutor(TorchExecutor):
    name = "jax"

    def refuses(self, strategy: Strategy) -> str | None:
        """The JAX trainer's own limits (``asap.jaxrun.launch.check_supported_jax``)."""
        from asap.jaxrun.launch import check_supported_jax

        train = TrainSpec(self.train.global_batch, self.train.seq_len, self.precision)
        try:
            check_supported_jax(self.model, strategy, train)
        except AsapError as e:
            return str(e)
        return None

    def _run(self, strategy: Strategy | str | dict) -> Result:
        from asap.jaxrun.launch import run
        from asap.train.launch import RunFailed, resolve_run_strategy

        train = TrainSpec(self.train.global_batch, self.train.seq_len, self.precision)
        s = strategy if isinstance(strategy, Strategy) else resolve_run_strategy(strategy, self.model, train)
        self.trials += 1
        prof = str(Path(self.profile_dir) / f"trial{self.trials}") if self.profile_dir else None
        try:
            r = run(self.model, s, train.global_batch, train.seq_len, self.steps, precision=self.precision,
                    profile_dir=prof, seed=self.seed, data=self.data, lr=self.lr, timeout_s=self.timeout_s)
        except RunFailed as e:
            return Failure(s.to_dict(), e.reason, kind=e.kind, log_tail=e.log_tail[-4000:])
        details = self.with_prediction({**r.to_dict(), "mesh": r.mesh}, r.device, s, train)
        return Measurement(s.to_dict(), r.step_time_s, tokens_per_s=r.tokens_per_s, peak_memory_gb=r.peak_memory_gb,
                           losses=r.losses, traces=r.traces, wall_time_s=r.wall_time_s, details=details)
