"""What an answer costs: time to train and device-hours for a token budget, and money at a price per
device-hour (``--tokens 15T``, ``--price-per-device-hour 2.5``).

    time_to_train_s = tokens / tokens_per_s                 (tokens_per_s of the whole job, all devices)
    device_hours    = time_to_train_s / 3600 * devices
    cost            = device_hours * price_per_device_hour

Steady-state throughput only: no warm-up, checkpointing, restarts or evaluation, which a real run adds.
"""

from __future__ import annotations

import math
import re

from asap.errors import AsapError

SECONDS_PER_DAY = 86400.0
# SI suffixes as training budgets are written (Llama 3: "15T tokens"); B for billions, as the papers do
SUFFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}
_TOKENS = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]?)\s*$")


def parse_tokens(text: str | float | int) -> float:
    """``15T`` -> 1.5e13; ``300B``, ``2.5e12``, ``1000000`` too. Positive and finite, at most 1e18."""
    m = _TOKENS.match(str(text))
    suffix = m.group(2).upper() if m else ""
    if not m or suffix not in SUFFIXES:
        raise AsapError("tokens", f"must be a number with an optional K, M, B, T or P suffix (e.g. 15T), got {text!r}")
    n = float(m.group(1)) * SUFFIXES[suffix]
    if not math.isfinite(n) or n <= 0 or n > 1e18:
        raise AsapError("tokens", f"must be positive and at most 1e18 tokens, got {text!r}")
    return n


def check_price(price: float | None) -> float | None:
    if price is not None and not (math.isfinite(price) and 0 < price <= 1e6):
        raise AsapError("price-per-device-hour", f"must be a positive number (at most 1e6), got {price!r}")
    return price


def training_budget(tokens_per_s: float, devices: int, tokens: float, price_per_device_hour: float | None = None,
                    ) -> dict[str, float]:
    """``{tokens, time_to_train_s, time_to_train_days, device_hours[, price_per_device_hour, cost]}``."""
    seconds = tokens / tokens_per_s
    out = {"tokens": tokens, "time_to_train_s": seconds, "time_to_train_days": seconds / SECONDS_PER_DAY,
           "device_hours": seconds / 3600.0 * devices}
    if price_per_device_hour is not None:
        out["price_per_device_hour"] = price_per_device_hour
        out["cost"] = out["device_hours"] * price_per_device_hour
    return out


def budget_line(b: dict[str, float]) -> str:
    """``15T tokens: 42.1 days, 1,234,567 device-hours ($3.1M at $2.50/device-hour)``."""
    line = f"{_short(b['tokens'])} tokens: {b['time_to_train_days']:,.1f} days, {b['device_hours']:,.0f} device-hours"
    if "cost" in b:
        line += f" (${_short(b['cost'])} at ${b['price_per_device_hour']:,.2f}/device-hour)"
    return line


def _short(x: float) -> str:
    for suffix, scale in (("P", 1e15), ("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def budget_of(tokens: str | None, price: float | None):
    """(tokens as a number or None, the price): checked before any pricing."""
    from asap.budget import check_price, parse_tokens

    if price is not None and tokens is None:
        raise AsapError("price-per-device-hour", "needs --tokens (the budget it prices)")
    return (None if tokens is None else parse_tokens(tokens)), check_price(price)


def with_budget(d: dict, devices: int, tokens: float | None, price: float | None) -> dict:
    """An estimate's JSON object with ``time_to_train_days``, ``device_hours`` (and ``cost``) for the budget."""
    from asap.budget import training_budget

    if tokens is None:
        return d
    return {**d, **training_budget(d["tokens_per_s"], devices, tokens, price)}
