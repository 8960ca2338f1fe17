"""Does every published run that trained fit with its published knobs? Per case of the three shared files: the
predicted peak device memory of ``asap validate``'s completion (GiB), the device's usable memory, the host
memory its offload keeps against the host's share, whether it fits, and the largest memory term.

    PYTHONPATH=src .venv/bin/python benchmarks/fits_published.py [--all] [cases.json ...]

Without files: the three shared files (calibration_runs, published_runs_2024_2026, fp4_runs_2025). Prints the cases
predicted not to fit (``--all``: every case) and a count per file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from asap.cost.estimate import estimate
from asap.cost.device_memory import HOST_MEM_USABLE, usable_hbm_gb
from asap.spec.hardware import cluster_from_dict
from asap.spec.job import Job
from asap.spec.model import model_from_dict
from asap.spec.strategy import resolve_strategy
from asap.spec.train import TrainSpec
from asap.validate import load_cases, validate_case

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "reference"
FILES = ("calibration_runs.json", "published_runs_2024_2026.json", "fp4_runs_2025.json")


def case_row(case: dict, i: int) -> dict:
    r = validate_case(case, i)
    model, cluster = model_from_dict(case["model"]), cluster_from_dict(case["cluster"])
    job = Job.resolve(model, cluster, TrainSpec.from_dict(case["train"]))
    s = resolve_strategy(r.strategy, model, job.train, cluster.num_devices, framework=job.framework)
    est = estimate(job, s, classes=False)
    terms = {k: v for k, v in est.memory_gb.items() if k not in ("allocated",)}
    dominant = max(terms, key=terms.get)
    acc = cluster.accelerator
    return {"id": r.id, "peak_gb": r.peak_memory_gb, "device_gb": usable_hbm_gb(acc, job.train),
            "host_gb": est.host_memory_gb, "host_cap_gb": HOST_MEM_USABLE * acc.host_mem_capacity_gb,
            "fits": r.fits, "dominant": f"{dominant} {terms[dominant]:.1f}", "error": r.error,
            "strategy": s}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--all", action="store_true", help="print every case, not only those that do not fit")
    a = ap.parse_args(argv)
    files = a.files or [str(SHARED / f) for f in FILES]
    for path in files:
        rows = [case_row(c, i) for i, c in enumerate(load_cases(path))]
        print(f"{Path(path).name}: {sum(not r['fits'] for r in rows)} of {len(rows)} predicted not to fit")
        print(f"  {'case':46s} {'peak':>7s} {'device':>7s} {'host':>7s} {'of':>6s} fits  largest term (GiB)")
        for r in rows:
            if a.all or not r["fits"]:
                print(f"  {r['id'][:46]:46s} {r['peak_gb']:7.1f} {r['device_gb']:7.1f} {r['host_gb']:7.1f} "
                      f"{r['host_cap_gb']:6.0f} {'yes' if r['fits'] else 'NO ':4s}  {r['dominant']}"
                      f"  [{r['strategy']}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
