"""Bytes per logit the eager PyTorch loss holds, measured on this machine's CPU (``EAGER_LOGITS_BYTES``).

    PYTHONPATH=src .venv/bin/python benchmarks/loss_memory_cpu.py [--tokens 4096] [--vocab 32768]

Runs the loss torchtitan and the reference trainer run, ``F.cross_entropy(logits.float(), labels)`` over the
head's logits [T, V] in bf16 and in fp32, each in a fresh process with glibc's mmap threshold pinned at its static
128 KiB (every tensor above it a mapping of its own, returned when freed: the peak RSS counts live tensors, see
benchmarks/memory_cpu.py), and prints the peak resident set over the forward and through the backward, less the
process's before the head's GEMM, per logit. The head's weight gradient (h x V, h = 256) is under 1% of it.

On this project's 2-core CPU machine (torch 2.13), T = 4096, V = 32768: bf16 10.04 B forward, 12.05 B through the
backward; fp32 8.09 / 12.10 B. The cost model prices 12 B (asap.spec.framework.EAGER_LOGITS_BYTES).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = """
import resource, sys, torch, torch.nn.functional as F
T, V, dtype = int(sys.argv[1]), int(sys.argv[2]), getattr(torch, sys.argv[3])
h = torch.randn(T, 256, dtype=dtype)
w = torch.randn(256, V, dtype=dtype, requires_grad=True)
labels = torch.randint(0, V, (T,))
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
base = rss()
logits = h @ w
loss = F.cross_entropy(logits.float(), labels)
del logits  # torchtitan's ``del pred``: the half logits are not held through the backward
forward = rss()
loss.backward()
print((forward - base) / (T * V), (rss() - base) / (T * V))
"""


def measure(tokens: int, vocab: int, dtype: str) -> tuple[float, float]:
    """(forward, through the backward) peak bytes per logit of one fresh process."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(tokens), str(vocab), dtype], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=32768)
    args = parser.parse_args()
    for dtype in ("bfloat16", "float32"):
        forward, backward = measure(args.tokens, args.vocab, dtype)
        print(f"{dtype:9s} forward {forward:6.2f} B/logit   through the backward {backward:6.2f} B/logit")


if __name__ == "__main__":
    main()
