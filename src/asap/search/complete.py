"""The best completion of a partial strategy: the fastest fitting strategy that keeps the given knobs.

This is what ``plan --fix`` returns first, and what ``validate`` uses where a published run leaves knobs open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from asap.cost.estimate import BatchEstimate, Estimate, estimate_batch, estimate_from_batch
from asap.errors import AsapError
from asap.search.space import enumerate_space
from asap.spec.hardware import Cluster
from asap.spec.model import ModelSpec
from asap.spec.train import TrainSpec


@dataclass
class Completion:
    best: Estimate
    searched: int
    fitting: int


def best_completion(model: ModelSpec, cluster: Cluster, train: TrainSpec, fixed: dict[str, Any],
                    allow_oom: bool = False) -> Completion:
    S = enumerate_space(model, cluster.num_devices, cluster.devices_per_node, train, fixed)
    if len(S) == 0:
        raise AsapError("fix", f"no legal strategy keeps {fixed} for {model.name} on {cluster.num_devices} devices "
                               f"with global batch {train.global_batch}")
    be: BatchEstimate = estimate_batch(model, cluster, train, S)
    step = np.where(be.fits, be.step_time_s, np.inf)
    n_fit = int(be.fits.sum())
    if n_fit == 0:
        if not allow_oom:
            i = int(np.argmin(be.peak_memory_gb))
            raise AsapError("fix", f"no completion of {fixed} fits in {cluster.hbm_gb:g} GB per device; the smallest "
                                   f"needs {be.peak_memory_gb[i]:.1f} GB ({S.strategy(i)})")
        step = be.step_time_s
    i = int(np.argmin(step))
    return Completion(best=estimate_from_batch(model, cluster, train, S, be, i), searched=len(S), fitting=n_fit)
