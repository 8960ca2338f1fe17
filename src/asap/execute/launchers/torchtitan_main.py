"""``python -m asap.execute.launchers.torchtitan_main [--asap-cpu] [--asap-model-args FILE] TORCHTITAN-ARGS...``

torchtitan's own trainer (``torchtitan.train.main``), started under torchrun (or srun), after two optional
steps: ``--asap-model-args FILE`` registers the model asap emitted as a flavor of its train spec (``asap.emit.torchtitan_model.model_args_json``:
``{"name": "llama3", "flavor": "asap-tiny-dense", "args": {...}}``) so that the TOML's ``[model]`` finds it; ``--asap-cpu`` applies ``asap.execute.cpu_shims`` (a local CPU run
only). Everything else is torchtitan's command line (``--job.config_file`` etc.).
"""

from __future__ import annotations

import json
import sys


def split_argv(argv: list[str]) -> tuple[dict, list[str]]:
    """(asap's own options, the rest for torchtitan)."""
    own: dict = {"cpu": False, "model_args": None}
    rest: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--asap-cpu":
            own["cpu"] = True
        elif a == "--asap-model-args":
            own["model_args"] = next(it, None)
        elif a.startswith("--asap-model-args="):
            own["model_args"] = a.split("=", 1)[1]
        else:
            rest.append(a)
    return own, rest


def register_flavor(path: str) -> None:
    """Add the emitted model to torchtitan's flavors (``asap.emit.torchtitan_model.register_flavor``)."""
    from asap.emit.torchtitan_model import register_flavor as register

    with open(path) as f:
        doc = json.load(f)
    register(doc["name"], doc["flavor"], doc["args"])


def main(argv: list[str] | None = None) -> None:
    own, rest = split_argv(list(sys.argv[1:] if argv is None else argv))
    sys.argv = [sys.argv[0]] + rest  # before torchtitan is imported: its parser reads sys.argv at import
    if own["cpu"]:
        from asap.execute import cpu_shims

        cpu_shims.apply_all()
    if own["model_args"]:
        register_flavor(own["model_args"])
    from torchtitan.train import Trainer, main as torchtitan_main

    torchtitan_main(Trainer)


if __name__ == "__main__":
    main()
