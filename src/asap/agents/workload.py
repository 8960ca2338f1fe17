"""What identifies a tuning job: its record in Memory (to find similar experiments) and the ``asap estimate``
flags that rebuild it (every figure a proposal shows can be reproduced with them)."""

from __future__ import annotations

from typing import Any

from asap.spec.job import Job


def job_arguments(job: Job) -> str:
    """The ``asap estimate`` flags that rebuild this job from presets (the CLI passes the user's own)."""
    model, cluster, train = job.model, job.cluster, job.train
    args = [f"-m {model.name}", f"-c {cluster.accelerator.name}", f"--devices {cluster.num_devices}",
            f"-b {train.global_batch}", f"-s {train.seq_len}", f"--precision {train.precision}"]
    if train.framework:
        args.append(f"--framework {train.framework}")
    if train.moe_imbalance != 1.0:
        args.append(f"--moe-imbalance {train.moe_imbalance:g}")
    return " ".join(args)


def workload_record(job: Job) -> dict[str, Any]:
    """What identifies a tuning job in Memory: the model, the cluster and the batch."""
    model, cluster, train = job.model, job.cluster, job.train
    return {"model": model.name, "model_family": model.name.split("-")[0].lower(), "params": model.num_params(),
            "accelerator": cluster.accelerator.name, "family": cluster.accelerator.family,
            "devices": cluster.num_devices, "global_batch": train.global_batch, "seq_len": train.seq_len,
            "precision": train.precision, "framework": train.framework or ""}
