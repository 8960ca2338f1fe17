"""The launch line of a shell script, as the shell would build it, without running anything.

Training stacks are launched from scripts (Megatron-LM's ``examples/*/train_*.sh``, Megatron-DeepSpeed's
``ds_pretrain_*.sh``, MaxText's ``configs/*/*.sh``) that build the trainer's command line from variables and bash
arrays. ``launch_line(text, marker)`` evaluates what those scripts use (and nothing that has a side effect):
scalar and array assignments (``X=1``, ``A=( ... )``, ``A+=( ... )``, ``export X=...``), expansions (``$X``,
``${X}``, ``${X:-default}``, ``${A[@]}``, integer ``$(( ... ))`` of + - * /), ``if``/``elif``/``else`` on
``[ -n / -z ]`` and ``[ a == b ]`` / ``!=`` tests (a test it cannot decide whose branches assign nothing is
skipped; one whose branches assign is refused in one line), then returns the words of the first command whose
word matches ``marker`` (``pretrain_gpt.py``, ``MaxText.train``): the launcher's words before it and the
trainer's after it. Positional parameters (``$1``) and variables the script does not set expand to ``""`` unless
the script gives a default, as bash does.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from asap.errors import AsapError

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN = re.compile(rf"^(?:export\s+|declare\s+(?:-a\s+)?|local\s+)?({_NAME})(\+?=)(.*)$", re.S)
_TEST = re.compile(r"^(?:if|elif)\s+(.*?)\s*;?\s*(?:then)?\s*$", re.S)


@dataclass
class Shell:
    """The variables a script has set so far (arrays as lists of words)."""

    scalars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # what ``cat <<EOT > FILE`` wrote, by the path as expanded
    heredocs: list[tuple[str, str, bool]] = field(default_factory=list)  # (target, body, expand?) by index

    def expand(self, text: str) -> str:
        """``text`` with its expansions made (arrays as their words joined by spaces)."""
        text = re.sub(r"\$\(\((.*?)\)\)", lambda m: self._arith(m.group(1)), text)
        text = re.sub(rf"\$\{{({_NAME})\[[@*]\]\}}", lambda m: " ".join(self.arrays.get(m.group(1), [])), text)
        text = re.sub(rf"\$\{{({_NAME}|\d+)(:?-)([^}}]*)\}}", self._default, text)
        text = re.sub(rf"\$\{{({_NAME}|\d+)\}}", lambda m: self.value(m.group(1)), text)
        return re.sub(rf"\$({_NAME}|\d)", lambda m: self.value(m.group(1)), text)

    def value(self, name: str) -> str:
        if name in self.arrays:
            return self.arrays[name][0] if self.arrays[name] else ""
        return self.scalars.get(name, "")

    def _default(self, m: re.Match) -> str:
        v = self.value(m.group(1))
        unset = m.group(1) not in self.scalars and m.group(1) not in self.arrays
        use_default = unset or (m.group(2) == ":-" and v == "")
        return self.expand(m.group(3)).strip("\"'") if use_default else v

    def _arith(self, expr: str) -> str:
        expr = re.sub(rf"\$?\{{?({_NAME})\}}?", lambda m: self.value(m.group(1)) or "0", expr)
        if not re.fullmatch(r"[\d\s+\-*/()]+", expr):
            return ""
        try:
            return str(int(eval(expr, {"__builtins__": {}}, {})))  # digits and + - * / ( ) only, checked above
        except (ArithmeticError, SyntaxError):
            return ""

    def words(self, text: str) -> list[str]:
        """``text`` expanded and split into words as the shell splits an unquoted expansion."""
        try:
            return [w for w in shlex.split(self.expand(text), comments=True) if w]
        except ValueError:
            return self.expand(text).split()


_NUMERIC = {"-eq": lambda a, b: a == b, "-ne": lambda a, b: a != b, "-gt": lambda a, b: a > b,
            "-ge": lambda a, b: a >= b, "-lt": lambda a, b: a < b, "-le": lambda a, b: a <= b}
_HEREDOC = re.compile(r"^\s*cat\s+<<-?\s*(['\"]?)(\w+)\1\s*>\s*(\S+)\s*$")


def cut_heredocs(text: str, shell: Shell) -> str:
    """``cat <<EOT > FILE ... EOT`` blocks (how Megatron-DeepSpeed's scripts write their DeepSpeed JSON) replaced by
    a ``__heredoc__ N`` line; the shell writes FILE when it reaches that line."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = _HEREDOC.match(lines[i])
        if m is None:
            out.append(lines[i])
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == m.group(2)), len(lines))
        shell.heredocs.append((m.group(3), "\n".join(lines[i + 1:end]), m.group(1) == ""))
        out.append(f"__heredoc__ {len(shell.heredocs) - 1}")
        i = end + 1
    return "\n".join(out)


def _write_heredoc(shell: Shell, line: str) -> bool:
    if not line.startswith("__heredoc__ "):
        return False
    target, body, expand = shell.heredocs[int(line.split()[1])]
    shell.files[" ".join(shell.words(target))] = shell.expand(body) if expand else body
    return True


def logical_lines(text: str) -> list[str]:
    """The script's lines with continuations joined, comments dropped (outside quotes), and a multi-line
    ``A=( ... )`` joined into one."""
    out: list[str] = []
    pending = ""
    for raw in text.replace("\\\r\n", " ").replace("\\\n", " ").splitlines():
        line = _strip_comment(raw).strip()
        if not line and not pending:
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.count("(") > pending.count(")") and re.match(rf"^(?:export\s+|declare\s+(?:-a\s+)?)?{_NAME}\+?=\(",
                                                                 pending):
            continue
        out.append(pending)
        pending = ""
    if pending:
        out.append(pending)
    return out


