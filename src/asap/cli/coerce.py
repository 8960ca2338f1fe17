"""Typer's coercion of an option's value, without Pydantic for the values a plain ``str``, ``bool``, ``int`` or
``float`` option takes.

Typer (0.2x) turns every given or default value into the parameter's type through a Pydantic ``TypeAdapter``,
built the first time a parameter sees a value: importing Pydantic and building the adapters was about a third
of a small ``asap estimate`` (0.1-0.2 s of CPU). ``install`` makes Typer build its adapter only for a value
the fast path here does not take:

    str    a ``str`` as it is (Typer's adapter: ``str(value)``)
    bool   a ``bool`` as it is (a flag left unset, None, never reaches the adapter either)
    int    an ``int`` (not a bool), or a ``str`` of decimal digits with an optional ``-`` and no leading zero,
           at most 18 digits: ``int(text)``
    float  a ``float``, an ``int`` (``float(value)``, as Pydantic's lax mode does), or a ``str`` of plain
           decimal notation (``-?digits[.digits][e[+-]dd]``): ``float(text)``, the correctly rounded double
           Pydantic's parser gives too

and, for an option with ``min``/``max`` (not ``clamp``), only when the number is inside them. Any other value
(a list, a path, a choice, a string with spaces or underscores, a number out of range, ...) goes to Typer's own
adapter, so its result and its error message are Typer's. tests/cli/test_cli_coerce.py holds the fast path's
results equal to the adapter's on the edge cases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_INT_TEXT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT_TEXT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]{1,2})?")
MISSING = object()  # the fast path does not take this value: Typer's adapter decides


def plain_value(annotation: Any, value: Any, low: float | None = None, high: float | None = None) -> Any:
    """``value`` as Typer's adapter for ``annotation`` returns it, where the fast path takes it; else
    ``MISSING``."""
    kind = type(value)
    number: float | None = None
    if annotation is str:
        return value if kind is str else MISSING
    if annotation is bool:
        return value if kind is bool else MISSING
    if annotation is int:
        if kind is int or (kind is str and _INT_TEXT.fullmatch(value)):
            number = int(value)
    elif annotation is float:
        if kind is float or kind is int or (kind is str and _FLOAT_TEXT.fullmatch(value)):
            number = float(value)
    else:
        return MISSING
    if number is None or (low is not None and not number >= low) or (high is not None and not number <= high):
        return MISSING
    return number


def install() -> None:
    """Make Typer's parameters coerce plain values here, building their Pydantic adapter only for a value the
    fast path does not take (once; a Typer without this coercion layer is left as it is)."""
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer.core import _TyperParameter
    except ImportError:  # an older or newer Typer: its own coercion, unchanged
        return
    if getattr(_TyperParameter.get_runtime_param, "_asap_plain", False):
        return

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):
        """Plain values coerced by ``plain_value``; the rest by the runtime parameter Typer builds for the
        descriptor (its Pydantic adapter), built on first need and kept."""

        descriptor: Any
        built: dict

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            info = self.parameter_info
            fast = MISSING if info.clamp else plain_value(self.annotation, value, info.min, info.max)
            if fast is not MISSING:
                return fast
            if "param" not in self.built:
                self.built["param"] = build_runtime_param(self.descriptor)
            return self.built["param"]._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            d = self.type_descriptor
            plain = d.annotation in (str, int, float, bool) and d.file_annotation is None and \
                d.parameter_info.parser is None and not d.is_path
            self._runtime_param = (PlainRuntimeParam(d.parameter_info, d.annotation, d, {}) if plain
                                   else build_runtime_param(d))
        return self._runtime_param

    # a monkeypatch, done through Any: mypy types neither a marker set on a function nor a method reassigned
    marked: Any = get_runtime_param
    marked._asap_plain = True
    patched: Any = _TyperParameter
    patched.get_runtime_param = get_runtime_param
