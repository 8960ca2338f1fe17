"""Whether a calibration file is this machine's (``asap calibrate --check``, the executors' own calibration):
the machine's identity as a calibration records it, and the check against it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from asap.errors import AsapError
from asap.spec.hardware import Cluster, load_cluster


def machine_identity() -> dict[str, Any]:
    """What names this machine in a calibration file: hostname, platform, CPU count and model."""
    import os
    import platform
    import socket

    processor = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):  # no /proc (not Linux): platform's name stands
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                processor = line.split(":", 1)[1].strip()
                break
    ident: dict[str, Any] = {"hostname": socket.gethostname(), "platform": platform.platform(),
                             "cpu_count": os.cpu_count() or 1, "processor": processor}
    with contextlib.suppress(ValueError, OSError, AttributeError):  # no sysconf: memory is not recorded
        ident["memory_gb"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1)
    return ident


def check_calibration_file(cluster: "str | dict | Cluster", this_machine: bool = True) -> dict[str, Any]:
    """Refuse, with one AsapError line, a cluster that is not a calibration (no ``measured`` block) or, with
    ``this_machine``, one made on another machine (another hostname or CPU count). Returns the calibration's
    date, machine and versions, and ``warnings`` (e.g. another asap version than this one) that do not refuse."""
    c = cluster if isinstance(cluster, Cluster) else load_cluster(cluster)
    m = c.measured
    if m is None:
        raise AsapError("cluster.measured", f"missing: {c.name or c.accelerator.name} is not a calibration file "
                                            "(make one with asap calibrate)")
    here = machine_identity()
    there = m["machine"]
    if this_machine:
        if there.get("hostname") != here["hostname"]:
            raise AsapError("cluster.measured.machine.hostname",
                            f"calibrated on {there.get('hostname')!r}, this machine is {here['hostname']!r}: a "
                            "foreign calibration (rerun asap calibrate here)")
        if there.get("cpu_count") is not None and there.get("cpu_count") != here["cpu_count"]:
            raise AsapError("cluster.measured.machine.cpu_count",
                            f"calibrated with {there.get('cpu_count')} CPUs, this machine has {here['cpu_count']}: "
                            "a foreign calibration (rerun asap calibrate here)")
    warnings = []
    from asap.version import __version__

    if m["versions"].get("asap") not in (None, __version__):
        warnings.append(f"made by asap {m['versions'].get('asap')}, this is asap {__version__}")
    return {"date": m["date"], "machine": dict(there), "versions": dict(m["versions"]), "this_machine": this_machine,
            "warnings": warnings}
