"""The knowledge base: expert entries the Proposer retrieves and cites.

Each entry is a markdown file under ``asap/data/knowledge/`` (package data) with YAML front matter:
``id`` (the file stem), ``title``, ``bottlenecks`` (the diagnoses it answers, design.md's vocabulary),
``classes`` (the finer bottleneck classes it attacks, ``asap.spec.words.BottleneckClass``; optional),
``families`` / ``model_kinds`` / ``frameworks`` (``[any]`` or a list: where it applies), ``when`` (its precondition:
expressions over the current strategy and the job that must all hold, ``asap.agents.precondition``; an entry
whose precondition is false is neither retrieved nor cited), ``moves`` (strategy deltas, each a mapping
``key -> op``), ``sources``; the body says when, why, the trade-off and how to check.

Move ops: ``x2`` (multiply), ``/2`` (divide, exact only), ``+1`` / ``-1`` (add), ``=VALUE`` (set).
``apply_move`` applies one move to a plain dict of strategy values.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, field_validator

from asap.agents.precondition import compile_check, holds
from asap.errors import AsapError, validated
from asap.spec.framework import DISPATCHERS, FRAMEWORK_NAMES
from asap.spec.hardware import FAMILIES
from asap.spec.knobs import INT_KEYS, OFF_BY_DEFAULT, SCHEDULES, SWITCH_KEYS, Zero, plain_value
from asap.spec.strategy import Strategy, recompute_code, recompute_label
from asap.spec.words import BOTTLENECK_CLASSES, BOTTLENECKS, Bottleneck, BottleneckClass

MODEL_KINDS = ("dense", "moe", "long_context", "mla")


def _int_range(key: str) -> tuple[int, int | None]:
    """What ``asap.spec.strategy`` accepts for an integer key: a ZeRO stage, a 0/1 switch, else a degree >= 1."""
    if key == "zero":
        return int(min(Zero)), int(max(Zero))
    return (0, 1) if key in SWITCH_KEYS else (1, None)


# the integer keys a move may change (the host-offload and fp8-weight switches are not moves of the knowledge
# base), each with its range
INT_RANGES = {k: _int_range(k) for k in INT_KEYS if k not in OFF_BY_DEFAULT or k == "grad_bf16"}
CHOICE_KEYS = {"schedule": SCHEDULES, "dispatcher": DISPATCHERS}
MOVE_KEYS = tuple(INT_RANGES) + ("recompute",) + tuple(CHOICE_KEYS)
# A strategy dict that lacks a key has the value ``asap.spec.strategy.Strategy`` defaults to (dp too: 1).
DEFAULTS = {k: plain_value(getattr(Strategy(dp=1), k)) for k in MOVE_KEYS}
DEFAULTS = {k: int(v) if k in INT_RANGES else v for k, v in DEFAULTS.items()}
_ARITH = re.compile(r"^([x/+-])(\d+)$")


def _check_vocabulary(values: Any, allowed: tuple[str, ...], what: str, any_ok: bool) -> Any:
    """Raise ``ValueError`` unless ``values`` (the raw YAML list) names only ``allowed`` words (or stands
    ``any`` alone); what is not a list of strings is left to the field's type."""
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return values
    if not values:
        raise ValueError(f"must list at least one {what}")
    if any_ok and "any" in values and len(values) > 1:
        raise ValueError("'any' must stand alone")
    unknown = [v for v in values if v not in allowed and not (any_ok and v == "any")]
    if unknown:
        raise ValueError(f"unknown {what} {unknown[0]!r} (known: {', '.join(allowed)})")
    return values


def _check_set_value(key: str, value: str) -> None:
    if key in INT_RANGES:
        lo, hi = INT_RANGES[key]
        if not re.fullmatch(r"\d+", value) or int(value) < lo or (hi is not None and int(value) > hi):
            raise ValueError(f"'={value}' is not a valid value of {key}")
    elif key == "recompute":
        recompute_code(value, "recompute")  # raises AsapError (a ValueError) naming the choices
    elif value not in CHOICE_KEYS[key]:
        raise ValueError(f"'={value}' is not one of {', '.join(CHOICE_KEYS[key])}")


