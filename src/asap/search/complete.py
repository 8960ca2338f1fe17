"""The best completion of a partial strategy: the fastest fitting strategy that keeps the given knobs.

This is what ``plan --fix`` returns first, and what ``validate`` uses where a published run leaves knobs open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asap.cost.estimate import Estimate
from asap.search.planner import plan
from asap.search.nofit import NoFitError
from asap.spec.job import Job


@dataclass
class Completion:
    best: Estimate
    searched: int
    fitting: int


def best_completion(job: Job, fixed: dict[str, Any], allow_oom: bool = False) -> Completion:
    """The planner's first candidate with ``fixed`` pinned; with ``allow_oom``, the fastest overall when no
    completion fits (so validate still prices a run whose published knobs overflow the memory model)."""
    try:
        result = plan(job, fixed=fixed, top=1, split_candidates=0)
    except NoFitError:
        if not allow_oom:
            raise
        result = plan(job, fixed=fixed, top=1, include_oom=True, split_candidates=0, oom_by_memory=False)
    return Completion(best=result.candidates[0], searched=result.searched, fitting=result.fitting)
