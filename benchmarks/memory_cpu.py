"""Peak memory the reference trainer and torchtitan measure on this machine's CPU against ``asap estimate``'s.

    PYTHONPATH=src .venv/bin/python benchmarks/memory_cpu.py [--steps 2] [--strategies 'dp=2' 'dp=2,zero=3' ...]
        [--torchtitan 'dp=2,zero=3' ...] [--compile 'dp=2,zero=3' ...] [--glibc-default] [--seq 128]

Each strategy runs ``asap run`` (gloo processes, fp32, the largest rank's peak RSS: what ``peak_memory_gb``
reports on a CPU) on a 68M-parameter dense model (4 layers, h 1024, vocab 8192, 4 x 128 tokens per step), large
enough that its states outweigh the runtime, and ``asap estimate`` prices the same job (``--framework asap``,
``local-cpu``). Prints measured, predicted, the error, and the predicted terms. The runtime's own resident set
(torch, gloo, the Python process: the CPU's fixed allowance in ``asap.cost.device_memory``) is measured first as
the peak of the tiny-dense model, whose tensors are a few MB. Then torchtitan's own trainer runs the same job
(``asap.execute.torchtitan_exec``; ``--torchtitan`` with no strategy skips it), priced with ``--framework
torchtitan`` (``torchtitan_rows``: its larger runtime in place of the reference trainer's).

What peak RSS counts on a CPU beyond the tensors: glibc's malloc, not torch, decides when freed memory goes
back to the OS. Its mmap threshold is dynamic (mallopt(3), M_MMAP_THRESHOLD: after a freed mmapped block the
threshold rises to that block's size, up to 32 MiB), so once a step has freed a few tensors, later tensors of that
size come from the heap, whose freed blocks stay resident (only the top is trimmed): a CPU-only high-water mark
that a GPU run has not (the CUDA caching allocator has its own reserve, ``asap.cost.allocator``; on a CPU none). The
benchmark therefore runs the trainer with the threshold pinned at glibc's static default, 128 KiB
(``MALLOC_MMAP_THRESHOLD_``, which also turns the dynamic adjustment off): every tensor above it is a mapping of its
own, returned when freed, so the peak RSS is the runtime plus the tensors live at the peak, the figure the cost
model prices. ``--glibc-default`` measures with the dynamic threshold instead (the retention shows as the
difference).

On this project's 2-core CPU machine (torch 2.13, gloo), measured (threshold pinned) against predicted:
runtime 0.395 GiB; dp=2 zero 0 1.721 / 1.713 (-0.4%), zero 1 1.467 / 1.459 (-0.5%), zero 2 1.298 / 1.293 (-0.4%),
zero 3 1.215 / 1.197 (-1.5%), tp=2 0.956 / 0.937 (-1.9%), pp=2 0.977 / 0.940 (-3.8%). torchtitan 0.2.2 (runtime
0.560 GiB, +0.160 over the allowance, added to its predictions): dp=2 zero 0 1.900 / 1.873 (-1.4%), zero 2 1.440 /
1.453 (+0.9%), zero 3 1.290 / 1.326 (+2.8%), tp=2 1.130 / 1.141 (+1.0%), pp=2 1.120 / 1.100 (-1.8%); host malloc
holds no allocator reserve (``asap.cost.allocator``: 10% of the transient was priced before, +2.2% on zero 2); before
FSDP2's terms (and its runtime) were priced: -9.8, -14.5, -18.1, -13.1, -14.7%. Since the reference trainer's
workers are forked from one interpreter (``asap.runners.torch.elastic``) their resident set is smaller: runtime
0.353 GiB; dp=2 zero 0 1.678 / 1.713 (+2.1%), zero 1 1.424 / 1.459 (+2.5%), zero 2 1.256 / 1.293 (+2.9%), zero 3
1.173 / 1.197 (+2.0%), tp=2 0.915 / 0.937 (+2.5%), pp=2 0.934 / 0.940 (+0.6%) against the fixed allowance of
0.40 GiB; with the allowance set from it (0.355 GiB): dp=2 zero 0 1.675 / 1.668 (-0.4%), zero 1 1.421 / 1.414
(-0.5%), zero 2 1.249 / 1.248 (-0.1%), zero 3 1.170 / 1.152 (-1.5%), tp=2 0.911 / 0.892 (-2.0%), pp=2 0.931 / 0.895
(-3.9%); torchtitan (runtime 0.560 GiB, +0.205) 1.900 / 1.873 (-1.4%), 1.440 / 1.453 (+0.9%), 1.290 / 1.326
(+2.8%), 1.120 / 1.141 (+1.9%), 1.120 / 1.100 (-1.8%). With eager SwiGLU's fourth saved tensor priced (below):
runtime 0.354 GiB; dp=2 zero 0 1.670 / 1.674 (+0.2%), zero 1 1.420 / 1.420 (-0.0%), zero 2 1.248 / 1.252 (+0.4%),
zero 3 1.170 / 1.156 (-1.1%), tp=2 0.909 / 0.895 (-1.6%), pp=2 0.910 / 0.900 (-1.1%); torchtitan 1.900 / 1.879
(-1.1%), 1.440 / 1.457 (+1.2%), 1.280 / 1.330 (+3.9%), 1.120 / 1.144 (+2.1%), 1.110 / 1.105 (-0.5%).
With ``--seq 2048`` (activations outweigh the states: 0.78 of 2.4 GiB), measured / predicted, once eager SwiGLU's
fourth saved tensor is priced (``layer_ops.mlp_ops``; before it, in brackets): reference trainer dp=2 zero 0 2.243 /
2.406 (+7.2%; +3.5%), zero 1 1.989 / 2.152 (+8.2%; +3.8%), zero 2 1.992 / 1.946 (-2.3%; -6.7%), zero 3 1.778 / 1.850
(+4.0%; -0.8%), zero 1 with full recompute 1.527 / 1.590 (+4.1%; +4.2%), with selective 1.993 / 2.152 (+8.0%;
+3.7%), tp=2 1.445 / 1.379 (-4.6%; -7.4%), pp=2 1.609 / 1.457 (-9.5%; -14.9%, and -18.8% before the trainer stopped
keeping every micro-batch's logits on its last stage, ``return_outputs=False``); torchtitan dp=2 zero 0 2.700 /
2.611 (-3.3%; -6.5%), zero 3 1.980 / 2.024 (+2.2%; -2.1%), tp=2 1.590 / 1.569 (-1.3%; -4.0%), pp=2 1.810 / 1.662
(-8.2%). Every strategy within 10%. What is left is the CPU's composite RMSNorm (benchmarks/saved_activations_cpu.py:
2 h a layer the cost model does not price, as a GPU's fused norm does not save it) against the data-parallel rows'
gradients, which the trainer sets to None each step (the sum prices them live beside every saved tensor).
torchtitan compiled (``--compile``,
``[compile] enable``: the model and its loss, priced with ``--fused-kernels``, the loss at 8 B a logit in fp32 where
eager holds 12): dp=2 zero 0 2.540 / 2.463 (-3.0%), zero 2 2.020 / 2.002 (-0.9%), zero 3 1.840 / 1.876 (+2.0%),
pp=2 1.690 / 1.576 (-6.7%); tp=2 does not run compiled on this CPU (torch 2.13: DTensor's ``_local_tensor``
missing under torch.compile).
With glibc's dynamic threshold the reference trainer's runs peak at 1.845, 1.600, 1.499, 1.401, 1.043 and 1.093 GiB: glibc keeps
0.12 to 0.24 GiB (before this benchmark pinned the threshold and FSDP2's reduce-scatter buffers and unresharded root
were priced: -7.1, -8.8, -17.9, -24.6, -10.9, -13.8% against those).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MODEL = """name: mid-dense
num_layers: 4
hidden_size: 1024
ffn_hidden_size: 2816
num_attention_heads: 8
vocab_size: 8192
"""
STRATEGIES = ("dp=2,zero=0", "dp=2,zero=1", "dp=2,zero=2", "dp=2,zero=3", "tp=2", "pp=2")
# what torchtitan 0.2.2 runs on 2 CPU processes (../shared/frameworks-on-cpu.md): DDP, FSDP2 with and without
# resharding, TP, PP (its zero 1 does not exist)
TORCHTITAN_STRATEGIES = ("dp=2,zero=0", "dp=2,zero=2", "dp=2,zero=3", "tp=2", "pp=2")


# glibc's static default mmap threshold (mallopt(3)); setting it turns the dynamic threshold off
PINNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}


def asap(*args: str, env_extra: dict[str, str] | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), **(env_extra or {})}
    out = subprocess.run([sys.executable, "-c", "import sys; from asap.cli import main; sys.exit(main())", *args, "--json"], capture_output=True, text=True,
                         env=env, timeout=1800)
    if out.returncode:
        raise SystemExit(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"asap {args[0]} failed")
    return json.loads(out.stdout)


def torchtitan_peak_gb(model: str, strategy: str, steps: int, env: dict[str, str], batch: int = 4,
                       seq: int = 128, compiled: bool = False) -> float | str:
    """torchtitan's own trainer on the same job (``asap.execute.torchtitan_exec``: torchrun, gloo, float32
    parameters on CPU): the largest ``memory:`` figure its metrics line printed (on CPU, the rank's peak RSS,
    ``asap.execute.cpu_shims``), or the one-line reason it did not run."""
    from asap.execute.logs import peak_memory_gb
    from asap.execute.torchtitan_exec import TorchtitanExecutor
    from asap.spec.job import Job
    from asap.spec.strategy import resolve_strategy

    job = Job.from_names(model, "local-cpu", batch, seq, "fp32", framework="torchtitan", devices=2,
                         fused_kernels=compiled or None)  # emitted as [compile] enable
    ex = TorchtitanExecutor(job, steps=steps, profile=False, cpu=True)
    ex.env = {**(ex.env or {}), **env}
    s = resolve_strategy(strategy, job.model, job.train, 2, framework=job.framework)
    res = ex.run(s)
    details = getattr(res, "details", {}) or {}
    text = details.get("log_tail") or getattr(res, "log_tail", "") or ""
    peak = peak_memory_gb("torchtitan", text)
    return peak if peak is not None else f"no peak: {getattr(res, 'reason', text[-200:])}"


def torchtitan_rows(model: str, job: list[str], a, env: dict[str, str]) -> None:
    """torchtitan's peaks against ``asap estimate --framework torchtitan``. Its trainer process imports more than
    the reference trainer's (its config, metrics and data modules, ``datasets``, ``tokenizers``): host memory that a
    GPU run does not hold on the device, so its own runtime (the tiny-dense model's peak, measured the same way)
    replaces the reference trainer's in the comparison: predicted + (torchtitan's runtime - the CPU's fixed
    allowance)."""
    from asap.cost.device_memory import FIXED_ALLOWANCE_GB

    runtime = torchtitan_peak_gb("tiny-dense", "dp=2,zero=0", a.steps + 1, env, batch=8, seq=32)
    if isinstance(runtime, str):
        print(f"torchtitan runtime: {runtime}")
        return
    extra = runtime - FIXED_ALLOWANCE_GB["cpu"]
    print(f"torchtitan runtime resident set (tiny-dense, dp=2): {runtime:.3f} GiB (+{extra:.3f} over the allowance)")
    rows = [(s, False) for s in a.torchtitan] + [(s, True) for s in a.compile]
    for s, compiled in rows:
        m = torchtitan_peak_gb(model, s, a.steps + 1, env, seq=a.seq, compiled=compiled)
        est = asap("estimate", *job, "-c", "local-cpu", "--devices", "2", "--framework", "torchtitan",
                   "--precision", "fp32", "-S", s, *(["--fused-kernels"] if compiled else []))
        p = est["peak_memory_gb"] + extra
        terms = " ".join(f"{k} {v:.3f}" for k, v in est["memory_gb"].items())
        shown = f"{m}" if isinstance(m, str) else f"{m:9.3f} {p:9.3f} {p / m - 1:+7.1%}  {terms}"
        label = "torchtitan+compile" if compiled else "torchtitan"
        print(f"{label} {s:14s} {shown}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--strategies", nargs="*", default=list(STRATEGIES))
    ap.add_argument("--glibc-default", action="store_true", help="measure with glibc's dynamic mmap threshold")
    ap.add_argument("--seq", type=int, default=128, help="tokens per sequence (2048: activations outweigh the states)")
    ap.add_argument("--torchtitan", nargs="*", default=list(TORCHTITAN_STRATEGIES),
                    help="strategies to run on torchtitan's trainer too (none: skip it)")
    ap.add_argument("--compile", nargs="*", default=[],
                    help="strategies to run on torchtitan's trainer with [compile] enable (the model and the loss; "
                         "priced with --fused-kernels); 'dp=2,zero=3' takes about 80 s on 2 cores")
    a = ap.parse_args(argv)
    env = {} if a.glibc_default else PINNED_MALLOC
    runtime = asap("run", "-m", "tiny-dense", "-S", "dp=2", "-b", "8", "-s", "32", "--steps", str(a.steps),
                   env_extra=env)
    print(f"runtime resident set (tiny-dense, dp=2): {runtime['peak_memory_gb']:.3f} GiB")
    with tempfile.TemporaryDirectory() as d:
        model = Path(d) / "mid.yaml"
        model.write_text(MODEL)
        job = ["-m", str(model), "-b", "4", "-s", str(a.seq)]
        print(f"{'strategy':14s} {'measured':>9s} {'predicted':>9s} {'error':>7s}  terms (GiB)")
        for s in a.strategies:
            run = asap("run", *job, "-S", s, "--steps", str(a.steps), env_extra=env)
            est = asap("estimate", *job, "-c", "local-cpu", "--devices", "2", "--framework", "asap",
                       "--precision", "fp32", "-S", s)
            m, p = run["peak_memory_gb"], est["peak_memory_gb"]
            terms = " ".join(f"{k} {v:.3f}" for k, v in est["memory_gb"].items())
            print(f"{s:14s} {m:9.3f} {p:9.3f} {p / m - 1:+7.1%}  {terms}", flush=True)
        if a.torchtitan or a.compile:
            torchtitan_rows(str(model), job, a, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
