"""Every `asap ...` command example in README.md and docs/*.md runs as written.

The contract with the documents (docs authors: keep to it, this test enforces it):

* Runnable examples are the lines that start with ``asap `` inside fenced code blocks whose language is
  ``bash``, ``sh``, ``shell``, ``console`` or empty (a bare fence). A trailing ``\\`` continues the line;
  a trailing ``# comment`` is stripped. Lines that start with anything else (``python3 -m venv``,
  ``python benchmarks/...``) are not run. Pure syntax (``asap diagnose TRACE... [--top N]``) belongs in a
  ```` ```text ```` block, which is never run.
* Each document's commands run in order, through ``bash -c`` (globs expand as in a shell) with the venv's
  ``bin`` first on ``PATH``, in one fresh temporary directory per document, so a file one command writes
  (``asap run ... --profile traces/``) is there for the next (``asap diagnose traces/trace_rank*.json``).
  ``ASAP_DATA_DIR`` points into that directory (the Sharding Memory of ``asap tune`` / ``asap memory``).
* A file the document shows and then uses by name is a fenced block whose info string names it:
  ```` ```yaml title="my-8b.yaml" ````; those blocks are written into the directory before the
  document's commands run.
* Files that live in the repository are referenced relative to the repository root; ``docs/examples/`` and
  the stacks' own example configs (``tests/data/stack_configs/``, their sources in its ``SOURCES``) are copied
  into every working directory so that those paths resolve.
* An example shown failing says so on the line after it: ``# exit N: <text on stderr>``; the test expects
  exit status N and that text on stderr. Every other example must exit 0.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]  # tests/<room>/this file
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
VENV_BIN = Path(sys.executable).parent
RUN_LANGS = {"", "bash", "sh", "shell", "console"}
TIMEOUT_S = 300  # a JAX run compiles first; CI machines are shared

pytestmark = pytest.mark.slow

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
TITLE = re.compile(r"""title=(?:"([^"]+)"|'([^']+)'|(\S+))""")
EXPECT = re.compile(r"^#\s*exit\s+(\d+)\s*(?::\s*(.*))?$")


@dataclass
class Command:
    doc: str
    lineno: int
    line: str
    exit_code: int = 0
    stderr_has: str = ""


@dataclass
class Doc:
    path: Path
    files: dict[str, str] = field(default_factory=dict)
    commands: list[Command] = field(default_factory=list)


def strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` outside quotes, at the start or after a blank)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def blocks(text: str):
    """(language, info, first line number, lines) of every fenced code block."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        start = i + 1
        body = []
        i += 1
        while i < len(lines):
            close = FENCE.match(lines[i])
            if close and close.group(2).startswith(fence[0] * len(fence)) and not close.group(3).strip():
                break
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1
        lang = info.split()[0].lower() if info else ""
        yield lang, info, start + 1, body


def parse(path: Path) -> Doc:
    doc = Doc(path)
    name = str(path.relative_to(REPO))
    for lang, info, first, body in blocks(path.read_text()):
        title = TITLE.search(info)
        if title:
            doc.files[next(g for g in title.groups() if g)] = "\n".join(body) + "\n"
            continue
        if lang not in RUN_LANGS:
            continue
        logical: list[tuple[int, str]] = []
        pending, pending_no = "", 0
        for k, raw in enumerate(body):
            no = first + k
            piece = raw.rstrip()
            if pending:
                piece = pending + " " + piece.strip()
            else:
                pending_no = no
            if piece.endswith("\\"):
                pending = piece[:-1].rstrip()
                continue
            pending = ""
            logical.append((pending_no, piece))
        previous = None  # the command on the logical line just before, if any
        for no, line in logical:
            stripped = line.strip()
            expect = EXPECT.match(stripped)
            if expect and previous is not None:
                previous.exit_code = int(expect.group(1))
                previous.stderr_has = (expect.group(2) or "").strip()
                previous = None
                continue
            previous = None
            if stripped.startswith("asap "):
                previous = Command(name, no, strip_comment(stripped))
                doc.commands.append(previous)
    return doc


PARSED = [parse(p) for p in DOCS]


def test_extraction_finds_the_examples():
    """The extractor sees what the documents show (guards against it silently matching nothing)."""
    by_name = {str(d.path.relative_to(REPO)): d for d in PARSED}
    assert sum(len(d.commands) for d in PARSED) >= 40
    readme = by_name["README.md"]
    assert any(c.line.startswith("asap plan ") for c in readme.commands)
    assert not any("pip" in c.line or "venv" in c.line for c in readme.commands)
    inputs = by_name["docs/inputs.md"]
    assert "my-8b.yaml" in inputs.files and "cases.json" in inputs.files
    assert any(c.exit_code == 2 and c.stderr_has for c in inputs.commands)
    run = by_name["docs/run.md"]
    assert any(c.line.startswith("asap diagnose traces/trace_rank*.json") for c in run.commands)
    cont = [c for d in PARSED for c in d.commands if c.line.startswith("asap tune -m deepseek-v3")]
    assert cont and "--report tune.html" in cont[0].line and "\\" not in cont[0].line
    assert strip_comment("asap x --a 1   # note") == "asap x --a 1"
    assert strip_comment("asap x --name 'a # b'") == "asap x --name 'a # b'"


def _env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["ASAP_DATA_DIR"] = str(workdir / ".asap-data")
    env.pop("ASAP_LLM_BASE_URL", None)
    env.pop("OPENAI_BASE_URL", None)
    env.setdefault("CUDA_VISIBLE_DEVICES", "")  # the examples are CPU-sized
    return env


@pytest.mark.parametrize("doc", [d for d in PARSED if d.commands], ids=lambda d: str(d.path.relative_to(REPO)))
def test_document_commands_run(doc: Doc, tmp_path: Path):
    for shared in (Path("docs") / "examples", Path("tests") / "data" / "stack_configs"):
        if (REPO / shared).is_dir():
            shutil.copytree(REPO / shared, tmp_path / shared)
    for name, content in doc.files.items():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    env = _env(tmp_path)
    failures = []
    for cmd in doc.commands:
        t0 = time.monotonic()
        try:
            proc = subprocess.run(["bash", "-c", cmd.line], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            failures.append(f"{cmd.doc}:{cmd.lineno}: timed out after {TIMEOUT_S} s: {cmd.line}")
            continue
        took = time.monotonic() - t0
        where = f"{cmd.doc}:{cmd.lineno} ({took:.1f} s): {cmd.line}"
        if proc.returncode != cmd.exit_code:
            tail = (proc.stderr.strip().splitlines() or [""])[-3:]
            failures.append(f"{where}\n    exit {proc.returncode}, expected {cmd.exit_code}; stderr: "
                            + " | ".join(tail))
        elif cmd.stderr_has and cmd.stderr_has not in proc.stderr:
            failures.append(f"{where}\n    stderr lacks {cmd.stderr_has!r}: {proc.stderr.strip()[-300:]}")
        elif "Traceback" in proc.stderr:
            failures.append(f"{where}\n    traceback on stderr: {proc.stderr.strip()[-300:]}")
    assert not failures, "\n".join(failures)
