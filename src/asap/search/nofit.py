"""What refused every strategy of a plan, in one line (``NoFitError``): the host's memory, the device's (with
the headroom kept below it), and the pinned knobs that, left open one at a time, would let a strategy fit."""

from __future__ import annotations

from typing import Any, Callable

from asap.cost.device_memory import HOST_MEM_USABLE, usable_hbm_gb
from asap.errors import AsapError
from asap.spec.job import Job
from asap.spec.strategy import format_compact


class NoFitError(AsapError):
    """Legal strategies exist, but none fits in device memory."""


def headroom_note(acc, train) -> str:
    """What a limit below the device memory is, for a message (empty without a margin)."""
    if not train.memory_margin_gb:
        return ""
    return (f" (the device's {acc.usable_hbm_gb:.4g} less {train.memory_margin_gb:.3g} GiB of headroom; "
            "--memory-margin sets it)")


def no_fit_error(job: Job, fixed: dict[str, Any], search, replan: Callable | None) -> NoFitError:
    """The one line that says what refused every strategy: the host's memory where some fit the device but
    keep more than the host's share in host memory (``asap.cost.device_memory.fits_memory``), else the device's, and
    with ``replan`` (the planner, ``asap.search.planner.plan``) the pinned knobs without which one would fit
    (``pinned_culprits``). ``search`` is the planner's ``Search``."""
    model, cluster, train, fw = job.model, job.cluster, job.train, job.framework
    acc = cluster.accelerator
    cut = " before the time limit" if search.priced < search.space else ""

    def spelled(s) -> str:
        return format_compact(s, cluster.num_devices, model.moe is not None, fw)

    if search.device_fitting:
        host_gb, _, s = search.least_host
        what = (f"no strategy fits the host memory: {search.device_fitting} fit in "
                f"{usable_hbm_gb(acc, train):.4g} GiB per device only by offloading, and the least keeps "
                f"{host_gb:.1f} GiB per device in host memory, over the host's {HOST_MEM_USABLE * acc.host_mem_capacity_gb:.4g} "
                f"GiB ({HOST_MEM_USABLE:.0%} of host_mem_capacity_gb={acc.host_mem_capacity_gb:g}) ({spelled(s)})")
    else:
        what = (f"no strategy fits in {usable_hbm_gb(acc, train):.4g} GiB per device{headroom_note(acc, train)} "
                f"(searched {search.priced}{cut}); "
                f"the smallest needs {search.smallest[0]:.1f} GiB reserved ({spelled(search.smallest[2])})")
    culprits = pinned_culprits(job, fixed, replan) if replan and fixed else []
    if culprits:
        which = culprits[0] if len(culprits) == 1 else f"any one of {', '.join(culprits)}"
        what += f"; one would fit with the pinned {which} left open"
    return NoFitError("fix" if fixed else "cluster", what)


BLAME_TIME_LIMIT_S = 10.0  # the planner's search per released knob when a no-fit names the pinned culprits


def pinned_culprits(job: Job, fixed: dict[str, Any], replan: Callable) -> list[str]:
    """The pinned knobs (``key=value``) each of which, left open alone, lets some strategy fit."""
    out = []
    for key in sorted(fixed):
        rest = {k: v for k, v in fixed.items() if k != key}
        try:
            replan(job, fixed=rest, top=1, split_candidates=0, time_limit_s=BLAME_TIME_LIMIT_S, blame=False)
        except AsapError:
            continue
        out.append(f"{key}={fixed[key]}")
    return out
