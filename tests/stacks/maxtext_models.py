"""Dump MaxText's model definitions (configs/models/*.yml) and base.yml's defaults of the architecture keys asap
writes, as the JSON asap matches models against.

Usage: python maxtext_models.py MAXTEXT_CONFIGS_DIR [OUT.json] (src/asap/data/maxtext_models.json is this
script's output for MaxText 0.2.5; tests/emit/test_emit_arch.py checks it still is).
"""

import json
import sys
from pathlib import Path

import yaml

FAMILIES = ("llama2-", "llama3", "mistral-", "mixtral-", "qwen3-", "deepseek2-", "deepseek3-", "gpt-oss-")


def model_names(configs: Path) -> set[str]:
    """The ``model_name`` values MaxText's config class accepts (configs/types.py ``ModelName``, a Literal)."""
    import ast

    for node in ast.walk(ast.parse((configs / "types.py").read_text())):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "ModelName":
            return {e.value for e in node.value.slice.elts}
    raise SystemExit("no ModelName in configs/types.py")


def dump(configs: Path) -> dict:
    from asap.emit.maxtext_model import ARCH_KEYS

    base = yaml.safe_load((configs / "base.yml").read_text())
    valid = model_names(configs)
    models = {}
    for path in sorted((configs / "models").glob("*.yml")):
        if path.stem.startswith(FAMILIES) and path.stem in valid:
            d = yaml.safe_load(path.read_text()) or {}
            models[path.stem] = {k: v for k, v in d.items() if k in ARCH_KEYS}
    return {"maxtext": "0.2.5", "defaults": {k: base.get(k) for k in ARCH_KEYS}, "models": models}


if __name__ == "__main__":
    text = json.dumps(dump(Path(sys.argv[1])), indent=1, sort_keys=True)
    if len(sys.argv) > 2:
        open(sys.argv[2], "w").write(text + "\n")
    else:
        print(text)
