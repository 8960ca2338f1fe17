"""Bytes per logit PyTorch's loss holds, eager and under torch.compile, measured on this machine's CPU
(``EAGER_LOGITS_BYTES``, ``COMPILED_LOGITS_PER_ACT_BYTE``).

    PYTHONPATH=src .venv/bin/python benchmarks/loss_memory_cpu.py [--tokens 4096] [--vocab 32768]

Runs the loss torchtitan and the reference trainer run, ``F.cross_entropy(logits.float(), labels)`` over the
head's logits [T, V] in bf16 and in fp32, eager and compiled (torchtitan compiles it with the model:
``CompileConfig.components`` defaults to ["model", "loss"]), each in a fresh process with glibc's mmap threshold
pinned at its static 128 KiB (every tensor above it a mapping of its own, returned when freed: the resident set
counts live tensors, see benchmarks/memory_cpu.py). One step runs first (the compilation and its own memory);
then the kernel's high-water mark is reset (``/proc/self/clear_refs`` 5) and a second step prints the peak
resident set over the forward and through the backward, less the process's before the head's GEMM, per logit.
The head's weight gradient (h x V, h = 256) is under 1% of it.

On this project's 2-core CPU machine (torch 2.13), T = 4096, V = 32768:
- eager: bf16 10.00 B forward, 12.00 B through the backward; fp32 8.0 / 12.0 B. The cost model prices 12 B
  (asap.spec.framework.EAGER_LOGITS_BYTES).
- compiled: bf16 2.02 / 4.00 B; fp32 4.00 / 8.00 B: Inductor keeps a row's max and log-sum-exp, saves the half
  logits and writes their gradient in their own dtype, 2 x the activation bytes (COMPILED_LOGITS_PER_ACT_BYTE).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = """
import sys, torch, torch.nn.functional as F
T, V, dtype, compiled = int(sys.argv[1]), int(sys.argv[2]), getattr(torch, sys.argv[3]), sys.argv[4] == "compiled"
h = torch.randn(T, 256, dtype=dtype)
w = torch.randn(256, V, dtype=dtype, requires_grad=True)
labels = torch.randint(0, V, (T,))
def cross_entropy_loss(pred, labels):
    return F.cross_entropy(pred.float(), labels)
loss_fn = torch.compile(cross_entropy_loss) if compiled else cross_entropy_loss
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
def step():
    pred = h @ w
    loss = loss_fn(pred, labels)
    del pred  # torchtitan's ``del pred``: the loss alone decides whether the half logits stay
    forward = status("VmHWM")
    loss.backward()
    w.grad = None
    return forward
step()  # the compilation and the first step's own allocations
base = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # reset the high-water mark to the resident set now
forward = step()
print((forward - base) / (T * V), (status("VmHWM") - base) / (T * V))
"""


def measure(tokens: int, vocab: int, dtype: str, mode: str) -> tuple[float, float]:
    """(forward, through the backward) peak bytes per logit of one fresh process."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(tokens), str(vocab), dtype, mode], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=32768)
    args = parser.parse_args()
    for mode in ("eager", "compiled"):
        for dtype in ("bfloat16", "float32"):
            forward, backward = measure(args.tokens, args.vocab, dtype, mode)
            print(f"{mode:8s} {dtype:9s} forward {forward:6.2f} B/logit   through the backward {backward:6.2f} B/logit")


if __name__ == "__main__":
    main()
