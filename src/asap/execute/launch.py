"""Launch presets for the ``command`` executor: what goes before the stack's own command line.

* ``local``: nothing (the template is the whole command: a single-controller stack such as MaxText, a
  ``deepspeed`` or ``msrun`` launcher, a script);
* ``torchrun``: ``torchrun --nnodes {nodes} --nproc-per-node {devices_per_node} --rdzv-backend c10d
  --rdzv-endpoint {master_addr}:{master_port}`` (one node: run it there; several: run it on each);
* ``srun``: Slurm starts one torchrun per node, ``srun --nodes {nodes} --ntasks-per-node 1
  --kill-on-bad-exit=1 torchrun ...`` as above, with ``{master_addr}`` the job's first host
  (``scontrol show hostnames $SLURM_JOB_NODELIST | head -n1``, passed with ``--var master_addr=...``).

``{nodes}`` and ``{devices_per_node}`` default to the cluster's, ``{master_addr}`` to localhost and
``{master_port}`` to 29500; ``--var KEY=VALUE`` overrides any of them.
"""

from __future__ import annotations

import shlex
from enum import Enum
from typing import Any

from asap.errors import AsapError

TORCHRUN = ["torchrun", "--nnodes", "{nodes}", "--nproc-per-node", "{devices_per_node}", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "{master_addr}:{master_port}"]


class Launcher(str, Enum):
    LOCAL = "local"
    TORCHRUN = "torchrun"
    SRUN = "srun"


PREFIX: dict[Launcher, list[str]] = {
    Launcher.LOCAL: [],
    Launcher.TORCHRUN: TORCHRUN,
    Launcher.SRUN: ["srun", "--nodes", "{nodes}", "--ntasks-per-node", "1", "--kill-on-bad-exit=1"] + TORCHRUN,
}


def launcher(name: str) -> Launcher:
    try:
        return Launcher(name)
    except ValueError:
        raise AsapError("launcher", f"must be one of {', '.join(option.value for option in Launcher)}, got {name!r}") from None


def launch_argv(name: str, template: str) -> list[str]:
    """The preset's prefix followed by the template's arguments (split like a shell, never run by one)."""
    try:
        program = shlex.split(template)
    except ValueError as e:
        raise AsapError("launch", f"cannot split the template: {e}") from None
    if not program:
        raise AsapError("launch", "the template is empty")
    return PREFIX[launcher(name)] + program


def default_variables(cluster) -> dict[str, Any]:
    return {"nodes": cluster.nodes, "devices_per_node": cluster.devices_per_node, "master_addr": "localhost",
            "master_port": 29500}


def parse_variables(items: list[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` pairs (``--var``), each checked."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise AsapError("var", f"must be KEY=VALUE with KEY a name, got {item!r}")
        out[key.strip()] = value
    return out
