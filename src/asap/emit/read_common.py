"""What the format readers of ``asap.emit.read`` share: their findings (``Parsed``), the one-line refusal of a key
they cannot map, typed values and the check of a model given beside a file that states one."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from asap.errors import AsapError
from asap.spec.model import ModelSpec


@dataclass(frozen=True)
class Parsed:
    """What a format reader found, before the job is assembled: the strategy keys it read (asap's spelling), the
    device count the file fixes (0: none), nodes / devices per node a launcher states."""

    model: ModelSpec
    global_batch: int
    seq_len: int
    precision: str
    strategy: dict[str, Any]
    devices: int = 0
    nodes: int | None = None
    devices_per_node: int | None = None
    dp: int | None = None  # a data-parallel size the file states without the device count (DeepSpeed's batch)
    fused: bool | None = None  # kernels fused by a compiler the file switches on or off (torchtitan [compile])
    compiled_loss: bool | None = None  # the loss compiled, where the file says apart from the kernels


def refuse_key(fmt: str, key: str, problem: str = "") -> AsapError:
    """The one-line refusal of a key a reader cannot map."""
    return AsapError(key, problem or f"asap cannot read this {fmt} key (docs/read.md lists the keys each reader "
                                     "maps and the ones it skips)")


def positive_int(value: Any, key: str) -> int:
    """``value`` as a positive integer (a float with no fraction allowed), or the one-line error naming ``key``."""
    try:
        v = float(value) if not isinstance(value, int) or isinstance(value, bool) else value
        if isinstance(value, bool) or v != int(v) or int(v) < 1:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise AsapError(key, f"must be a positive integer, got {value!r}") from None
    return int(v)


def number(value: Any, key: str) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        raise AsapError(key, f"must be a number, got {value!r}") from None


def check_model_given(stated: ModelSpec, given: ModelSpec | None) -> ModelSpec:
    """The model the file states; a ``given`` model is accepted only if it is the same (same fields, any name)."""
    if given is None:
        return stated
    if replace(given, name=stated.name) != stated:
        raise AsapError("model", f"the config describes a different model than {given.name}")
    return given
