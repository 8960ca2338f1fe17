"""Helpers shared by the CLI commands: JSON output, stderr console, option types."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from rich.console import Console

err_console = Console(stderr=True)


# wide enough for the tables when stdout is a file or a pipe (Rich would otherwise wrap at 80 columns)
out_console = Console() if sys.stdout.isatty() else Console(width=160)


def strategy_column(table, names: list[str], header: str = "strategy") -> None:
    """A strategy column that wraps between the compact notation's tokens and never cuts one off: at least as
    wide as the longest token (Rich folds, rather than truncates, anything longer)."""
    widest = max((len(tok) for name in names for tok in name.split()), default=8)
    table.add_column(header, justify="left", overflow="fold", min_width=max(widest, len(header)))


def _clean(obj: Any) -> Any:
    """Make numpy scalars, tuples and non-finite floats JSON-safe."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def print_json(obj: Any) -> None:
    """Exactly one JSON document on stdout."""
    sys.stdout.write(json.dumps(_clean(obj), indent=2) + "\n")
    sys.stdout.flush()
