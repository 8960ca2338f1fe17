"""Load an emitted MaxText YAML with MaxText 0.2.5's own pyconfig and count the parameters of its model.

Runs in MaxText's Python (>= 3.12; /work/main/.venv-maxtext): python maxtext_load.py DEVICES EMITTED.yml... ->
one JSON list on stdout. The YAML goes on top of MaxText's base.yml (``base_config``), on DEVICES virtual CPU
devices; the model is ``model_creation_utils.from_config`` on the emitted mesh and its parameters come from
``maxtext_utils.get_abstract_param`` (``jax.eval_shape`` of its init: shapes only, no weights).
"""

import json
import os
import sys
import tempfile


def load(path):
    out = tempfile.mkdtemp()
    full = os.path.join(out, "job.yml")
    with open(full, "w") as f:
        text = open(path).read()  # asap's YAML names its base (base_config); an older one did not
        f.write(text if "base_config:" in text else "base_config: base.yml\n" + text)
    from maxtext.configs import pyconfig
    from maxtext.utils import max_utils, maxtext_utils, model_creation_utils

    cfg = pyconfig.initialize(["train", full, "hardware=cpu", "skip_jax_distributed_system=true", "run_name=t",
                               f"base_output_directory={out}", "dataset_type=synthetic", "attention=dot_product",
                               "enable_checkpointing=false"])
    mesh = maxtext_utils.get_mesh_from_config(cfg)
    model = model_creation_utils.from_config(cfg, mesh=mesh)
    params = maxtext_utils.get_abstract_param(model, cfg)["params"]
    return {"params": int(max_utils.calculate_num_params_from_pytree(params)), "mesh": dict(mesh.shape),
            "decoder_block": str(cfg.decoder_block), "layers": cfg.num_decoder_layers, "emb": cfg.emb_dim,
            "experts": cfg.num_experts, "attention_type": str(cfg.attention_type), "mtp": cfg.mtp_num_layers,
            "rope": cfg.rope_max_timescale, "batch": cfg.global_batch_size_to_train_on,
            "seq": cfg.max_target_length, "remat": cfg.remat_policy, "dtype": str(cfg.dtype),
            "keys": {k: _plain(getattr(cfg, k, None)) for k in json.loads(os.environ.get("ASAP_MAXTEXT_KEYS", "[]"))}}


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v if isinstance(v, (int, float, str, bool, type(None))) else str(v)


if __name__ == "__main__":
    os.environ.setdefault("DECOUPLE_GCLOUD", "TRUE")
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={int(sys.argv[1])}"
    print(json.dumps([load(p) for p in sys.argv[2:]]))
