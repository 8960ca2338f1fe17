"""The ``jax`` executor: a real run on a JAX device mesh (``asap.runners.jax``, one child process owning the
devices; on the CPU, ``strategy.devices`` virtual ones) through the launcher that ``asap run --backend jax``
uses. The same trials as the ``torch`` executor (``TorchExecutor``: its precision rule and its cost-model
figures for this machine), measured on GSPMD instead of torch.distributed."""

from __future__ import annotations

from asap.errors import AsapError
from asap.execute.torch_exec import TorchExecutor
from asap.spec.strategy import Strategy
from asap.spec.train import TrainSpec


class JaxExecutor(TorchExecutor):
    name = "jax"

    def refuses(self, strategy: Strategy) -> str | None:
        """The JAX trainer's own limits (``asap.runners.jax.launch.check_supported_jax``)."""
        from asap.runners.jax.launch import check_supported_jax

        train = TrainSpec(self.train.global_batch, self.train.seq_len, self.precision)
        try:
            check_supported_jax(self.model, strategy, train)
        except AsapError as e:
            return str(e)
        return None

    def _train(self, s: Strategy, train: TrainSpec, profile_dir: str | None):
        """One real run of ``s`` on a JAX mesh (``asap.runners.jax``: one child process owning the devices)."""
        from asap.runners.jax.launch import run

        return run(self.model, s, train.global_batch, train.seq_len, self.steps, precision=self.precision,
                   profile_dir=profile_dir, seed=self.seed, data=self.data, lr=self.lr, timeout_s=self.timeout_s)

    def _details(self, r) -> dict:
        return {**r.to_dict(), "mesh": r.mesh}
