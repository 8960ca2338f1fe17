"""The reference trainer's launcher: torchrun's own agent, its workers forked from one interpreter.

``python -m asap.runners.torch.elastic --nproc-per-node N --config FILE`` is ``python -m torch.distributed.run
--standalone --nproc-per-node N -m asap.runners.torch.worker --config FILE`` with one difference: torchrun starts
a command entry point's workers as new interpreters (``SubprocessHandler``), each importing torch again (about
3 s of CPU a worker on this project's machine: most of a small CPU run's start, and N of them compete for the
cores), where here the same agent (``torch.distributed.launcher.api.elastic_launch``, which
``torch.distributed.run.run`` calls) runs a function entry point, ``worker.entry``, in processes forked
(``start_method="fork"``) from this one after it has imported torch and the worker module once.

Everything else is torchrun's: its argument parser and ``config_from_args`` build the launch config,
``--standalone`` sets the c10d rendezvous on a free local port as ``torch.distributed.run.run`` does, and every
worker gets the same environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, the agent's store).
Forking is safe here because this process runs no torch operation (no OpenMP pool yet) and never touches CUDA
before the fork. Exit status 0 when every worker returned 0, else 1 with the agent's failure summary on stderr
(torchrun's ``ChildFailedError`` table: exit codes, signals).
"""

from __future__ import annotations

import sys
import uuid


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="asap.runners.torch.elastic")
    ap.add_argument("--nproc-per-node", type=int, required=True)
    ap.add_argument("--config", required=True)
    args = ap.parse_args(argv)

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args

    from asap.runners.torch import worker

    # torchrun's parser needs a training script: the worker's module, which the function entry point replaces
    run_args = parse_args(["--standalone", "--nproc-per-node", str(args.nproc_per_node), "--start-method", "fork",
                           "-m", "asap.runners.torch.worker", "--config", args.config])
    # what torch.distributed.run.run does for --standalone before it builds the config
    run_args.rdzv_backend, run_args.rdzv_endpoint, run_args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    config, _command, _command_args = config_from_args(run_args)
    try:
        elastic_launch(config=config, entrypoint=worker.entry)(args.config)
    except ChildFailedError as e:
        print(e, file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
