"""Resolve ``--model``: a preset name, a native YAML/JSON model file, a Hugging Face ``config.json``, or a Hugging
Face model folder (its ``config.json``)."""

from __future__ import annotations

from pathlib import Path

from asap.errors import AsapError
from asap.spec.files import read_mapping
from asap.spec.hf import SUPPORTED, is_hf_config, model_from_hf
from asap.spec.model import ModelSpec, model_from_dict
from asap.spec.presets import MODEL_PRESETS


def load_model(spec: str | dict | ModelSpec) -> ModelSpec:
    if isinstance(spec, ModelSpec):
        return spec
    if isinstance(spec, dict):
        return model_from_hf(spec) if is_hf_config(spec) else model_from_dict(spec)
    text = str(spec)
    if text.lower() in MODEL_PRESETS:
        return model_from_dict(MODEL_PRESETS[text.lower()][0])
    path = Path(text)
    if not path.exists():
        from asap.spec.words import did_you_mean

        raise AsapError("model", f"'{text}' is neither a preset nor a file{did_you_mean(text, MODEL_PRESETS)}; "
                                 f"`asap presets` lists them")
    if path.is_dir():  # a Hugging Face model folder (a snapshot, a checkpoint): its config.json
        if not (path / "config.json").is_file():
            raise AsapError("model", f"{path} is a folder without a config.json (a Hugging Face model folder holds "
                                     "one; or give a preset, a model file or a config.json)")
        path = path / "config.json"
    data = read_mapping(path, "model")
    if is_hf_config(data):
        return model_from_hf(data)
    if path.name == "config.json" or HF_KEYS & data.keys():
        raise AsapError("model.model_type", f"{path} has no model_type: a Hugging Face config.json names its "
                                            f"architecture there (one of {', '.join(SUPPORTED)})")
    return model_from_dict(data)


# keys only a Hugging Face config.json has (a native model file spells them num_layers, ...): without model_type
# such a file is a config.json that lost its family, not a native file with unknown keys
HF_KEYS = frozenset({"architectures", "num_hidden_layers", "num_key_value_heads", "intermediate_size", "n_layer",
                     "torch_dtype", "transformers_version"})
