"""Profile analysis: read PyTorch (Kineto) and JAX profiler traces and name the bottleneck.

    from asap.profile import diagnose
    d = diagnose(["rank0.json.gz", "rank1.json.gz"])
    d.bottleneck, d.step_time_s, d.to_dict()
"""

from asap.profile.diagnose import Diagnosis, diagnose
from asap.spec.words import BOTTLENECKS

__all__ = ["BOTTLENECKS", "Diagnosis", "diagnose"]
