"""Resolve ``--model``: a preset name, a native YAML/JSON model file, or a Hugging Face ``config.json``."""

from __future__ import annotations

from pathlib import Path

from asap.errors import AsapError
from asap.spec.files import read_mapping
from asap.spec.hf import is_hf_config, model_from_hf
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
    data = read_mapping(path, "model")
    return model_from_hf(data) if is_hf_config(data) else model_from_dict(data)
