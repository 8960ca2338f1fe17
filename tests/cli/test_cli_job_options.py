"""The job's options declared once for every command (asap.cli.common), loaded through ``Job.from_names``."""

import inspect

import pytest

from asap.cli.common import JOB_OPTIONS, JobOptions
from asap.errors import AsapError


def test_every_command_takes_the_one_declaration_of_each_job_option():
    from asap.cli import app, register_commands

    register_commands()
    commands = {c.callback.__name__: c.callback for c in app.registered_commands}
    for name in ("estimate", "plan", "compare", "propose", "tune", "emit_command"):
        params = inspect.signature(commands[name]).parameters
        shared = [k for k in JOB_OPTIONS if k in params and params[k].default is JOB_OPTIONS[k][1]]
        assert {"model", "cluster", "global_batch", "seq_len", "precision", "nodes", "devices"} <= set(shared), name
        assert "options" not in params, name


def test_options_load_with_one_line_errors_and_print_back():
    opts = JobOptions("tiny-dense", "local-cpu", 8, 64, "fp32", devices=2, fused_kernels=False, lengths="x.json")
    assert opts.args() == "-m tiny-dense -c local-cpu --devices 2 -b 8 -s 64 --precision fp32 --eager-kernels --lengths x.json"
    assert opts.job_without_lengths().framework.name == "asap"
    # load applies every option, --lengths included: a missing lengths file is one line
    with pytest.raises(AsapError, match="lengths: no such file: x.json"):
        opts.load()
    with pytest.raises(AsapError, match="global-batch: must be a positive integer"):
        JobOptions("tiny-dense", "local-cpu", 0, 64).load()
