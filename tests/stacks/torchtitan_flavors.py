"""Dump torchtitan's registered flavors (torchtitan/models/*/__init__.py) as the JSON asap matches models against.

Usage: python torchtitan_flavors.py [OUT.json] -> {family: {flavor: the args dataclass as a dict}}, on stdout or
into OUT.json (src/asap/data/torchtitan_flavors.json is this script's output for torchtitan 0.2.2;
tests/emit/test_emit_arch.py checks it still is).
"""

import dataclasses
import importlib
import importlib.util
import json
import sys
import types

spec = importlib.util.find_spec("torchtitan")
pkg = types.ModuleType("torchtitan")
pkg.__path__ = list(spec.submodule_search_locations)
sys.modules["torchtitan"] = pkg  # skip torchtitan/__init__ (it imports its quantization converters, triton and all)

TABLES = {"llama3": ("torchtitan.models.llama3", "llama3_args", "TransformerModelArgs"),
          "qwen3": ("torchtitan.models.qwen3", "qwen3_args", "Qwen3ModelArgs"),
          "deepseek_v3": ("torchtitan.models.deepseek_v3", "deepseekv3_args", "DeepSeekV3ModelArgs"),
          "gpt_oss": ("torchtitan.models.gpt_oss", "gptoss_configs", "GptOssModelArgs")}


def flavors():
    out = {}
    for family, (module, table, _) in TABLES.items():
        args = getattr(importlib.import_module(module), table)
        out[family] = {name: dataclasses.asdict(a) for name, a in args.items()}
    return out


def defaults():
    """Each args class's defaults (what a flavor's arguments leave out), MoEArgs' and RoPEScalingArgs'."""
    from torchtitan.models.llama3.model.args import RoPEScalingArgs
    from torchtitan.models.moe import MoEArgs

    out = {family: dataclasses.asdict(getattr(importlib.import_module(module), cls)())
           for family, (module, _, cls) in TABLES.items()}
    out.update(moe=dataclasses.asdict(MoEArgs()), rope_scaling=dataclasses.asdict(RoPEScalingArgs()))
    return out


if __name__ == "__main__":
    text = json.dumps({"torchtitan": "0.2.2", "flavors": flavors(), "defaults": defaults()}, indent=1, sort_keys=True)
    if len(sys.argv) > 1:
        open(sys.argv[1], "w").write(text + "\n")
    else:
        print(text)
