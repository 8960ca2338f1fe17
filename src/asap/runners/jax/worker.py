"""The child process of a JAX run: ``python -m asap.runners.jax.worker --config FILE``.

The parent (``asap.runners.jax.launch``) sets XLA_FLAGS (the virtual CPU device count) before this process imports
JAX. FILE is JSON ``{"out_dir": DIR, "jobs": [job, ...]}``, a job ``{model (native mapping), strategy (every key),
global_batch, seq_len, steps, precision, seed, data, lr, profile_dir}``; the jobs run one after the other in
this process (tests share one child between meshes). Each writes ``job{j}.json``; an exception writes
``error_job{j}.txt`` (``kind<TAB>one-line reason``) and the process exits non-zero.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from asap.spec.loader import load_model
from asap.spec.strategy import Strategy, parse_strategy

STEP_LINE = "[asap.jaxrun] step "


def log(msg: str) -> None:
    print(f"[asap.jaxrun] {msg}", file=sys.stderr, flush=True)


def run_one(job: dict) -> dict:
    from asap.runners.jax.train import run_job

    spec = load_model(job["model"])
    s = Strategy(**parse_strategy(job["strategy"], "job.strategy"))
    return run_job(spec, s, int(job["global_batch"]), int(job["seq_len"]), int(job["steps"]),
                   precision=job.get("precision", "fp32"), seed=int(job.get("seed", 0)), lr=float(job.get("lr", 1e-3)),
                   data=job.get("data"), profile_dir=job.get("profile_dir"), log=log)


def _error_kind(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".lower()
    return "oom" if "out of memory" in text or "resource_exhausted" in text else "crash"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="asap.runners.jax.worker")
    ap.add_argument("--config", required=True)
    args = ap.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text())
    out = Path(cfg["out_dir"])
    for j, job in enumerate(cfg["jobs"]):
        log(f"job {j + 1}/{len(cfg['jobs'])}: {job['strategy']}")
        try:
            res = run_one(job)
        except BaseException as e:  # noqa: BLE001 - every failure goes to the launcher as one line
            line = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            (out / f"error_job{j}.txt").write_text(f"{_error_kind(e)}\t{line}\n{traceback.format_exc()}")
            traceback.print_exc()
            return 1
        (out / f"job{j}.json").write_text(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