def check_op(key: str, op: str) -> None:
    """Raise ``ValueError`` unless ``op`` is a legal op on strategy key ``key``."""
    if key not in MOVE_KEYS:
        raise ValueError(f"unknown strategy key {key!r} (known: {', '.join(MOVE_KEYS)})")
    if not isinstance(op, str):
        raise ValueError(f"op for {key} must be a quoted string, got {op!r}")
    if op.startswith("="):
        return _check_set_value(key, op[1:])
    m = _ARITH.match(op)
    if not m:
        raise ValueError(f"unknown op {op!r} for {key} (ops: xN, /N, +N, -N, =VALUE)")
    if key not in INT_RANGES:
        raise ValueError(f"op {op!r} needs an integer key, {key} is not one (use '=VALUE')")
    if m.group(1) in "x/" and int(m.group(2)) < 2:
        raise ValueError(f"op {op!r} on {key} changes nothing (factor must be >= 2)")


class KnowledgeEntry(BaseModel):
    """One knowledge entry, validated: vocabularies, move keys and ops."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    title: str
    bottlenecks: list[Bottleneck]
    families: list[str]
    model_kinds: list[str]
    frameworks: list[str]
    when: list[str]
    moves: list[dict[str, str]]
    sources: list[str]
    body: str
    classes: list[BottleneckClass] = []

    @field_validator("when", mode="before")
    @classmethod
    def _when(cls, v: Any) -> Any:
        if not isinstance(v, list) or not v:
            raise ValueError("must list at least one check on the strategy and job (asap.agents.precondition)")
        for i, check in enumerate(v):
            try:
                compile_check(check)
            except ValueError as e:
                raise ValueError(f"check {i}: {e}") from None
        return v

    def holds(self, env: dict[str, Any]) -> bool:
        """Whether the precondition holds in ``env`` (``asap.agents.precondition.variables``)."""
        return holds(self.when, env)

    @field_validator("classes", mode="before")
    @classmethod
    def _classes(cls, v: Any) -> Any:
        return _check_vocabulary(v, BOTTLENECK_CLASSES, "bottleneck class", any_ok=False) if v else v

    @field_validator("id")
    @classmethod
    def _id(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", v):
            raise ValueError(f"must be short kebab-case, got {v!r}")
        return v

    @field_validator("title", "body")
    @classmethod
    def _text(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v.strip()

    @field_validator("bottlenecks", mode="before")
    @classmethod
    def _bottlenecks(cls, v: Any) -> Any:
        return _check_vocabulary(v, BOTTLENECKS, "bottleneck", any_ok=False)

    @field_validator("families")
    @classmethod
    def _families(cls, v: list[str]) -> list[str]:
        return _check_vocabulary(v, tuple(FAMILIES), "accelerator family", any_ok=True)

    @field_validator("model_kinds")
    @classmethod
    def _model_kinds(cls, v: list[str]) -> list[str]:
        return _check_vocabulary(v, MODEL_KINDS, "model kind", any_ok=True)

    @field_validator("frameworks")
    @classmethod
    def _frameworks(cls, v: list[str]) -> list[str]:
        return _check_vocabulary(v, FRAMEWORK_NAMES, "framework", any_ok=True)

    @field_validator("moves", mode="before")
    @classmethod
    def _moves(cls, v: Any) -> Any:
        for i, move in enumerate(v if isinstance(v, list) else []):
            if not isinstance(move, dict) or not move:
                raise ValueError(f"move {i} must be a non-empty mapping key -> op")
            for key, op in move.items():
                try:
                    check_op(str(key), op)
                except ValueError as e:
                    raise ValueError(f"move {i}: {e}") from None
        return v

    @field_validator("sources")
    @classmethod
    def _sources(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("must list at least one source")
        return v


def _split_front_matter(text: str, name: str) -> tuple[dict, str]:
    m = re.match(r"^---\s*\n(.*?)\n---\s*\n(.*)$", text, re.S)
    if not m:
        raise AsapError(f"{name}:front_matter", "the file must start with '---' YAML front matter '---'")
    try:
        meta = yaml.safe_load(m.group(1))
    except yaml.YAMLError as e:
        raise AsapError(f"{name}:front_matter", f"is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(meta, dict):
        raise AsapError(f"{name}:front_matter", "must be a YAML mapping")
    return meta, m.group(2)


def parse_entry(text: str, name: str) -> KnowledgeEntry:
    """One entry from its file text; ``name`` (the file name) goes into every error."""
    meta, body = _split_front_matter(text, name)
    entry = validated(KnowledgeEntry, {**meta, "body": body}, where=f"{name}:", whole="front_matter")
    stem = name.rsplit("/", 1)[-1].removesuffix(".md")
    if entry.id != stem:
        raise AsapError(f"{name}:id", f"must equal the file stem {stem!r}, got {entry.id!r}")
    return entry


@lru_cache(maxsize=8)
def _load_dir(path: str | None) -> tuple[KnowledgeEntry, ...]:
    root = Path(path) if path else resources.files("asap") / "data" / "knowledge"
    files = sorted((f for f in root.iterdir() if f.name.endswith(".md")), key=lambda f: f.name)
    entries = [parse_entry(f.read_text(encoding="utf-8"), f.name) for f in files]
    seen: set[str] = set()
    for e in entries:
        if e.id in seen:
            raise AsapError(f"{e.id}.md:id", f"duplicate id {e.id!r}")
        seen.add(e.id)
    return tuple(sorted(entries, key=lambda e: e.id))


def load_knowledge(path: str | Path | None = None) -> list[KnowledgeEntry]:
    """Every entry (sorted by id) from ``path`` (a folder of ``*.md``) or the package's own; cached per path."""
    if path is not None and not Path(path).is_dir():
        raise AsapError("knowledge", f"{path} is not a folder")
    return list(_load_dir(str(Path(path).resolve()) if path is not None else None))


