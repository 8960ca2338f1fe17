"""The house rules a reader can check without running anything, over ``src/asap`` by its syntax tree (``ast``):

* no import cycle between modules (an import at module level and one inside a function both count: either makes
  the two modules one unit a reader cannot understand apart);
* no import up or sideways between rooms: every top-level package or module of ``asap`` (a *room*) sits on one
  floor of ``FLOORS`` and imports only from the floors below it (or from inside itself);
* no function longer than ``MAX_FUNCTION_LINES`` (its ``def`` to its last line, docstring included) and no module
  longer than ``MAX_MODULE_LINES``.

``python tests/house/test_house.py [SRC]`` prints the house's figures (rooms, modules, floors, cycles, arrows up, the
longest functions, the modules over the limit), the same the tests check, for this checkout or another's ``src``.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "asap"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600

# The floors, lowest first: a room imports only from rooms on lower floors. Read from the code: a room's floor is
# one above the highest room it needs (runners: the torch and JAX backends and the launch/result/failure types
# they share, one wing; ``asap`` itself is the importable facade).
FLOORS: list[tuple[str, ...]] = [
    ("errors", "version", "subprocs", "measure"),  # no asap imports at all (measure: step-time statistics)
    ("spec",),  # the vocabulary: models, hardware, strategies, the job
    ("cost", "profile", "emit", "budget", "memory"),  # pricing a strategy; reading traces; launch configs; the trial store
    ("search", "compare", "balance"),  # the planner over the cost model; attention-aware data balance
    ("validate", "runners"),  # the calibration cases planned; the torch and JAX runners
    ("numerics", "calibrate"),  # what runs on the runners: alignment, calibration
    ("agents", "execute", "report"),  # the tune loop, its executors, the HTML report
    ("learn",),  # measured runs (cases, stack logs) into the Memory, and the job corrected by them
    ("cli",),  # the thin face
    ("asap",),  # the package's own __init__: the importable API
]


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    imports: set[str] = field(default_factory=set)
    functions: list[tuple[str, int]] = field(default_factory=list)  # (qualified name, lines)


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def floor_of() -> dict[str, int]:
    return {r: i for i, rooms in enumerate(FLOORS) for r in rooms}


def module_names(src: Path = SRC) -> dict[str, tuple[Path, bool]]:
    out = {}
    for p in sorted((src / PACKAGE).rglob("*.py")):
        parts = list(p.relative_to(src).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def imported(node: ast.AST, package: str, names: dict) -> set[str]:
    """The asap modules one import statement names (``from a.b import c``: a.b.c when c is a module, else a.b)."""

    def known(name: str) -> str | None:
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name or None

    if isinstance(node, ast.Import):
        return {known(a.name) for a in node.names if a.name.split(".")[0] == PACKAGE} - {None}
    if not isinstance(node, ast.ImportFrom):
        return set()
    if node.level:
        base = package.split(".")[:len(package.split(".")) - node.level + 1]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    if mod.split(".")[0] != PACKAGE:
        return set()
    return {known(f"{mod}.{a.name}") if f"{mod}.{a.name}" in names else known(mod) for a in node.names} - {None}


def functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int]]:
    out = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append((prefix + node.name, node.end_lineno - node.lineno + 1))
            out += functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            out += functions(node, f"{prefix}{node.name}.")
        else:
            out += functions(node, prefix)
    return out


def load(src: Path = SRC) -> dict[str, Module]:
    names = module_names(src)
    mods = {}
    for name, (path, is_pkg) in names.items():
        text = path.read_text()
        tree = ast.parse(text)
        package = name if is_pkg else name.rpartition(".")[0]
        m = Module(name, path, len(text.splitlines()), functions=functions(tree))
        for node in ast.walk(tree):
            m.imports |= imported(node, package, names)
        m.imports.discard(name)
        mods[name] = m
    return mods


def cycles(mods: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(mods[v].imports):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(mods):
        if v not in index:
            visit(v)
    return sorted(out)


def arrows_up(mods: dict[str, Module]) -> list[str]:
    """Every import from a room to one on its own floor or above (and rooms no floor names)."""
    floor = floor_of()
    out = []
    for m in mods.values():
        for dep in sorted(m.imports):
            a, b = room(m.name), room(dep)
            if a == b:
                continue
            if a not in floor or b not in floor:
                out.append(f"{m.name} -> {dep} (room {a if a not in floor else b} is on no floor)")
            elif floor[b] >= floor[a]:
                out.append(f"{m.name} -> {dep} ({a} on floor {floor[a]}, {b} on floor {floor[b]})")
    return out


def long_functions(mods: dict[str, Module], limit: int = MAX_FUNCTION_LINES) -> list[tuple[int, str]]:
    return sorted(((n, f"{m.name}.{f}") for m in mods.values() for f, n in m.functions if n > limit), reverse=True)


def long_modules(mods: dict[str, Module], limit: int = MAX_MODULE_LINES) -> list[tuple[int, str]]:
    return sorted(((m.lines, m.name) for m in mods.values() if m.lines > limit), reverse=True)


def test_no_import_cycles():
    found = cycles(load())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_import_up_or_sideways():
    found = arrows_up(load())
    assert not found, f"{len(found)} imports up or sideways:\n" + "\n".join(found)


def test_every_room_is_on_one_floor():
    rooms = [r for rs in FLOORS for r in rs]
    assert len(rooms) == len(set(rooms)), "a room on two floors"
    missing = sorted({room(m) for m in load()} - set(rooms))
    assert not missing, f"rooms on no floor: {missing}"


def test_no_function_over_the_limit():
    found = long_functions(load())
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(f"{n:5d} {f}" for n, f in found)


def test_no_module_over_the_limit():
    found = long_modules(load())
    assert not found, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(f"{n:5d} {f}" for n, f in found)


def test_the_checks_can_fail(tmp_path):
    """The checks themselves, on a made-up package: a cycle, an arrow up and a long function are all found."""
    pkg = tmp_path / PACKAGE
    (pkg / "spec").mkdir(parents=True)
    (pkg / "cost").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "spec" / "__init__.py").write_text("")
    (pkg / "cost" / "__init__.py").write_text("")
    (pkg / "spec" / "a.py").write_text("def f():\n    from asap.cost import b\n")  # up, and half a cycle
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (pkg / "cost" / "b.py").write_text("from asap.spec import a\n\n\ndef long():\n" + body)
    mods = load(tmp_path)
    assert cycles(mods) == [["asap.cost.b", "asap.spec.a"]]
    assert arrows_up(mods) == ["asap.spec.a -> asap.cost.b (spec on floor 1, cost on floor 2)"]
    assert long_functions(mods) == [(MAX_FUNCTION_LINES + 1, "asap.cost.b.long")]


def report(mods: dict[str, Module]) -> str:
    rooms = sorted({room(m) for m in mods})
    packages = [m for m in mods if mods[m].path.name == "__init__.py"]
    out = [f"rooms (top-level packages and modules of asap): {len(rooms)}",
           f"modules: {len(mods)} ({len(packages)} packages), lines: {sum(m.lines for m in mods.values()):,}",
           "floors (lowest first): " + " < ".join("{" + ", ".join(f) + "}" for f in FLOORS)]
    found = cycles(mods)
    out.append(f"import cycles: {len(found)}")
    out += ["  " + " <-> ".join(c) for c in found]
    up = arrows_up(mods)
    out.append(f"imports up or sideways: {len(up)}")
    out += ["  " + a for a in up]
    every = sorted(((n, f"{m.name}.{f}") for m in mods.values() for f, n in m.functions), reverse=True)
    over = [x for x in every if x[0] > MAX_FUNCTION_LINES]
    out.append(f"functions over {MAX_FUNCTION_LINES} lines: {len(over)}; the ten longest:")
    out += [f"  {n:5d} {f}" for n, f in every[:10]]
    out += [f"  {n:5d} {f}" for n, f in over[10:]]
    big = long_modules(mods)
    out.append(f"modules over {MAX_MODULE_LINES} lines: {len(big)}")
    out += [f"  {n:5d} {f}" for n, f in big]
    return "\n".join(out)


if __name__ == "__main__":
    # python tests/house/test_house.py [SRC]: SRC another checkout's src folder, e.g. the base commit's
    # (git worktree add /tmp/asap-base d3e476b && python tests/house/test_house.py /tmp/asap-base/src)
    print(report(load(Path(sys.argv[1]) if len(sys.argv) > 1 else SRC)))
