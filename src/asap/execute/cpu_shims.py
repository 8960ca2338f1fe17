"""CPU-only shims for running a GPU training stack on this machine's CPU processes (gloo), and nothing else.

Only the local CPU launchers (``asap.execute.launchers.*`` with ``--asap-cpu``) import this module; a GPU run
never does. What each shim stands in for:

* the device type: torchtitan picks ``torch._utils._get_available_device_type() or "cuda"``; on a CPU-only
  machine that is "cuda", so the device type is made "cpu" before torchtitan is imported;
* memory statistics: torchtitan's ``DeviceMemoryMonitor`` calls ``get_device_name``, ``get_device_properties``
  (``total_memory``), ``memory_stats``, ``reset_peak_memory_stats`` and ``empty_cache`` on the device module,
  which ``torch.cpu`` lacks; here they report the host's memory and the process's peak RSS;
* SUM instead of PREMUL_SUM/AVG: FSDP2 reduce-scatters gradients with ``ReduceOp.AVG`` or ``PREMUL_SUM``, which
  gloo does not implement; ``force_sum_reduction_for_comms`` makes it SUM and divide afterwards (the same
  numbers, as on MTIA);
* profiler activities: torchtitan passes ``[CPU, None]`` to ``torch.profiler.profile`` when there is no GPU;
  the None is dropped;
* ``barrier(device_ids=[...])``: an NCCL-only argument (torchtitan passes ``torch.cpu.current_device()``, the
  string "cpu", when it resets the process groups' timeouts); gloo's barrier takes none;
* DeepSpeed's compiled ops: on the CPU accelerator, ``deepspeed.init_distributed`` JIT-compiles a shared-memory
  allreduce (``deepspeed/comm/torch.py``, ``build_shm_op``) with g++ against the torch headers: minutes on a
  fresh machine, and a build killed half-way leaves a lock (``~/.cache/torch_extensions``) every later run waits
  on for ever. asap's launcher uses gloo's collectives and torch's AdamW, so no DeepSpeed op is needed: every op
  is declared incompatible before the first is probed (``deepspeed.ops.__compatible_ops__``).
"""

from __future__ import annotations

import os
import resource
from types import SimpleNamespace


def _host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def patch_device_type() -> None:
    """Make "cpu" the available device type (before torchtitan reads it at import)."""
    import torch._utils

    torch._utils._get_available_device_type = lambda: "cpu"


def patch_cpu_memory_stats() -> None:
    """Give ``torch.cpu`` the memory-statistics functions a GPU stack calls on its device module."""
    import torch

    cpu = torch.cpu
    defaults = {
        "get_device_name": lambda device=None: "cpu",
        "get_device_properties": lambda device=None: SimpleNamespace(total_memory=_host_memory_bytes(), name="cpu"),
        "memory_stats": lambda device=None: {"active_bytes.all.peak": _peak_rss_bytes(),
                                             "reserved_bytes.all.peak": _peak_rss_bytes(),
                                             "num_alloc_retries": 0, "num_ooms": 0},
        "reset_peak_memory_stats": lambda device=None: None,
        "empty_cache": lambda: None,
        "max_memory_allocated": lambda device=None: _peak_rss_bytes(),
        "memory_allocated": lambda device=None: _peak_rss_bytes(),
    }
    for name, fn in defaults.items():
        if not hasattr(cpu, name):
            setattr(cpu, name, fn)


def patch_fsdp_sum_reduction() -> None:
    """FSDP2 gradient reduction with SUM then a division (gloo has no AVG or PREMUL_SUM)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as coll

    original = coll._get_gradient_divide_factors
    if getattr(original, "_asap_cpu_shim", False):
        return

    def sum_only(*args, **kwargs):
        kwargs["force_sum_reduction_for_comms"] = True
        if len(args) > 5:
            args = args[:5]
        return original(*args, **kwargs)

    vars(sum_only)["_asap_cpu_shim"] = True  # a function attribute: the mark that the shim is installed
    coll._get_gradient_divide_factors = sum_only


def patch_profiler_activities() -> None:
    """``torch.profiler.profile(activities=[CPU, None])`` -> ``[CPU]``."""
    import torch.profiler as tp

    base = tp.profile
    if getattr(base, "_asap_cpu_shim", False):
        return

    class profile(tp.profile):  # noqa: N801 - the name torchtitan calls
        _asap_cpu_shim = True

        def __init__(self, *args, activities=None, **kwargs):
            if activities is not None:
                activities = [a for a in activities if a is not None]
            super().__init__(*args, activities=activities, **kwargs)

    tp.profile = profile  # type: ignore[misc]  # monkeypatching torch's class: mypy forbids assigning to a type


def patch_gloo_barrier() -> None:
    """``torch.distributed.barrier(device_ids=...)`` without the NCCL-only ``device_ids``."""
    import torch.distributed as dist

    base = dist.barrier
    if getattr(base, "_asap_cpu_shim", False):
        return

    def barrier(*args, device_ids=None, **kwargs):
        return base(*args, **kwargs)

    vars(barrier)["_asap_cpu_shim"] = True
    dist.barrier = barrier


def patch_deepspeed_no_compiled_ops() -> None:
    """No DeepSpeed op is JIT-built: ``deepspeed.ops.__compatible_ops__`` answers False for every op (its probe
    is never run); gloo's collectives stand in for the shared-memory allreduce."""
    from collections import defaultdict

    import deepspeed.ops

    deepspeed.ops.__compatible_ops__ = defaultdict(bool)


def apply_all() -> None:
    patch_device_type()
    patch_gloo_barrier()
    patch_profiler_activities()
    patch_cpu_memory_stats()
    patch_fsdp_sum_reduction()
