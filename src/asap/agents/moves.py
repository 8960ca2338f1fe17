"""Moves of a strategy, as an engineer reasons about them: a knowledge entry's ``moves`` applied to the current
strategy with only the dependent changes (dp follows the device count, sp follows tp, the schedule follows
vpp), the knobs a move turns (dp and the dependent keys not counted), what it costs besides time (memory,
numerics, batch semantics), and the lines of an entry that justify it."""

from __future__ import annotations

import re
from typing import Any

from asap.cost.estimate import Estimate
from asap.spec.strategy import Schedule, Strategy, plain_value

# one-knob neighbours of the current strategy, in the knowledge entries' move format
NEIGHBOUR_MOVES: tuple[dict[str, str], ...] = (
    {"tp": "x2"}, {"tp": "/2"}, {"pp": "x2"}, {"pp": "/2"}, {"cp": "x2"}, {"cp": "/2"}, {"ep": "x2"}, {"ep": "/2"},
    {"mbs": "x2"}, {"mbs": "/2"}, {"vpp": "x2"}, {"vpp": "/2"}, {"recompute": "=none"},
    {"recompute": "=selective"}, {"recompute": "=full"}, {"zero": "=1"}, {"zero": "=3"},
    {"dispatcher": "=dedup"}, {"dispatcher": "=alltoall"}, {"dispatcher": "=allgather"}, {"a2a_overlap": "=1"},
    {"schedule": "=zb"}, {"zero": "=0"}, {"zero": "=2"}, {"etp": "x2"}, {"etp": "/2"}, {"grad_bf16": "=1"},
)
# the two-knob neighbourhood: each of the single moves that cut the named terms most, joined with every other
PAIR_LEADERS = 4
# keys derived from the others (the data-parallel degree fills the devices; the rest follow their defaults)
DERIVED = ("dp", "etp", "sp", "schedule", "layer_split")
MOE_KEYS = ("ep", "etp", "dispatcher", "a2a_overlap")  # knobs a dense model does not have
MAIN_KNOBS = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "zero", "recompute", "schedule", "dispatcher",
              "a2a_overlap", "grad_bf16")
MAX_KNOBS = 3  # a targeted move turns at most this many knobs besides dp
REDUCTION_AXES = ("tp", "cp", "ep", "pp")


def moved_strategy(current: Strategy, move: dict[str, str], devices: int, moe: bool = True) -> dict[str, Any] | None:
    """The strategy ``move`` makes of ``current`` (knowledge-entry ops), with the derived keys filled again
    (dp from the devices, sp and etp from their defaults, the schedule from vpp); None where the move does not
    apply (an MoE knob of a dense model, an inexact division, a product the devices do not divide)."""
    from asap.agents.knowledge import apply_move

    if not moe and any(k in MOE_KEYS for k in move):
        return None
    move = {k: op for k, op in move.items() if k != "dp"}  # dp follows the device count
    base = {k: v for k, v in current.to_dict().items() if k not in DERIVED and v is not None}
    if "etp" in move:
        base["etp"] = current.etp
    new = apply_move(base, move) if move else None
    if new is None or new == base:
        return None
    if devices % (new.get("tp", 1) * new.get("pp", 1) * new.get("cp", 1)):
        return None
    if new.get("vpp", 1) > 1:
        chunked = current.schedule in (Schedule.INTERLEAVED, Schedule.ZB)
        new["schedule"] = current.schedule.label if chunked else Schedule.INTERLEAVED.label
    elif current.schedule != Schedule.INTERLEAVED:
        new["schedule"] = current.schedule.label
    if "schedule" in move:
        new["schedule"] = move["schedule"].lstrip("=")
    return new


def moved_knobs(new: Strategy, current: Strategy) -> list[str]:
    """The knobs turned, dp not counted, nor the keys that follow another (sp and etp with tp, the schedule
    with vpp)."""
    keys = [k for k in MAIN_KNOBS if getattr(new, k) != getattr(current, k)]
    if "vpp" in keys and "schedule" in keys and new.schedule == Schedule.INTERLEAVED:
        keys.remove("schedule")
    if "etp" in keys and ("ep" in keys or "tp" in keys):
        keys.remove("etp")
    return keys


def moves_text(new: Strategy, current: Strategy) -> str:
    keys = [k for k in ("dp",) + MAIN_KNOBS if getattr(new, k) != getattr(current, k)]
    return ", ".join(f"{k} {plain_value(getattr(current, k))}->{plain_value(getattr(new, k))}" for k in keys)


def tradeoffs(base: Estimate, new: Estimate, hbm_gb: float, global_batch: int) -> list[str]:
    """What the move costs besides the step time: memory, numerics, batch semantics, and exposed terms that grow."""
    a, b = base.strategy, new.strategy
    out = [f"memory: peak {base.peak_memory_gb:.1f} -> {new.peak_memory_gb:.1f} GiB reserved of {hbm_gb:.4g} GiB usable per device"]
    axes = [k for k in REDUCTION_AXES if getattr(a, k) != getattr(b, k)]
    if axes or a.dp != b.dp:
        out.append(f"numerics: {', '.join(axes + (['dp'] if a.dp != b.dp else []))} change the order of "
                   "reductions (bitwise results differ; the loss curve matches within bf16 noise)")
    if a.recompute != b.recompute or a.zero != b.zero or a.dispatcher != b.dispatcher:
        out.append("numerics: recompute, ZeRO stage and dispatcher change where tensors live, not the math")
    if a.dp != b.dp or a.mbs != b.mbs:
        out.append(f"batch: global batch {global_batch} unchanged; {global_batch // (a.dp * a.mbs)} -> "
                   f"{global_batch // (b.dp * b.mbs)} micro-batches of {a.mbs} -> {b.mbs} per replica "
                   f"({a.dp} -> {b.dp} replicas)")
    for term, value in new.exposed_s.items():
        before = base.exposed_s.get(term, 0.0)
        if value > before * 1.2 and value - before > 0.02 * new.step_time_s:
            out.append(f"more exposed {term}: {before:.3g} -> {value:.3g} s")
    return out


def justifying_lines(body: str, words: list[str], n: int = 2) -> list[str]:
    """The ``n`` sentences of an entry's body that share the most words with the move and the class, in order."""
    sentences = [x.strip() for x in re.split(r"(?<=[.])\s+", " ".join(body.split())) if len(x.strip()) > 20]
    vocab = {w.lower() for w in words}
    scored = [(len(vocab & set(re.findall(r"[a-z0-9_-]+", s.lower()))), -i, s) for i, s in enumerate(sentences)]
    best = sorted(scored, reverse=True)[:n]
    return [s for _, _, s in sorted(best, key=lambda x: -x[1])]


def moves_that_way(op: str | None, old: Any, new: Any) -> bool:
    """Whether a knowledge move ``op`` of one knob goes the way ``old -> new`` does."""
    if op is None or old == new:
        return False
    op = str(op)
    if op.startswith("="):
        return op[1:] == str(new)
    try:
        up = float(new) > float(old)
    except (TypeError, ValueError):
        return False
    return op[0] in "x+" if up else op[0] in "/-"
