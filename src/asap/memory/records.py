"""What goes into the Sharding Memory and how it is spelled there: workloads under their canonical field names
and their ``workload_key``, strategies in their canonical string, and the JSON/time/number conversions of the
stored columns."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, RootModel, field_validator

from asap.errors import AsapError, validated

# the fields that identify a workload (two runs with the same values are the same experiment)
KEY_FIELDS = ("model", "accelerator", "devices", "global_batch", "seq_len", "precision", "framework")
# every workload field the memory knows (others are kept as given)
WORKLOAD_FIELDS = ("model", "model_family", "params", "accelerator", "accelerator_family", "devices",
                   "global_batch", "seq_len", "precision", "framework")
_ALIASES = {"family": "accelerator_family", "params_count": "params", "num_params": "params",
            "parameters": "params", "model_params": "params"}
_INT_FIELDS = ("devices", "global_batch", "seq_len")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _dumps(obj: Any, field: str) -> str | None:
    if obj is None:
        return None
    try:
        return json.dumps(obj, sort_keys=True, allow_nan=False, default=_json_default)
    except (TypeError, ValueError) as e:
        raise AsapError(field, f"is not JSON-serialisable ({e})") from None


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return obj.item()
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        return obj.to_dict()
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class _Seconds(RootModel[Any]):
    """A stored time: a number of seconds, ``None`` when absent or not finite."""

    @field_validator("root", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> float | None:
        if v is None:
            return None
        try:
            f = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"must be a number of seconds, got {v!r}") from None
        return f if math.isfinite(f) else None


def _float_or_none(v: Any, field: str) -> float | None:
    return validated(_Seconds, v, whole=field).root


class _WorkloadFields(BaseModel):
    """A workload's typed fields (counts as integers, the parameter count a number, names as text); any other
    field is kept as given."""

    model_config = ConfigDict(extra="allow")

    devices: Any = None
    global_batch: Any = None
    seq_len: Any = None
    params: Any = None

    @field_validator(*_INT_FIELDS, mode="before")
    @classmethod
    def _count(cls, v: Any) -> int | None:
        try:
            return None if v is None else int(v)
        except (TypeError, ValueError):
            raise ValueError(f"must be an integer, got {v!r}") from None

    @field_validator("params", mode="before")
    @classmethod
    def _params(cls, v: Any) -> int | float | None:
        if v is None:
            return None
        try:
            p = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"must be a number, got {v!r}") from None
        return int(p) if p.is_integer() else p


_TEXT_FIELDS = ("model", "model_family", "accelerator", "accelerator_family", "precision", "framework")


def normalize_workload(workload: dict) -> dict:
    """The workload with its fields under their canonical names (``family`` -> ``accelerator_family``,
    ``params_count``/``num_params`` -> ``params``) and counts as integers; other fields are kept as given."""
    if not isinstance(workload, dict):
        raise AsapError("workload", f"must be a mapping, got {type(workload).__name__}")
    out: dict[str, Any] = {}
    for k, v in workload.items():
        key = _ALIASES.get(str(k), str(k))
        if key in out and k != key:
            continue  # the canonical name wins over an alias
        out[key] = v
    typed = validated(_WorkloadFields, out, where="workload.")
    for k in (*_INT_FIELDS, "params"):
        if out.get(k) is not None:
            out[k] = getattr(typed, k)
    for k in _TEXT_FIELDS:
        if out.get(k) is not None:
            out[k] = str(out[k])
    return out


def workload_key(workload: dict) -> str:
    """A stable key for a workload: the sorted JSON of its identifying fields (model, accelerator, devices,
    global_batch, seq_len, precision, framework; a missing one is null; and ``machine`` when the trials are
    measured somewhere other than the named cluster: the same strategy measured on two sim machines is two
    trials)."""
    w = normalize_workload(workload)
    key = {k: w.get(k) for k in KEY_FIELDS}
    if w.get("machine"):  # where trials are measured, when it is not the cluster itself (the sim's machine file)
        key["machine"] = w["machine"]
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def canonical_strategy(strategy: str | dict) -> tuple[str, dict]:
    """``(strategy_string, strategy_dict)`` of text or a mapping (Memory's edge; a ``Strategy`` is stored as
    ``Strategy.key()``, the same text): the keys given, parsed and typed, sorted by name, so that ``"tp=2,dp=4"``
    and ``"dp=4,tp=2"`` are the same string. Not completed (that needs the device count): a strategy spelled
    with every key is a different string from the same one spelled with only a few."""
    from asap.spec.layout import format_layer_split
    from asap.spec.strategy import canonical_text, parse_strategy

    parsed = parse_strategy(strategy)
    d = {k: format_layer_split(v) if k == "layer_split" else v for k, v in sorted(parsed.items())}
    return canonical_text(parsed), d