def _apply_op(value: Any, key: str, op: str) -> Any:
    """The new value of ``key``, or None when the op does not apply (inexact division, out of range)."""
    if op.startswith("="):
        text = op[1:]
        if key in INT_RANGES:
            return int(text)
        return recompute_label(recompute_code(text)) if key == "recompute" else text
    m = _ARITH.match(op)
    assert m is not None  # apply_move runs check_op first: a non-"=" op matches _ARITH
    sign, n = m.groups()
    v, n = int(value), int(n)
    if sign == "/" and v % n:
        return None
    new = {"x": v * n, "/": v // n, "+": v + n, "-": v - n}[sign]
    lo, hi = INT_RANGES[key]
    return new if new >= lo and (hi is None or new <= hi) else None


def apply_move(strategy: dict[str, Any], move: dict[str, str]) -> dict[str, Any] | None:
    """A new strategy dict with ``move`` applied, or None when the move does not apply: an inexact division
    (``/2`` of 1 or of an odd value), a result out of range (a degree < 1, zero outside 0..3, a flag outside
    0..1), or nothing changes. Keys the dict lacks start from ``DEFAULTS``; legality across keys (products,
    divisibility) is ``asap.spec.legality``'s job, not this function's."""
    out = dict(strategy)
    for key, op in move.items():
        try:
            check_op(key, op)
        except ValueError as e:
            raise AsapError("move", str(e)) from None
        new = _apply_op(out.get(key, DEFAULTS[key]), key, op)
        if new is None:
            return None
        out[key] = new
    changed = any(out.get(k, DEFAULTS[k]) != strategy.get(k, DEFAULTS[k]) for k in move)
    return out if changed else None
