"""The shared vocabulary (design.md, "Words"): what the cost model's estimate and the trace diagnosis call a
bottleneck. One table for both, so a predicted and a measured verdict compare."""

from __future__ import annotations

from enum import Enum


class Bottleneck(str, Enum):
    COMPUTE = "compute"  # matrix units busy
    MEMORY = "memory"  # HBM/DRAM bandwidth: low arithmetic intensity
    COMMUNICATION = "communication"  # exposed collectives or point-to-point
    HOST = "host"  # the device idles: launch, input, Python
    PIPELINE_BUBBLE = "pipeline_bubble"
    IMBALANCE = "imbalance"  # ranks or stages wait on the slowest

    def __str__(self) -> str:
        return self.value


BOTTLENECKS = tuple(b.value for b in Bottleneck)
