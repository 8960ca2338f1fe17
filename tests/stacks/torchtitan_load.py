"""Load an emitted torchtitan TOML with torchtitan's own ConfigManager and build its model on the meta device.

Usage: python torchtitan_load.py JOB.toml MODEL_ARGS.json -> one JSON object on stdout; with several pairs
(JOB1.toml ARGS1 JOB2.toml ARGS2 ...) a JSON list of them, from one process (torchtitan imported once; each job's
model args are a copy of its flavor's, so one job's update_from_config does not reach the next). MODEL_ARGS.json is
``asap.emit.torchtitan_model.model_args_json``: a custom flavor is registered first (``register_flavor``), as a
trainer process does. In its place, the registration file ``asap emit`` writes beside a custom flavor's TOML
(``asap_register_<model>.py``, ``asap.emit.torchtitan_model.registration_file``) is run as a module (run_name not
``__main__``: it registers, and does not start the trainer), as the emitted launch line runs it. The model is ``get_train_spec(name).model_cls`` over ``model_args[flavor]`` after its
``update_from_config(job_config)``, as torchtitan/train.py builds it.
"""

import copy
import dataclasses
import importlib.util
import json
import sys
import types

spec = importlib.util.find_spec("torchtitan")
pkg = types.ModuleType("torchtitan")
pkg.__path__ = list(spec.submodule_search_locations)
sys.modules["torchtitan"] = pkg  # skip torchtitan/__init__ (it imports its quantization converters, triton and all)

import torch  # noqa: E402
from torchtitan.config.manager import ConfigManager  # noqa: E402
from torchtitan.protocols.train_spec import get_train_spec  # noqa: E402

from asap.emit.torchtitan_model import register_flavor  # noqa: E402


def main(toml_path, args_path):
    if args_path.endswith(".py"):
        import runpy

        runpy.run_path(args_path, run_name="asap_registration")
    else:
        emitted = json.load(open(args_path))
        if not emitted["registered"]:
            register_flavor(emitted["name"], emitted["flavor"], emitted["args"])
    cfg = ConfigManager().parse_args(["--job.config_file", toml_path])
    train_spec = get_train_spec(cfg.model.name)
    model_args = copy.deepcopy(train_spec.model_args[cfg.model.flavor])
    model_args.update_from_config(cfg)
    with torch.device("meta"):
        model = train_spec.model_cls(model_args)
    p = cfg.parallelism
    return {"name": cfg.model.name, "flavor": cfg.model.flavor, "params": sum(x.numel() for x in model.parameters()),
            "tp": p.tensor_parallel_degree, "pp": p.pipeline_parallel_degree, "dp_shard": p.data_parallel_shard_degree,
            "dp_replicate": p.data_parallel_replicate_degree, "ep": p.expert_parallel_degree,
            "cp": p.context_parallel_degree, "schedule": p.pipeline_parallel_schedule,
            "fqns": p.module_fqns_per_model_part, "local_batch": cfg.training.local_batch_size,
            "global_batch": cfg.training.global_batch_size, "seq_len": cfg.training.seq_len,
            "mixed_precision_param": cfg.training.mixed_precision_param, "ac": cfg.activation_checkpoint.mode,
            "steps": cfg.training.steps, "warmup_steps": cfg.lr_scheduler.warmup_steps,
            "decay_type": cfg.lr_scheduler.decay_type, "checkpoint": [cfg.checkpoint.enable, cfg.checkpoint.interval],
            "converters": cfg.model.converters, "compile": [cfg.compile.enable, sorted(cfg.compile.components)], "modules": sorted({n.split(".")[0] for n, _ in model.named_children()}),
            "layer_names": sorted(model.layers.keys(), key=int),
            "model_args": json.loads(json.dumps(dataclasses.asdict(model_args), default=str))}


if __name__ == "__main__":
    pairs = list(zip(sys.argv[1::2], sys.argv[2::2], strict=True))
    out = [main(toml, args) for toml, args in pairs]
    print(json.dumps(out[0] if len(out) == 1 else out))