def _strip_comment(line: str) -> str:
    quote = ""
    for i, c in enumerate(line):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t(") and not line[i - 1:i + 1] == "$#":
            return line[:i]
    return line


def _assign(shell: Shell, m: re.Match) -> None:
    name, op, rhs = m.group(1), m.group(2), m.group(3).strip()
    if rhs.startswith("(") and rhs.endswith(")"):
        items = shell.words(rhs[1:-1])
        shell.arrays[name] = (shell.arrays.get(name, []) if op == "+=" else []) + items
        shell.scalars.pop(name, None)
        return
    words = shell.words(rhs) if rhs else [""]
    value = " ".join(words) if rhs.startswith(("\"", "'")) else (words[0] if words else "")
    shell.scalars[name] = (shell.scalars.get(name, "") if op == "+=" else "") + value


def _decide(shell: Shell, cond: str) -> bool | None:
    """The truth of an ``if`` condition of ``[ ... ]`` / ``[[ ... ]]`` tests joined by ``||`` / ``&&`` (None:
    undecidable)."""
    result: bool | None = None
    for joiner, part in _split_conditions(cond):
        t = _test(shell, part)
        if t is None:
            return None
        result = t if result is None else (result or t) if joiner == "||" else (result and t)
    return result


def _split_conditions(cond: str) -> list[tuple[str, str]]:
    parts = re.split(r"\s*(\|\||&&)\s*", cond.strip())
    out, joiner = [], ""
    for p in parts:
        if p in ("||", "&&"):
            joiner = p
        else:
            out.append((joiner, p))
    return out


def _test(shell: Shell, part: str) -> bool | None:
    inner = re.fullmatch(r"\[\[?\s*(.*?)\s*\]\]?", part.strip())
    if inner is None:
        return None
    w = shell.words(inner.group(1).replace("\"\"", "''"))
    raw = inner.group(1)
    if len(w) <= 2 and raw.split() and raw.split()[0] in ("-n", "-z"):
        value = w[1] if len(w) == 2 else ""
        return (value != "") if raw.split()[0] == "-n" else (value == "")
    m = re.fullmatch(r"(.*?)\s+(==|=|!=|-eq|-ne|-gt|-ge|-lt|-le)\s+(.*)", raw)
    if m is None:
        return None
    left, right = (" ".join(shell.words(x)) for x in (m.group(1), m.group(3)))
    if m.group(2) in _NUMERIC:
        if not (left.lstrip("-").isdigit() and right.lstrip("-").isdigit()):
            return None
        return _NUMERIC[m.group(2)](int(left), int(right))
    return (left == right) != (m.group(2) == "!=")


def launch_line(text: str, marker: re.Pattern[str], what: str) -> tuple[list[str], list[str], Shell]:
    """(the launcher's words before the first word matching ``marker``, the trainer's words after it, the shell's
    variables then)."""
    shell = Shell()
    lines = logical_lines(cut_heredocs(text, shell))
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r"^if\s", line):
            i = _branch(shell, lines, i)
            continue
        if _write_heredoc(shell, line):
            i += 1
            continue
        m = _ASSIGN.match(line)
        if m is not None and " " not in m.group(1):
            _assign(shell, m)
        else:
            words = shell.words(line)
            for j, w in enumerate(words):
                if marker.search(w):
                    return words[:j], words[j + 1:], shell
        i += 1
    raise AsapError(what, f"no command runs {marker.pattern} in this script")


def _branch(shell: Shell, lines: list[str], start: int) -> int:
    """Evaluate ``if ... fi`` from ``lines[start]``: run the branch whose test holds; return the line after
    ``fi``."""
    branches: list[tuple[str | None, list[str]]] = []
    depth, i = 0, start
    while i < len(lines):
        line = lines[i]
        head = re.split(r";\s*then\s*", line, maxsplit=1)
        if re.match(r"^if\s", line) and i != start:
            depth += 1
        if depth == 0 and (i == start or re.match(r"^elif\s", line)):
            branches.append((_TEST.match(head[0]).group(1) if _TEST.match(head[0]) else head[0], []))  # type: ignore
            if len(head) > 1 and head[1].strip():
                branches[-1][1].append(head[1].strip())
        elif depth == 0 and line in ("else", "then"):
            if line == "else":
                branches.append((None, []))
        elif line == "fi" or line.startswith("fi ") or line.endswith("; fi"):
            if depth == 0:
                break
            depth -= 1
            branches[-1][1].append(line)
        else:
            branches[-1][1].append(line)
        i += 1
    for cond, body in branches:
        holds = True if cond is None else _decide(shell, cond)
        if holds is None:
            if any(_ASSIGN.match(b) for b in body):
                raise AsapError("script", f"line '{lines[start][:80]}': a condition asap cannot decide sets "
                                          "variables the launch line may use")
            continue
        if holds:
            _run(shell, body)
            break
    return i + 1


def _run(shell: Shell, body: list[str]) -> None:
    i = 0
    while i < len(body):
        if re.match(r"^if\s", body[i]):
            i = _branch(shell, body, i)
            continue
        if _write_heredoc(shell, body[i]):
            i += 1
            continue
        m = _ASSIGN.match(body[i])
        if m is not None:
            _assign(shell, m)
        i += 1
