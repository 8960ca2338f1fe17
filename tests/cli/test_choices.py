"""Every enum-like option of the CLI takes exactly the code's own values: its help lists them, and anything else
(a typo such as ``--executor torchtitann``) is refused by the option itself with one line naming the option and
every choice, exit 2 (issue 45, points 5 and 13)."""

import re

import pytest

from asap.cli import _register_commands, app, main


def code_values() -> dict[str, tuple[str, ...]]:
    """Each kind of choice as the code that acts on it spells it."""
    from asap.emit import FORMATS
    from asap.emit.read import READ_FORMATS
    from asap.execute.factory import ExecutorKind
    from asap.execute.launch import Launcher
    from asap.runners.common import BACKENDS, DEVICE_REQUESTS, RUN_PRECISIONS
    from asap.spec.framework import FRAMEWORK_NAMES
    from asap.spec.knobs import SCHEDULES
    from asap.spec.train import PRECISIONS

    return {"precision": tuple(PRECISIONS), "run-precision": tuple(RUN_PRECISIONS),
            "framework": tuple(FRAMEWORK_NAMES) + ("megatron-bridge",), "format": tuple(FORMATS), "read-format": tuple(READ_FORMATS),
            "executor": tuple(e.value for e in ExecutorKind), "launcher": tuple(x.value for x in Launcher),
            "backend": tuple(BACKENDS), "device": tuple(DEVICE_REQUESTS), "schedule": tuple(SCHEDULES)}


# (command, option) -> the kind of its values (code_values)
ENUM_OPTIONS = {
    **{(cmd, "--precision"): "precision" for cmd in ("estimate", "plan", "compare", "propose", "tune", "emit",
                                                     "balance", "diagnose")},
    **{(cmd, "--framework"): "framework" for cmd in ("estimate", "plan", "compare", "propose", "tune", "emit",
                                                     "validate")},
    ("emit", "--format"): "format", ("plan", "--emit"): "format", ("read", "--format"): "read-format", ("tune", "--executor"): "executor",
    ("tune", "--launcher"): "launcher", ("run", "--backend"): "backend", ("run", "--precision"): "run-precision",
    ("run", "--device"): "device", ("align", "--device"): "device", ("calibrate", "--device"): "device",
    ("align", "--a-precision"): "run-precision", ("align", "--b-precision"): "run-precision",
    ("schedule", "--schedule"): "schedule"}
# an option of one of these names takes values from a fixed set: it must be in ENUM_OPTIONS
ENUM_NAMES = {"--precision", "--framework", "--format", "--emit", "--executor", "--launcher", "--backend", "--device",
              "--schedule", "--a-precision", "--b-precision", "--dispatcher", "--recompute"}


def options() -> dict[tuple[str, str], object]:
    import typer.main

    _register_commands()
    group = typer.main.get_command(app)
    return {(name, p.opts[0]): p for name, cmd in group.commands.items() for p in cmd.params if p.opts}


def test_every_enum_like_option_is_checked():
    found = {key for key in options() if key[1] in ENUM_NAMES}
    assert found == set(ENUM_OPTIONS), found ^ set(ENUM_OPTIONS)


@pytest.mark.parametrize("key", sorted(ENUM_OPTIONS))
def test_help_lists_the_codes_values(key):
    param = options()[key]
    shown = re.search(r"Choices: ([^.]*)\.", param.help)
    assert shown, param.help
    assert tuple(shown.group(1).split(" | ")) == code_values()[ENUM_OPTIONS[key]]


@pytest.mark.parametrize("key", sorted(ENUM_OPTIONS))
def test_a_typo_is_refused_with_the_choices(key, capsys):
    cmd, opt = key
    value = code_values()[ENUM_OPTIONS[key]][1] + "n"  # torchtitann, fp16n, ...
    with pytest.raises(SystemExit) as e:
        main([cmd, opt, value])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert f"'{opt}'" in err and f"unknown {ENUM_OPTIONS[key].split('-')[-1]} {value!r}" in err, err
    listed = re.search(r"\(one of: (.*)\)$", err).group(1).split(", ")
    assert tuple(listed) == code_values()[ENUM_OPTIONS[key]]


def test_tune_executor_typo(capsys):
    """The issue's own command: a typo names the executor unknown, not '--executor command needs --launch'."""
    with pytest.raises(SystemExit) as e:
        main(["tune", "-m", "llama3-8b", "-c", "dgx-h100-8", "-b", "64", "-s", "4096", "--executor", "torchtitann"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "unknown executor 'torchtitann'" in err and "torchtitan" in err
    assert "--launch" not in err


def estimate_json(framework, capsys) -> dict:
    import json

    with pytest.raises(SystemExit) as e:
        main(["estimate", "-m", "llama3-8b", "-c", "dgx-h100-8", "-b", "64", "-s", "4096", "--framework", framework,
              "-S", "tp2", "--json"])
    assert e.value.code == 0
    return json.loads(capsys.readouterr().out)


def test_megatron_bridge_is_priced_as_megatron(capsys):
    """``--framework megatron-bridge`` (the stack a user runs) prices Megatron-Core's semantics, as megatron."""
    assert estimate_json("megatron-bridge", capsys)["step_time_s"] == estimate_json("megatron", capsys)["step_time_s"]


def test_readme_validate_row_claims_only_what_validate_prints():
    """The README's validate row said it reports "in-sample and held out by source, stack and hardware family";
    validate prints in-sample figures (the held-out ones are benchmarks/loso.py's, docs/accuracy.md)."""
    import json

    from conftest import REPO, run_cli

    row = next(ln for ln in (REPO / "README.md").read_text().splitlines() if ln.startswith("| `asap validate"))
    out = run_cli("validate", "--json", timeout=600)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    claims_held_out = "in-sample and held out" in row
    assert not claims_held_out or any("held" in k for k in printed), row


def test_stage_split_line_names_the_search_that_ran():
    """A split the greedy fill or the dynamic programme found is not "placed by the stage ILP"."""
    from asap.cli.plan import stage_split_line

    line = stage_split_line(1, None, {"adopted": True, "layers_per_stage": [9, 8, 8, 7], "default_split_step_time_s": 1.0,
                                      "solver": "balanced greedy fill (the stage time capped by bisection)"})
    assert "ILP" not in line and "layer-split search (balanced greedy fill" in line
