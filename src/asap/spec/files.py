"""Reading YAML/JSON input files with one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from asap.errors import AsapError


def read_mapping(path: Path, what: str) -> dict[str, Any]:
    """Parse ``path`` as JSON (``.json``) or YAML (anything else) and require a mapping at the top."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise AsapError(what, f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise AsapError(what, f"{path} is not UTF-8 text (byte {e.start}: {e.reason})") from None
    if str(path).endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise AsapError(what, f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    else:
        data = _yaml_mapping(text, path, what)
    if not isinstance(data, dict):
        raise AsapError(what, f"{path} must hold a mapping at the top level, got {type(data).__name__}")
    return data


def _yaml_mapping(text: str, path: Path, what: str) -> Any:
    """``text`` parsed as YAML (PyYAML imported here: the presets and JSON files never need it)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise AsapError(what, f"{path} is not valid YAML{where}") from None


def write_whole(path: Path, text: str, what: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file beside it, then an atomic rename); an
    unwritable path is one AsapError naming ``what``."""
    import os

    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise AsapError(what, f"cannot write {path}: {e.strerror or e}") from None
