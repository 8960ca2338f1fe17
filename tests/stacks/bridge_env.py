"""Import Megatron-Bridge 0.3.1 (and the megatron-core 0.16.0 it needs) from ``.venv-bridge``, a pip ``--target``
folder beside the shared venv's megatron-core 0.14.0, in a process of its own.

``megatron.bridge``'s package ``__init__`` files import its Hugging Face conversion layer (transformers) and its
PEFT adapters (Transformer Engine, which has no CPU build): skipped, as tests/stacks/torchtitan_load.py skips
torchtitan's; ``megatron.bridge.models`` gets the two names ``training/config.py`` imports from it.
"""

import importlib
import os
import sys
import types
from pathlib import Path


def site() -> Path:
    for candidate in (os.environ.get("ASAP_BRIDGE_SITE"), Path(__file__).parents[2] / ".venv-bridge",
                      Path(__file__).parents[3] / "main" / ".venv-bridge"):
        if candidate and (Path(candidate) / "megatron" / "bridge").is_dir():
            return Path(candidate)
    raise SystemExit("no .venv-bridge (pip install --no-deps --target .venv-bridge megatron-bridge==0.3.1 ...)")


def setup() -> None:
    root = site()
    sys.path.insert(0, str(root))
    for name in [k for k in sys.modules if k == "megatron" or k.startswith("megatron.")]:
        del sys.modules[name]
    import megatron

    megatron.__path__ = [str(root / "megatron")]
    bridge = root / "megatron" / "bridge"
    for name in ("megatron.bridge", "megatron.bridge.models", "megatron.bridge.training", "megatron.bridge.peft",
                 "megatron.bridge.models.llama", "megatron.bridge.models.qwen", "megatron.bridge.models.deepseek",
                 "megatron.bridge.models.mistral", "megatron.bridge.models.gpt_oss"):
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(bridge / name[len("megatron.bridge."):].replace(".", "/"))] if "." in name[9:] else \
            [str(bridge)]
        sys.modules[name] = pkg
    models = sys.modules["megatron.bridge.models"]
    models.GPTModelProvider = importlib.import_module("megatron.bridge.models.gpt_provider").GPTModelProvider
    models.T5ModelProvider = importlib.import_module("megatron.bridge.models.t5_provider").T5ModelProvider
