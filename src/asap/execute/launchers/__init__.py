"""Entry points the framework executors launch (under torchrun, srun or a plain command): each reads its own
``--asap-*`` options, hands the rest to the stack, and applies ``asap.execute.cpu_shims`` only with
``--asap-cpu`` (a local CPU run)."""
