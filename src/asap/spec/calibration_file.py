"""A calibrated cluster file's ``measured`` block (``asap calibrate`` writes it, ``asap.spec.hardware.load_cluster``
reads it): its checks at load, and which of a cluster's figures it measured."""

from __future__ import annotations

import math
from typing import Any

from asap.errors import AsapError

# Refused when loaded, always (a corrupt file): a ``measured`` that is not a mapping; a missing or ill-typed
# ``date`` (ISO 8601), ``versions`` (a mapping of names to version strings) or ``machine`` (a mapping with a
# non-empty ``hostname``); a ``format`` other than asap-calibration/1; sections of the wrong shape (``gemm`` and
# ``collectives`` lists of mappings; ``memory``, ``host``, ``fitted``, ``noise`` mappings; ``warnings`` and
# ``not_measured`` lists of strings); any number in the block that is not finite and non-negative. Refused only
# on request (``asap.calibrate.check.check_calibration_file``): a file made on another machine (pricing another machine from its
# calibration is legitimate; running on this one with it is not).

CALIBRATION_FORMATS = ("asap-calibration/1",)
_MEASURED_LISTS = ("gemm", "collectives")
_MEASURED_MAPPINGS = ("memory", "host", "fitted", "noise", "model_median_abs_rel_error")
_MAX_MEASURED_DEPTH = 12


def validate_measured(m: Any, field_name: str = "cluster.measured") -> dict[str, Any]:
    """A calibration file's ``measured`` block, checked (one AsapError naming the field otherwise); the date
    comes back as an ISO string whichever way YAML parsed it."""
    import datetime as _dt

    if not isinstance(m, dict):
        raise AsapError(field_name, f"must be a mapping (a calibration's measurements), got {type(m).__name__}")
    fmt = m.get("format")
    if fmt is not None and fmt not in CALIBRATION_FORMATS:
        raise AsapError(f"{field_name}.format", f"{fmt!r} is not an asap calibration (known: "
                                                f"{', '.join(CALIBRATION_FORMATS)})")
    for key in ("date", "versions", "machine"):
        if m.get(key) is None:
            raise AsapError(f"{field_name}.{key}", "missing: a calibration file records its date, versions and machine")
    date = m["date"]
    if isinstance(date, _dt.datetime) or isinstance(date, _dt.date):
        date = date.isoformat()
    elif isinstance(date, str):
        try:
            _dt.datetime.fromisoformat(date.strip())
        except ValueError:
            raise AsapError(f"{field_name}.date", f"must be an ISO 8601 date, got {date!r}") from None
    else:
        raise AsapError(f"{field_name}.date", f"must be an ISO 8601 date, got {date!r}")
    versions = m["versions"]
    if not isinstance(versions, dict) or not versions:
        raise AsapError(f"{field_name}.versions", "must be a mapping of package names to versions")
    for k, v in versions.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (str, int, float))):
            raise AsapError(f"{field_name}.versions.{k}", f"must be a version string, got {v!r}")
    machine = m["machine"]
    if not isinstance(machine, dict):
        raise AsapError(f"{field_name}.machine", f"must be a mapping (hostname, platform, ...), got "
                                                 f"{type(machine).__name__}")
    if not isinstance(machine.get("hostname"), str) or not machine["hostname"].strip():
        raise AsapError(f"{field_name}.machine.hostname", "missing: the machine the calibration was made on")
    for key in _MEASURED_LISTS:
        if m.get(key) is not None:
            if not isinstance(m[key], list) or not all(isinstance(x, dict) for x in m[key]):
                raise AsapError(f"{field_name}.{key}", "must be a list of mappings")
    for key in ("warnings", "not_measured"):
        if m.get(key) is not None:
            if not isinstance(m[key], list) or not all(isinstance(x, str) for x in m[key]):
                raise AsapError(f"{field_name}.{key}", "must be a list of strings")
    for key in _MEASURED_MAPPINGS:
        if m.get(key) is not None and not isinstance(m[key], dict):
            raise AsapError(f"{field_name}.{key}", f"must be a mapping, got {type(m[key]).__name__}")
    _check_numbers(m, field_name, 0)
    out = dict(m)
    out["date"] = date
    return out


def _check_numbers(obj: Any, where: str, depth: int) -> None:
    if depth > _MAX_MEASURED_DEPTH:
        raise AsapError(where, "nested too deeply")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_numbers(v, f"{where}.{k}", depth + 1)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_numbers(v, f"{where}[{i}]", depth + 1)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        if not math.isfinite(obj) or obj < 0:
            raise AsapError(where, f"must be a finite, non-negative number, got {obj!r}")


def figures_provenance(cluster: Any) -> dict[str, Any]:
    """Which of a cluster's figures were measured on the machine (``asap calibrate``) and which are the
    catalog's (datasheet peaks and the family's fitted constants)."""
    m = cluster.measured
    if m is None:
        return {"source": "catalog", "measured": [],
                "catalog": ["every figure: " + (cluster.accelerator.source or cluster.accelerator.name)]}
    measured = sorted(m.get("fitted", {})) + (["collectives by group size"] if m.get("collectives") else [])
    return {"source": "calibration", "date": m.get("date"), "machine": (m.get("machine") or {}).get("hostname"),
            "processes": m.get("processes"), "measured": measured, "catalog": list(m.get("not_measured", []))}
