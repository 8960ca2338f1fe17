"""The NVFP4 recipe emitted as Megatron-LM and Megatron-Bridge spell it (issue 46.3), checked against megatron-core
0.16's TransformerConfig and Megatron-Bridge 0.3.1's registered mixed-precision recipes in their own process."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asap.spec.job import Job
from asap.emit import emit
from asap.errors import AsapError
from asap.spec.strategy import resolve_strategy

STACKS = Path(__file__).parents[1] / "stacks"
PROBE = """
import dataclasses, json, sys
sys.path.insert(0, sys.argv[1])
import bridge_env
bridge_env.setup()
from megatron.bridge.training import mixed_precision as mp
import megatron.core.transformer.transformer_config as tc
c = mp.MIXED_PRECISION_RECIPES[sys.argv[2]]()
f = {x.name: x for x in dataclasses.fields(tc.TransformerConfig)}
print(json.dumps({"fp4": c.fp4, "fp4_recipe": c.fp4_recipe, "bf16": c.bf16,
                  "fp4_flag": f["fp4"].metadata["argparse_meta"]["arg_names"], "recipes": str(f["fp4_recipe"].type)}))
"""


def job(precision):
    return Job.from_names("llama3-8b", "gb200", 16, 8192, precision, nodes=2)


def run(fmt, precision):
    j = job(precision)
    return emit(fmt, j, resolve_strategy("mbs=2", j.model, j.train, j.devices, framework=j.framework))


def test_megatron_writes_te_s_nvfp4_recipe_and_refuses_mxfp4():
    text = run("megatron", "nvfp4")
    assert "--bf16" in text and "--fp4-format e2m1" in " ".join(text.split()) and "--fp4-recipe nvfp4" in text
    with pytest.raises(AsapError, match="precision: megatron cannot express mxfp4"):
        run("megatron", "mxfp4")
    with pytest.raises(AsapError, match="precision: megatron-bridge cannot express mxfp4"):
        run("megatron-bridge", "mxfp4")


def test_the_spellings_are_the_stacks_own():
    text = run("megatron-bridge", "nvfp4")
    assert "mixed_precision: bf16_with_nvfp4_mixed" in text
    try:
        out = subprocess.run([sys.executable, "-c", PROBE, str(STACKS), "bf16_with_nvfp4_mixed"], capture_output=True,
                             text=True, timeout=600, check=True).stdout
    except subprocess.CalledProcessError as e:
        if "no .venv-bridge" in e.stderr:
            pytest.skip("no .venv-bridge")
        raise
    got = json.loads(out.strip().splitlines()[-1])
    assert (got["fp4"], got["fp4_recipe"], got["bf16"]) == ("e2m1", "nvfp4", True)
    assert got["fp4_flag"] == ["--fp4-format"] and "'nvfp4'" in got["recipes"]


def test_the_bridge_recipe_reads_back_as_nvfp4(tmp_path):
    """(Megatron-LM's reader keeps refusing --fp4-format: the core_v0.14.0 arguments.py it checks flags against
    predates fp4.)"""
    from asap.emit.read import read_job
    from asap.spec.hardware import load_cluster

    for fmt, name in (("megatron-bridge", "run.yaml"),):
        path = tmp_path / name
        path.write_text(run(fmt, "nvfp4"))
        got = read_job(path, fmt, cluster=load_cluster("gb200", nodes=2))
        assert got.train.precision == "nvfp4", fmt
