"""``asap.cli.main`` imports only the module of the command it runs (``COMMAND_MODULES``): the table must name
every command, each with the module that registers it, and a run of one command must not import the others."""
from __future__ import annotations

import json
import subprocess
import sys

import typer.main

from asap.cli import COMMAND_MODULES, app, command_named, register_commands


def test_table_names_every_command_with_its_module():
    register_commands()
    group = typer.main.get_command(app)
    registered = {name: cmd.callback.__module__.rsplit(".", 1)[-1] for name, cmd in group.commands.items()}
    assert registered == COMMAND_MODULES


def test_command_named_skips_root_options():
    assert command_named(["--help"]) is None
    assert command_named([]) is None
    assert command_named(["estimate", "-m", "x"]) == "estimate"


def test_one_command_imports_only_its_module():
    code = ("import json, sys; from asap.cli import main\n"
            "try:\n    main(['presets', '--json'])\nexcept SystemExit:\n    pass\n"
            "print(json.dumps([m for m in sys.modules if m.startswith('asap.cli.')]), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert "asap.cli.estimate" in loaded
    assert not {"asap.cli.schedule", "asap.cli.agents", "asap.cli.plan", "asap.cli.diagnose"} & set(loaded)
