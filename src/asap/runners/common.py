"""What the runners share (the torch reference trainer, ``asap.runners.torch``, and the JAX backend,
``asap.runners.jax``): the result of a run, its failure, the precisions a real run takes, and the child
process whose output is logged, echoed and watched for a timeout.

Both backends launch a child (torchrun, or a JAX process that owns the devices), hand it a JSON config and read
back per-rank JSON; a run that crashes, runs out of memory or hangs raises ``RunFailed`` with a one-line reason.
"""

from __future__ import annotations

import subprocess
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from asap.spec.words import FailureKind
from asap.subprocs import wait_or_kill

RUN_PRECISIONS = ("fp32", "bf16")
BACKENDS = ("torch", "jax")  # asap run --backend: the reference trainer on torchrun, or JAX meshes
DEVICE_REQUESTS = ("auto", "cpu", "cuda")  # auto: CUDA when there are GPUs
# the PyTorch the quick start installs (README), as its CPU build: PyPI's Linux torch wheel is the CUDA one
TORCH_CPU_INSTALL = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu (the CPU build)"


def need_torch(command: str) -> None:
    """A real run's first check: PyTorch is installed (found, not imported: the workers import it), else one line
    naming the install that works (its CPU build)."""
    import importlib.util

    from asap.errors import AsapError

    if importlib.util.find_spec("torch") is None:
        raise AsapError(command, f"real runs need PyTorch: {TORCH_CPU_INSTALL}")


def failure_kind(text: str) -> FailureKind:
    """A worker's error file names its kind as text (``oom``, ``crash``): the enum, crash for anything else."""
    try:
        return FailureKind(text)
    except ValueError:
        return FailureKind.CRASH


class RunFailed(RuntimeError):
    """A launched run that did not finish: ``kind`` is oom, crash or timeout; ``reason`` is one line."""

    def __init__(self, kind: FailureKind, reason: str, log_tail: str = ""):
        self.kind, self.reason, self.log_tail = kind, reason, log_tail
        super().__init__(reason)


@dataclass
class RunResult:
    strategy: dict[str, Any]
    step_time_s: float
    tokens_per_s: float
    losses: list[float]
    peak_memory_gb: float
    traces: list[str] = field(default_factory=list)
    step_times_s: list[float] = field(default_factory=list)
    peak_memory_gb_per_rank: list[float] = field(default_factory=list)
    aux_losses: list[float | None] = field(default_factory=list)
    layers_per_chunk: list[int] = field(default_factory=list)  # as the workers built them, in chunk order
    # MoE dispatch across "nodes" (--devices-per-node), summed over ranks, layers, micro-batches and steps:
    # hidden-state bytes sent to ranks of another node, and sum over tokens of the remote nodes of its experts
    internode_dispatch_bytes: int = 0
    dispatch_remote_domains: int = 0
    # --lengths: each data-parallel rank's attention work, sum(l^2) of its samples over rows x seq_len^2, mean
    # over steps (what asap balance evens out), and the slowest over the mean
    attention_work_per_dp_rank: list[float] = field(default_factory=list)
    attention_max_over_mean: float | None = None
    model: str = ""
    global_batch: int = 0
    seq_len: int = 0
    steps: int = 0
    precision: str = "fp32"
    nproc: int = 1
    device: str = "cpu"
    backend: str = "gloo"
    wall_time_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_logged(cmd: list[str], env: dict[str, str], log_path: Path, timeout_s: float | None,
               echo: IO[str] | None, progress: IO[str] | None = None,
               step_line: str | None = None) -> tuple[int, bool]:
    """Run ``cmd`` in its own session, every line of its output into ``log_path``; ``echo`` gets every line,
    else ``progress`` the lines that start with ``step_line`` (the backend's per-step log line). Killed whole
    after ``timeout_s`` (``asap.subprocs.wait_or_kill``). Returns (exit code, whether it timed out)."""
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True, text=True, errors="replace")

        def pump():
            assert proc.stdout is not None
            for line in proc.stdout:
                logf.write(line)
                logf.flush()
                stepped = step_line is not None and line.startswith(step_line)
                out = echo if echo is not None else (progress if stepped else None)
                if out is not None:
                    out.write(line)
                    out.flush()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = wait_or_kill(proc, timeout_s)
        reader.join(timeout=5)
        return proc.returncode, timed_out
