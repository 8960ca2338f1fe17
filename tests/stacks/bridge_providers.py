"""Dump Megatron-Bridge 0.3.1's stock model providers (their architecture fields) as the JSON asap matches models
against. Runs on .venv-bridge (tests/stacks/bridge_env.py).

Usage: python bridge_providers.py [OUT.json] (src/asap/data/bridge_providers.json is this script's output;
tests/emit/test_emit_arch.py checks it still is).
"""

import dataclasses
import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bridge_env  # noqa: E402

bridge_env.setup()
sys.path.insert(0, str(Path(__file__).parents[2] / "src"))
from asap.emit.megatron_bridge import ARCH_FIELDS, PROVIDER_MODULES  # noqa: E402


def value(v):
    if callable(v):
        return getattr(v, "__name__", str(v))
    if isinstance(v, (list, tuple)):
        return [value(x) for x in v]
    return v if isinstance(v, (int, float, str, bool, type(None))) else str(v)


def fields_of(obj):
    names = {f.name for f in dataclasses.fields(obj)}
    return {k: value(getattr(obj, k)) for k in ARCH_FIELDS if k in names}


def dump():
    out = {}
    for module, classes in PROVIDER_MODULES.items():
        m = importlib.import_module(module)
        for cls in classes:
            out[f"{module}.{cls}"] = fields_of(getattr(m, cls)())
    return {"megatron_bridge": "0.3.1", "providers": out}


if __name__ == "__main__":
    text = json.dumps(dump(), indent=1, sort_keys=True)
    if len(sys.argv) > 1:
        open(sys.argv[1], "w").write(text + "\n")
    else:
        print(text)
