"""Profile analysis: read PyTorch (Kineto) and JAX profiler traces and name the bottleneck.

    from asap.profile import diagnose
    d = diagnose(["rank0.json.gz", "rank1.json.gz"])
    d.bottleneck, d.step_time_s, d.to_dict()
"""

from asap.profile.diagnose import BOTTLENECKS, Diagnosis, diagnose

__all__ = ["BOTTLENECKS", "Diagnosis", "diagnose"]
