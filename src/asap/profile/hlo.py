"""Operator FLOPs and bytes from a compiled XLA module's HLO text (``jitted.lower(...).compile().as_text()``).

XLA:CPU traces carry no operand shapes, and its fusions are not named for what they do: a ``ynn_fusion``
(YNNPACK) may hold a matrix product or only a softmax's reductions. The module the trace ran says which: each
top-level instruction's bytes are its operands' and its result's sizes, its FLOPs 2 x (result elements) x
(contracted elements) of every ``dot`` inside it (its fused computations included); elementwise work counts 0
FLOPs, so an operator without a dot is memory-bound on the roofline, as it is physically.
"""

from __future__ import annotations

import re
from pathlib import Path

HLO_SUFFIX = ".hlo.txt"  # written beside a profile's trace by asap.runners.jax.train
DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
               "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_SHAPE = re.compile(r"\b([a-z]+[0-9a-z]*)\[([0-9,]*)\]")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*?)\s+([\w\-]+)\((.*?)\)(.*)$")
_COMP = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")


def shape_dims(text: str) -> list[tuple[str, list[int]]]:
    """Every array shape in a type (a tuple has several): [(dtype, dims)]."""
    return [(t, [int(x) for x in d.split(",") if x]) for t, d in _SHAPE.findall(text) if t in DTYPE_BYTES]


def shape_bytes(text: str) -> int:
    total = 0
    for t, dims in shape_dims(text):
        n = 1
        for x in dims:
            n *= x
        total += n * DTYPE_BYTES[t]
    return total


def parse_computations(text: str) -> tuple[dict[str, list[dict]], str | None, str]:
    """HLO text -> ({computation: [instruction {name, type, op, operands, attrs}]}, entry name, module name)."""
    comps: dict[str, list[dict]] = {}
    entry, module, current = None, "", None
    for line in text.splitlines():
        if line.startswith("HloModule "):
            module = line.split()[1].rstrip(",")
        elif current is None and (m := _COMP.match(line)):
            current = m.group(1)
            comps[current] = []
            entry = current if line.startswith("ENTRY") else entry
        elif line.strip() == "}":
            current = None
        elif current is not None and (m := _INSTR.match(line)):
            name, typ, op, operands, attrs = m.groups()
            comps[current].append({"name": name, "type": typ, "op": op, "attrs": attrs,
                                   "operands": re.findall(r"%([\w.\-]+)", operands)})
    return comps, entry, module


def _dot_flops(ins: dict, shapes: dict[str, str]) -> float:
    out = shape_dims(ins["type"])
    lhs = shape_dims(shapes.get(ins["operands"][0], "")) if ins["operands"] else []
    m = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", ins["attrs"])
    if not out or not lhs or not m:
        return 0.0
    n_out = 1
    for x in out[0][1]:
        n_out *= x
    k = 1
    for i in (int(x) for x in m.group(1).split(",") if x):
        k *= lhs[0][1][i]
    return 2.0 * n_out * k


def computation_flops(comps: dict[str, list[dict]], name: str, seen: frozenset = frozenset()) -> float:
    """The dot FLOPs of one computation, those of the computations it calls included."""
    if name in seen or name not in comps:
        return 0.0
    shapes = {i["name"]: i["type"] for i in comps[name]}
    total = 0.0
    for ins in comps[name]:
        if ins["op"] == "dot":
            total += _dot_flops(ins, shapes)
        for called in re.findall(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)", ins["attrs"]):
            total += computation_flops(comps, called, seen | {name})
    return total


def op_costs(text: str) -> tuple[str, dict[str, tuple[float, float]]]:
    """(module name, {entry instruction name: (FLOPs, bytes read and written)})."""
    comps, entry, module = parse_computations(text)
    if entry is None:
        return module, {}
    shapes = {i["name"]: i["type"] for i in comps[entry]}
    out = {}
    for ins in comps[entry]:
        if ins["op"] in ("parameter", "constant", "bitcast", "get-tuple-element", "tuple"):
            continue
        nbytes = shape_bytes(ins["type"]) + sum(shape_bytes(shapes.get(o, "")) for o in ins["operands"])
        flops = _dot_flops(ins, shapes) if ins["op"] == "dot" else 0.0
        for called in re.findall(r"calls=%?([\w.\-]+)", ins["attrs"]):
            flops += computation_flops(comps, called)
        out[ins["name"]] = (flops, float(nbytes))
    return module, out


def costs_beside(trace: str | Path) -> dict[str, dict[str, tuple[float, float]]]:
    """{module name: op costs} of every ``*.hlo.txt`` in the trace's folder (empty when there is none)."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    if not Path(trace).is_file():
        return out
    for p in sorted(Path(trace).parent.glob("*" + HLO_SUFFIX)):
        module, costs = op_costs(p.read_text(errors="replace"))
        out.setdefault(module, {}).update(costs)
    return out
